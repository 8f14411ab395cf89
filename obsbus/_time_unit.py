"""TimeUnit, and the parsing and checking of time values behind :class:`obsbus.Time`."""

from __future__ import annotations

import math
import re
from enum import StrEnum

from obsbus._check import is_number

__all__ = ["FractionalCountError", "TimeInputError", "TimeUnit", "TimeUnitMismatchError"]

Number = int | float


class TimeUnit(StrEnum):
    """The units a :class:`~obsbus.Time` is counted in; the value is the string suffix.

    As in Composer, a unit is found case-insensitively by its value or its name.

    Example:
        >>> TimeUnit("EP"), TimeUnit("batch"), TimeUnit.TOKEN.value
        (<TimeUnit.EPOCH: 'ep'>, <TimeUnit.BATCH: 'ba'>, 'tok')
    """

    EPOCH = "ep"
    BATCH = "ba"
    SAMPLE = "sp"
    TOKEN = "tok"
    DURATION = "dur"
    SECOND = "sec"
    ITERATION = "iter"

    @classmethod
    def _missing_(cls, value: object) -> TimeUnit | None:
        if isinstance(value, str):
            key = value.strip().lower()
            for member in cls:
                if key in (member.value, member.name.lower()):
                    return member
        return None


# Where Composer raises another type than obsbus's rule (TypeError for a wrong type,
# ValueError for a wrong value), the error is both, so Composer's `except` clauses port.


class TimeUnitMismatchError(TypeError, RuntimeError):
    """Two times in different units were combined or compared.

    A ``TypeError`` (a wrong operand) that is also the ``RuntimeError`` Composer raises.
    """


class TimeInputError(TypeError, RuntimeError):
    """``Time.from_input`` got no time: a wrong type, or a bare number without a unit.

    A ``TypeError`` that is also the ``RuntimeError`` Composer raises.
    """


class FractionalCountError(ValueError, TypeError):
    """A fractional number of epochs, batches, samples, tokens or iterations (``"1.5ep"``).

    A ``ValueError`` (a wrong value) that is also the ``TypeError`` Composer raises.
    """


INTEGRAL_UNITS = frozenset(
    {TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE, TimeUnit.TOKEN, TimeUnit.ITERATION}
)
UNIT_NAMES = {
    TimeUnit.EPOCH: "epochs",
    TimeUnit.BATCH: "batches",
    TimeUnit.SAMPLE: "samples",
    TimeUnit.TOKEN: "tokens",
    TimeUnit.ITERATION: "iterations",
}
ACCEPTED = (
    "a non-negative number followed by a unit, one of "
    + ", ".join(u.value for u in TimeUnit)
    + " (e.g. '100ba', '2ep', '512sp', '1e6tok', '0.5dur', '30sec'; any case), "
    "or a wall-clock duration such as '1h30m', '45m' or '2h15m30s'"
)
UNITS = ", ".join(u.value for u in TimeUnit)

_NUMBER = r"(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?"
_UNIT_RE = re.compile(rf"^(?P<sign>[+-]?)(?P<num>{_NUMBER})(?P<unit>[a-z]+)$")
_CLOCK_RE = re.compile(
    r"^(?:(?P<d>\d+(?:\.\d+)?)d)?(?:(?P<h>\d+(?:\.\d+)?)h)?"
    r"(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$"
)
_CLOCK_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def bad(text: object, reason: str, name: str | None) -> str:
    """The message for a value that is not a time: it names ``name`` when it is known."""
    if name:
        return f"{name} {text!r} is not a valid time: {reason}"
    return f"Invalid time string {text!r}: {reason}"


def to_unit(unit: str) -> TimeUnit:
    """``unit`` as a TimeUnit (any case, value or name), or a ValueError listing the units."""
    try:
        return TimeUnit(unit)
    except ValueError:
        raise ValueError(f"Unknown time unit {unit!r}; accepted: {UNITS}.") from None


def check_value(
    value: object, unit: TimeUnit, text: object = None, name: str | None = None
) -> Number:
    """``value`` as the number a Time in ``unit`` holds: int for counters, float for ``dur``."""
    if text is None:
        text = f"{value}{unit.value}"
    if not is_number(value):
        if name:
            raise TypeError(f"{name} {value!r} is not a valid time: it must be an int or float.")
        raise TypeError(f"Time value must be an int or float, got {value!r}.")
    if math.isnan(value) or math.isinf(value):
        if name:
            raise ValueError(bad(text, "it must be finite.", name))
        raise ValueError(f"Time value must be finite, got {text!r}.")
    if unit is TimeUnit.DURATION:
        return float(value)
    if unit in INTEGRAL_UNITS:
        if value != int(value):
            raise FractionalCountError(
                bad(
                    text,
                    f"a number of {UNIT_NAMES[unit]} must be a whole number (accepted: "
                    f"{ACCEPTED}). To fix, round it, or use a fraction of the run such as "
                    "'0.5dur'.",
                    name,
                )
            )
        return int(value)
    return value


def parse(text: object, name: str | None = None) -> tuple[Number, TimeUnit]:
    """``(value, unit)`` of a time string; the errors quote it and list what is accepted."""
    if not isinstance(text, str):
        if name:
            raise TypeError(f"{name} {text!r} is not a valid time: expected {ACCEPTED}.")
        raise TypeError(f"Time string must be a str, got {text!r}; expected {ACCEPTED}.")
    compact = text.strip().replace(" ", "").lower()
    match = _UNIT_RE.match(compact)
    if match is not None and match["unit"] in TimeUnit._value2member_map_:
        unit = TimeUnit(match["unit"])
        if match["sign"] == "-":
            raise ValueError(bad(text, f"time must not be negative; expected {ACCEPTED}.", name))
        num_text = match["num"].replace("_", "")
        value: Number
        if num_text.isdigit():
            value = int(num_text)  # exact, however large
        else:
            num = float(num_text)
            integral = num.is_integer() and (unit in INTEGRAL_UNITS or "." not in num_text)
            value = int(num) if integral else num
        return check_value(value, unit, text, name), unit
    clock = _CLOCK_RE.match(compact)
    if compact and clock is not None and any(clock.groupdict().values()):
        seconds = sum(
            (float(v) * _CLOCK_SECONDS[k] for k, v in clock.groupdict().items() if v), 0.0
        )
        return (int(seconds) if seconds.is_integer() else seconds), TimeUnit.SECOND
    raise ValueError(bad(text, f"expected {ACCEPTED}.", name))
