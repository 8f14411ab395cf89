"""The :class:`Time` value (re-exported by :mod:`obsbus.time`)."""

from __future__ import annotations

from types import GenericAlias
from typing import Any, Union

from obsbus._time_unit import (
    INTEGRAL_UNITS,
    Number,
    TimeInputError,
    TimeUnit,
    TimeUnitMismatchError,
    bad,
    check_value,
    parse,
    to_unit,
)

__all__ = ["Time", "TimeLike"]

TimeLike = Union["Time", str, int, float]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Time:
    """An amount of training time in one unit, with Composer's arithmetic.

    Example:
        >>> Time.from_timestring("100ba"), Time.from_timestring("1EP"), Time.from_batch(3)
        (Time(100, 'ba'), Time(1, 'ep'), Time(3, 'ba'))
        >>> Time.from_timestring("1e6tok").value, Time.from_timestring("1h30m")
        (1000000, Time(5400, 'sec'))
        >>> Time(40, "ba") < "100ba", Time(3, "ep") + "2ep", -Time(1, "ep")
        (True, Time(5, 'ep'), Time(-1, 'ep'))
        >>> Time(4, "ep") / Time(2, "ep"), Time(4, "ep") / 2, Time(2, "ep") * 0.5
        (Time(2.0, 'dur'), Time(2, 'ep'), Time(1, 'ep'))
        >>> Time(5, "ep").to_timestring(), eval(repr(Time(0.5, "dur")))
        ('5ep', Time(0.5, 'dur'))
        >>> Time.from_input(3, default_unit="ep"), Time.from_input(3, default_int_unit="ba")
        (Time(3, 'ep'), Time(3, 'ba'))
    """

    __slots__ = ("unit", "value")

    value: Number
    unit: TimeUnit

    def __init__(self, value: Number, unit: TimeUnit | str) -> None:
        if type(unit) is TimeUnit and type(value) is int and unit is not TimeUnit.DURATION:
            object.__setattr__(self, "unit", unit)  # the hot path: counters from a Timestamp
            object.__setattr__(self, "value", value)
            return
        unit = to_unit(unit)
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "value", check_value(value, unit))

    def __class_getitem__(cls, item: object) -> GenericAlias:
        """``Time[int]``: Composer's Time is generic in its value's type."""
        return GenericAlias(cls, item)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Time is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Time is immutable")

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_iteration(cls, iteration: int) -> Time:
        """``Time(iteration, "iter")``."""
        return cls(iteration, TimeUnit.ITERATION)

    @classmethod
    def from_epoch(cls, epoch: int) -> Time:
        """``Time(epoch, "ep")``."""
        return cls(epoch, TimeUnit.EPOCH)

    @classmethod
    def from_batch(cls, batch: int) -> Time:
        """``Time(batch, "ba")``."""
        return cls(batch, TimeUnit.BATCH)

    @classmethod
    def from_sample(cls, sample: int) -> Time:
        """``Time(sample, "sp")``."""
        return cls(sample, TimeUnit.SAMPLE)

    @classmethod
    def from_token(cls, token: int) -> Time:
        """``Time(token, "tok")``."""
        return cls(token, TimeUnit.TOKEN)

    @classmethod
    def from_duration(cls, duration: float) -> Time:
        """``Time(duration, "dur")``: a fraction of ``max_duration``."""
        return cls(duration, TimeUnit.DURATION)

    @classmethod
    def from_timedelta(cls, timestring: str) -> Time:
        """A wall-clock string such as ``"1h20m40s"`` in seconds, as in Composer.

        Raises:
            ValueError: ``timestring`` is not a wall-clock duration.
        """
        value = cls.from_timestring(timestring)
        if value.unit is not TimeUnit.SECOND:
            raise ValueError(bad(timestring, "expected a duration such as '1h20m40s'.", None))
        return value

    @classmethod
    def from_timestring(cls, text: str, *, name: str | None = None) -> Time:
        """Parse ``"100ba"``, ``"2EP"``, ``"0.5dur"``, ``"1h30m"``, ...

        Args:
            text: the time string; units are case-insensitive.
            name: what is being parsed (``"FileLogger log_interval"``), named by
                the error message.

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: ``text`` is not one of the accepted forms (``""`` and
                negative times included); the message quotes it and lists the units.
        """
        value, unit = parse(text, name)
        return cls(value, unit)

    @classmethod
    def from_input(
        cls,
        value: TimeLike,
        default_unit: TimeUnit | str | None = None,
        *,
        name: str | None = None,
        default_int_unit: TimeUnit | str | None = None,
    ) -> Time:
        """Coerce a ``Time``, a time string, or a bare number in ``default_unit``.

        Args:
            value: what to coerce.
            default_unit: the unit of a bare number (Composer's ``default_int_unit``,
                also accepted under that name).
            name: what is being parsed, named by the error message.
        """
        unit = default_unit if default_unit is not None else default_int_unit
        if isinstance(value, Time):
            return value
        if isinstance(value, str):
            return cls.from_timestring(value, name=name)
        if _is_number(value):
            if unit is None:
                what = f"{name} {value!r}" if name else f"A bare number {value!r}"
                raise TimeInputError(
                    f"{what} is ambiguous here; give a time string with a unit such as "
                    f"'{value}ba' or '{value}ep'."
                )
            unit = to_unit(unit)
            return cls(check_value(value, unit, None, name), unit)
        if name:
            raise TimeInputError(
                f"{name} must be a Time, a time string or a number, got {value!r}."
            )
        raise TimeInputError(f"Expected a Time, a time string or a number, got {value!r}.")

    def to_timestring(self) -> str:
        """The time string that parses back to this time, e.g. ``'5ep'``."""
        return str(self)

    # ------------------------------------------------------------------ arithmetic

    def _coerce(self, other: object, verb: str = "combine") -> Time:
        if isinstance(other, Time):
            t = other
        elif isinstance(other, str):
            t = Time.from_timestring(other)
        elif _is_number(other):
            t = Time(other, self.unit)  # type: ignore[arg-type]
        else:
            raise TypeError(f"Cannot {verb} {self} and {other!r}.")
        if t.unit != self.unit:
            raise TimeUnitMismatchError(
                f"Cannot {verb} {self} and {t}: the units differ ({self.unit.value} vs "
                f"{t.unit.value}). To fix, compare like with like, e.g. timestamp.get("
                f"'{t.unit.value}') < '{t}'."
            )
        return t

    def _scaled(self, value: float, unit: TimeUnit) -> Time:
        # As in Composer, a scaled count of batches (epochs, ...) rounds toward zero.
        return Time(int(value) if unit in INTEGRAL_UNITS else value, unit)

    def __add__(self, other: object) -> Time:
        return Time(self.value + self._coerce(other, "add").value, self.unit)

    def __radd__(self, other: object) -> Time:
        return self.__add__(other)

    def __sub__(self, other: object) -> Time:
        return Time(self.value - self._coerce(other, "subtract").value, self.unit)

    def __rsub__(self, other: object) -> Time:
        return Time(self._coerce(other, "subtract").value - self.value, self.unit)

    def __neg__(self) -> Time:
        return Time(-self.value, self.unit)

    def __pos__(self) -> Time:
        return self

    def __mul__(self, other: object) -> Time:
        """Scale by a number or by a ``dur`` time; the other unit is kept."""
        if _is_number(other):
            return self._scaled(self.value * other, self.unit)  # type: ignore[operator]
        if not isinstance(other, (Time, str)):
            raise TypeError(f"Cannot multiply {self} by {other!r}.")
        t = other if isinstance(other, Time) else Time.from_timestring(other)
        if t.unit is not TimeUnit.DURATION and self.unit is not TimeUnit.DURATION:
            raise TimeUnitMismatchError(
                f"Cannot multiply {self} by {t}: one of them must be a fraction of the run "
                f"('dur'). To fix, write {self} * 0.5 or {self} * '0.5dur'."
            )
        unit = self.unit if t.unit is TimeUnit.DURATION else t.unit
        return self._scaled(self.value * t.value, unit)

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> Time:
        """By a number: scaled, in this unit. By a time in this unit: the ratio, in ``dur``."""
        if _is_number(other):
            return self._scaled(self.value / other, self.unit)  # type: ignore[operator]
        return Time(self.value / self._coerce(other, "divide").value, TimeUnit.DURATION)

    def __mod__(self, other: object) -> Time:
        return Time(self.value % self._coerce(other, "take the modulo of").value, self.unit)

    # ------------------------------------------------------------------ comparison

    def _other_value(self, other: object) -> Number:
        # A bare number is in this unit (``timestamp.batch >= 10``), compared as it is.
        if _is_number(other):
            return other  # type: ignore[return-value]
        return self._coerce(other, "compare").value

    def __eq__(self, other: object) -> bool:
        try:
            return self.value == self._other_value(other)
        except (TypeError, ValueError):
            return False

    def __hash__(self) -> int:
        return hash((self.value, self.unit))

    def __lt__(self, other: object) -> bool:
        return self.value < self._other_value(other)

    def __le__(self, other: object) -> bool:
        return self.value <= self._other_value(other)

    def __gt__(self, other: object) -> bool:
        return self.value > self._other_value(other)

    def __ge__(self, other: object) -> bool:
        return self.value >= self._other_value(other)

    # ------------------------------------------------------------------ conversion

    def __int__(self) -> int:
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __repr__(self) -> str:
        return f"Time({self.value!r}, {self.unit.value!r})"

    def __str__(self) -> str:
        return f"{self.value}{self.unit.value}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Time, (self.value, self.unit.value))
