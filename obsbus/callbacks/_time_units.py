"""The ``time_unit`` argument Composer's ``SpeedMonitor`` and ``RuntimeEstimator`` take."""

from __future__ import annotations

__all__ = ["TIME_UNITS", "seconds_per_unit"]

#: Accepted ``time_unit`` values -> seconds in one unit (Composer's four).
TIME_UNITS: dict[str, float] = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}


def seconds_per_unit(owner: str, time_unit: object) -> float:
    """Seconds in one ``time_unit``, or a TypeError/ValueError that lists the accepted units.

    Example:
        >>> seconds_per_unit("SpeedMonitor", "minutes")
        60.0
        >>> seconds_per_unit("SpeedMonitor", "h")
        Traceback (most recent call last):
        ...
        ValueError: SpeedMonitor time_unit 'h' is not supported; accepted: 'seconds', ...
    """
    accepted = ", ".join(repr(u) for u in TIME_UNITS)
    if not isinstance(time_unit, str):
        raise TypeError(f"{owner} time_unit must be a str, one of {accepted}; got {time_unit!r}.")
    if time_unit not in TIME_UNITS:
        raise ValueError(f"{owner} time_unit {time_unit!r} is not supported; accepted: {accepted}.")
    return TIME_UNITS[time_unit]
