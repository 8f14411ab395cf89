"""Wall-clock seconds of a :class:`~obsbus.Timestamp`: floats that also read as timedeltas."""

from __future__ import annotations

import math
from datetime import timedelta
from numbers import Real

from obsbus._check import is_number

__all__ = ["Seconds", "to_seconds"]

_INF = math.inf


class Seconds(float):
    """Seconds as a ``float``, which also behaves like Composer's ``datetime.timedelta``.

    Composer's ``Timestamp.total_wct`` is a ``timedelta``; obsbus keeps float
    seconds (cheaper on every step, and what metrics want). So that Composer
    code reads it unchanged, ``Seconds`` has ``total_seconds()``, compares with
    a ``timedelta`` and adds one.

    Example:
        >>> from datetime import timedelta
        >>> wct = Seconds(90.0)
        >>> wct.total_seconds(), wct == timedelta(seconds=90), wct + timedelta(seconds=30)
        (90.0, True, 120.0)
        >>> wct / 60
        1.5
    """

    __slots__ = ()

    def total_seconds(self) -> float:
        """The seconds as a plain float (``timedelta.total_seconds``)."""
        return float(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, timedelta):
            return float(self) == other.total_seconds()
        return float.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = float.__hash__

    def __lt__(self, other: object) -> bool:
        plain = _plain(other)
        return NotImplemented if plain is None else float(self) < plain

    def __le__(self, other: object) -> bool:
        plain = _plain(other)
        return NotImplemented if plain is None else float(self) <= plain

    def __gt__(self, other: object) -> bool:
        plain = _plain(other)
        return NotImplemented if plain is None else float(self) > plain

    def __ge__(self, other: object) -> bool:
        plain = _plain(other)
        return NotImplemented if plain is None else float(self) >= plain

    def __add__(self, other: object) -> Seconds:
        plain = _plain(other)
        return NotImplemented if plain is None else Seconds(float(self) + plain)

    __radd__ = __add__

    def __sub__(self, other: object) -> Seconds:
        plain = _plain(other)
        return NotImplemented if plain is None else Seconds(float(self) - plain)

    def __rsub__(self, other: object) -> Seconds:
        plain = _plain(other)
        return NotImplemented if plain is None else Seconds(plain - float(self))

    def __repr__(self) -> str:
        return float.__repr__(self)


def _plain(value: object) -> float | None:
    """Seconds of a number or a timedelta; None for anything else (NotImplemented)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Real):
        return float(value)
    return None


def to_seconds(value: object, field: str) -> float:
    """``value`` (seconds or a ``timedelta``) as float seconds, checked for ``field``.

    Raises:
        TypeError: not a number of seconds nor a ``timedelta``.
        ValueError: negative, nan or infinite.
    """
    if type(value) is float and 0.0 <= value < _INF:
        return value
    accepted = "a number of seconds >= 0 (an int or float) or a datetime.timedelta"
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif not is_number(value, real=True):
        raise TypeError(f"Timestamp {field} must be {accepted}, got {value!r}.")
    else:
        seconds = float(value)
    if not 0.0 <= seconds < _INF:  # nan fails this too
        raise ValueError(f"Timestamp {field} must be {accepted}, got {value!r}.")
    return seconds
