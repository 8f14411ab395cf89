"""The ``time_unit`` argument Composer's ``SpeedMonitor`` and ``RuntimeEstimator`` take."""

from __future__ import annotations

from obsbus._check import check_choice

__all__ = ["TIME_UNITS", "UNIT_LABELS", "seconds_per_unit", "unit_label"]

#: Accepted ``time_unit`` values -> seconds in one unit (Composer's four).
TIME_UNITS: dict[str, float] = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}

#: Accepted ``time_unit`` values -> the short unit shown after a value (``metric_units``).
UNIT_LABELS: dict[str, str] = {"seconds": "s", "minutes": "min", "hours": "h", "days": "d"}


def seconds_per_unit(owner: str, time_unit: object) -> float:
    """Seconds in one ``time_unit``, or a TypeError/ValueError that lists the accepted units.

    Example:
        >>> seconds_per_unit("SpeedMonitor", "minutes")
        60.0
        >>> seconds_per_unit("SpeedMonitor", "h")
        Traceback (most recent call last):
        ...
        ValueError: SpeedMonitor time_unit must be one of 'seconds', ..., got 'h'.
        >>> seconds_per_unit("SpeedMonitor", "hrs")
        Traceback (most recent call last):
        ...
        ValueError: SpeedMonitor time_unit must be one of ... got 'hrs'. Did you mean 'hours'?
    """
    return TIME_UNITS[check_choice(owner, "time_unit", time_unit, TIME_UNITS)]


def unit_label(owner: str, time_unit: object) -> str:
    """The short unit of a ``time_unit`` (``"hours"`` -> ``"h"``), checked as above.

    Example:
        >>> unit_label("SpeedMonitor", "hours"), unit_label("RuntimeEstimator", "seconds")
        ('h', 's')
    """
    return UNIT_LABELS[check_choice(owner, "time_unit", time_unit, TIME_UNITS)]
