"""Training time: :class:`Time` values with units, and the :class:`Timestamp` of a run."""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any, Union

__all__ = ["Time", "TimeUnit", "Timestamp"]


class TimeUnit(StrEnum):
    """The units a :class:`Time` is counted in; the value is the string suffix."""

    EPOCH = "ep"
    BATCH = "ba"
    SAMPLE = "sp"
    TOKEN = "tok"
    DURATION = "dur"
    SECOND = "sec"
    ITERATION = "iter"


_INTEGRAL_UNITS = frozenset(
    {TimeUnit.EPOCH, TimeUnit.BATCH, TimeUnit.SAMPLE, TimeUnit.TOKEN, TimeUnit.ITERATION}
)
_UNIT_NAMES = {
    TimeUnit.EPOCH: "epochs",
    TimeUnit.BATCH: "batches",
    TimeUnit.SAMPLE: "samples",
    TimeUnit.TOKEN: "tokens",
    TimeUnit.ITERATION: "iterations",
}
_NUMBER = r"(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_UNIT_RE = re.compile(rf"^(?P<sign>[+-]?)(?P<num>{_NUMBER})(?P<unit>[a-z]+)$")
_CLOCK_RE = re.compile(
    r"^(?:(?P<d>\d+(?:\.\d+)?)d)?(?:(?P<h>\d+(?:\.\d+)?)h)?"
    r"(?:(?P<m>\d+(?:\.\d+)?)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$"
)
_ACCEPTED = (
    "a non-negative number followed by a unit, one of "
    + ", ".join(u.value for u in TimeUnit)
    + " (e.g. '100ba', '2ep', '512sp', '1e6tok', '0.5dur', '30sec'), "
    "or a wall-clock duration such as '1h30m', '45m' or '2h15m30s'"
)

Number = int | float
TimeLike = Union["Time", str, int, float]


def _check_value(value: object, unit: TimeUnit, text: object = None) -> Number:
    if text is None:
        text = f"{value}{unit.value}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Time value must be an int or float, got {value!r}.")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"Time value must be finite, got {text!r}.")
    if unit in _INTEGRAL_UNITS:
        if value != int(value):
            raise ValueError(
                f"Invalid time {text!r}: a number of {_UNIT_NAMES[unit]} must be a whole "
                f"number (accepted: {_ACCEPTED}). To fix, round it, or use a fraction of the "
                "run such as '0.5dur'."
            )
        return int(value)
    return value


class Time:
    """An amount of training time in one unit.

    Example:
        >>> Time.from_timestring("100ba")
        Time(100, 'ba')
        >>> Time.from_timestring("1e6tok").value
        1000000
        >>> Time.from_timestring("1h30m")
        Time(5400, 'sec')
        >>> Time(40, "ba") < "100ba", Time(3, "ep") + "2ep"
        (True, Time(5, 'ep'))
    """

    __slots__ = ("unit", "value")

    value: Number
    unit: TimeUnit

    def __init__(self, value: Number, unit: TimeUnit | str) -> None:
        if type(unit) is TimeUnit and type(value) is int and unit is not TimeUnit.DURATION:
            object.__setattr__(self, "unit", unit)  # the hot path: counters from a Timestamp
            object.__setattr__(self, "value", value)
            return
        try:
            unit = TimeUnit(unit)
        except ValueError:
            raise ValueError(
                f"Unknown time unit {unit!r}; accepted: {', '.join(u.value for u in TimeUnit)}."
            ) from None
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "value", _check_value(value, unit))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Time is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Time is immutable")

    @classmethod
    def from_timestring(cls, text: str) -> Time:
        """Parse a time string: ``"100ba"``, ``"2ep"``, ``"0.5dur"``, ``"1h30m"``, ...

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: ``text`` is not one of the accepted forms; the message
                quotes it and lists the units.
        """
        if not isinstance(text, str):
            raise TypeError(f"Time string must be a str, got {text!r}; expected {_ACCEPTED}.")
        compact = text.strip().replace(" ", "")
        match = _UNIT_RE.match(compact)
        if match is not None and match["unit"] in TimeUnit._value2member_map_:
            unit = TimeUnit(match["unit"])
            if match["sign"] == "-":
                raise ValueError(
                    f"Invalid time {text!r}: time must not be negative; expected {_ACCEPTED}."
                )
            num_text = match["num"].replace("_", "")
            value: Number
            if num_text.isdigit():
                value = int(num_text)  # exact, however large
            else:
                num = float(num_text)
                integral = num.is_integer() and (unit in _INTEGRAL_UNITS or "." not in num_text)
                value = int(num) if integral else num
            return cls(_check_value(value, unit, text), unit)
        clock = _CLOCK_RE.match(compact)
        if compact and clock is not None and any(clock.groupdict().values()):
            parts = {k: float(v) for k, v in clock.groupdict().items() if v}
            seconds = (
                parts.get("d", 0) * 86400
                + parts.get("h", 0) * 3600
                + parts.get("m", 0) * 60
                + parts.get("s", 0)
            )
            return cls(int(seconds) if seconds == int(seconds) else seconds, TimeUnit.SECOND)
        raise ValueError(f"Invalid time string {text!r}: expected {_ACCEPTED}.")

    @classmethod
    def from_input(cls, value: TimeLike, default_unit: TimeUnit | str | None = None) -> Time:
        """Coerce a ``Time``, a time string, or a bare number in ``default_unit``.

        Example:
            >>> Time.from_input(3, default_unit="ep")
            Time(3, 'ep')
        """
        if isinstance(value, Time):
            return value
        if isinstance(value, str):
            return cls.from_timestring(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if default_unit is None:
                raise TypeError(
                    f"A bare number {value!r} is ambiguous here; give a time string with a "
                    f"unit such as '{value}ba' or '{value}ep'."
                )
            return cls(value, default_unit)
        raise TypeError(f"Expected a Time, a time string or a number, got {value!r}.")

    def _coerce(self, other: object) -> Time:
        if isinstance(other, Time):
            t = other
        elif isinstance(other, str):
            t = Time.from_timestring(other)
        elif isinstance(other, (int, float)) and not isinstance(other, bool):
            t = Time(other, self.unit)
        else:
            raise TypeError(f"Cannot combine {self} with {other!r}.")
        if t.unit != self.unit:
            raise TypeError(
                f"Cannot combine {self} with {t}: the units differ ({self.unit.value} vs "
                f"{t.unit.value}). To fix, compare like with like, e.g. timestamp.get("
                f"'{t.unit.value}') < '{t}'."
            )
        return t

    def __add__(self, other: object) -> Time:
        return Time(self.value + self._coerce(other).value, self.unit)

    def __radd__(self, other: object) -> Time:
        return self.__add__(other)

    def __sub__(self, other: object) -> Time:
        return Time(self.value - self._coerce(other).value, self.unit)

    def __rsub__(self, other: object) -> Time:
        return Time(self._coerce(other).value - self.value, self.unit)

    def __mul__(self, factor: Number) -> Time:
        value = self.value * factor
        if self.unit in _INTEGRAL_UNITS and value == int(value):
            value = int(value)
        return Time(value, self.unit)

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> float:
        """The ratio of two times in the same unit, e.g. progress."""
        return self.value / self._coerce(other).value

    def __mod__(self, other: object) -> Time:
        return Time(self.value % self._coerce(other).value, self.unit)

    def __eq__(self, other: object) -> bool:
        try:
            return self.value == self._coerce(other).value
        except (TypeError, ValueError):
            return False

    def __hash__(self) -> int:
        return hash((self.value, self.unit))

    def __lt__(self, other: object) -> bool:
        return self.value < self._coerce(other).value

    def __le__(self, other: object) -> bool:
        return self.value <= self._coerce(other).value

    def __gt__(self, other: object) -> bool:
        return self.value > self._coerce(other).value

    def __ge__(self, other: object) -> bool:
        return self.value >= self._coerce(other).value

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


_COUNTERS = (
    "epoch",
    "batch",
    "sample",
    "token",
    "iteration",
    "epoch_in_iteration",
    "batch_in_epoch",
    "sample_in_epoch",
    "token_in_epoch",
)
_CLOCKS = ("total_wct", "iteration_wct", "epoch_wct", "batch_wct")
_COUNTER_UNITS = {
    "epoch": TimeUnit.EPOCH,
    "batch": TimeUnit.BATCH,
    "sample": TimeUnit.SAMPLE,
    "token": TimeUnit.TOKEN,
    "iteration": TimeUnit.ITERATION,
    "epoch_in_iteration": TimeUnit.EPOCH,
    "batch_in_epoch": TimeUnit.BATCH,
    "sample_in_epoch": TimeUnit.SAMPLE,
    "token_in_epoch": TimeUnit.TOKEN,
}


_RAW_SLOT = {
    TimeUnit.EPOCH: "_epoch",
    TimeUnit.BATCH: "_batch",
    TimeUnit.SAMPLE: "_sample",
    TimeUnit.TOKEN: "_token",
    TimeUnit.ITERATION: "_iteration",
    TimeUnit.SECOND: "_total_wct",
}
_new = object.__new__


class Timestamp:
    """An immutable snapshot of how far a run has got.

    Counters (``epoch``, ``batch``, ``sample``, ``token``, ``iteration`` and
    the ``*_in_epoch`` ones) are read as :class:`Time` values, so they compare
    with strings; wall-clock durations (``total_wct``, ``iteration_wct``,
    ``epoch_wct``, ``batch_wct``) are float seconds. Counters count completed
    work: at ``batch_end`` of the first batch, ``batch`` is ``1ba``.

    Example:
        >>> ts = Timestamp().to_next_batch(samples=32, tokens=0, duration=0.5)
        >>> ts.batch, ts.sample, ts.batch < "100ba", ts.batch_wct
        (Time(1, 'ba'), Time(32, 'sp'), True, 0.5)
        >>> ts.to_next_epoch().batch_in_epoch
        Time(0, 'ba')
    """

    # No __slots__: the fields live in the instance __dict__, so to_next_batch (every
    # step) copies them with one dict.update instead of 13 slot writes (2 µs against 5.7).
    _epoch: int
    _batch: int
    _sample: int
    _token: int
    _iteration: int
    _epoch_in_iteration: int
    _batch_in_epoch: int
    _sample_in_epoch: int
    _token_in_epoch: int
    _total_wct: float
    _iteration_wct: float
    _epoch_wct: float
    _batch_wct: float

    def __init__(
        self,
        epoch: int = 0,
        batch: int = 0,
        sample: int = 0,
        token: int = 0,
        iteration: int = 0,
        epoch_in_iteration: int = 0,
        batch_in_epoch: int = 0,
        sample_in_epoch: int = 0,
        token_in_epoch: int = 0,
        total_wct: float = 0.0,
        iteration_wct: float = 0.0,
        epoch_wct: float = 0.0,
        batch_wct: float = 0.0,
    ) -> None:
        values = locals()
        fields = self.__dict__
        for name in _COUNTERS:
            value = values[name]
            if isinstance(value, Time):
                if value.unit is not _COUNTER_UNITS[name]:
                    raise ValueError(
                        f"Timestamp {name} must be in {_COUNTER_UNITS[name].value}, got {value}."
                    )
                value = value.value
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Timestamp {name} must be a non-negative int, got {value!r}.")
            fields[f"_{name}"] = value
        for name in _CLOCKS:
            fields[f"_{name}"] = float(values[name])

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            "Timestamp is immutable; use copy(), to_next_batch() or to_next_epoch()"
        )

    @property
    def epoch(self) -> Time:
        return Time(self._epoch, TimeUnit.EPOCH)

    @property
    def batch(self) -> Time:
        return Time(self._batch, TimeUnit.BATCH)

    @property
    def sample(self) -> Time:
        return Time(self._sample, TimeUnit.SAMPLE)

    @property
    def token(self) -> Time:
        return Time(self._token, TimeUnit.TOKEN)

    @property
    def iteration(self) -> Time:
        return Time(self._iteration, TimeUnit.ITERATION)

    @property
    def epoch_in_iteration(self) -> Time:
        return Time(self._epoch_in_iteration, TimeUnit.EPOCH)

    @property
    def batch_in_epoch(self) -> Time:
        return Time(self._batch_in_epoch, TimeUnit.BATCH)

    @property
    def sample_in_epoch(self) -> Time:
        return Time(self._sample_in_epoch, TimeUnit.SAMPLE)

    @property
    def token_in_epoch(self) -> Time:
        return Time(self._token_in_epoch, TimeUnit.TOKEN)

    @property
    def total_wct(self) -> float:
        """Seconds."""
        return self._total_wct

    @property
    def iteration_wct(self) -> float:
        """Seconds."""
        return self._iteration_wct

    @property
    def epoch_wct(self) -> float:
        """Seconds."""
        return self._epoch_wct

    @property
    def batch_wct(self) -> float:
        """Seconds."""
        return self._batch_wct

    def raw(self, unit: TimeUnit) -> Number:
        """The elapsed amount in ``unit`` as a plain number (``get`` without the ``Time``)."""
        return getattr(self, _RAW_SLOT[unit])  # type: ignore[no-any-return]

    def get(self, unit: TimeUnit | str) -> Time:
        """The elapsed time in ``unit`` (``sec`` is ``total_wct``).

        Raises:
            ValueError: for ``dur``, which needs a ``max_duration`` (see
                :meth:`obsbus.State.get_elapsed_duration`).
        """
        unit = TimeUnit(unit)
        if unit is TimeUnit.SECOND:
            return Time(self._total_wct, unit)
        for name, counter_unit in _COUNTER_UNITS.items():
            if counter_unit is unit:
                return Time(getattr(self, f"_{name}"), unit)
        raise ValueError(
            "A Timestamp cannot express 'dur' on its own: it is a fraction of max_duration. "
            "To fix, use State.get_elapsed_duration()."
        )

    def copy(self, **changes: Number) -> Timestamp:
        """A copy with some fields replaced."""
        fields: dict[str, Any] = {name: getattr(self, f"_{name}") for name in _COUNTERS + _CLOCKS}
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Unknown Timestamp fields {sorted(unknown)}; known: {sorted(fields)}.")
        fields.update(changes)
        return Timestamp(**fields)

    def to_next_batch(self, samples: int = 0, tokens: int = 0, duration: float = 0.0) -> Timestamp:
        """The timestamp after one more batch of ``samples`` and ``tokens``, ``duration`` s long."""
        if type(samples) is int and type(tokens) is int and samples >= 0 and tokens >= 0:
            # Every step takes this path: copy the fields directly, skipping validation
            # that these checked ints can't fail (about 10x cheaper than copy()).
            new = _new(Timestamp)
            old, fields = self.__dict__, new.__dict__
            fields.update(old)
            fields["_batch"] = old["_batch"] + 1
            fields["_batch_in_epoch"] = old["_batch_in_epoch"] + 1
            fields["_sample"] = old["_sample"] + samples
            fields["_sample_in_epoch"] = old["_sample_in_epoch"] + samples
            fields["_token"] = old["_token"] + tokens
            fields["_token_in_epoch"] = old["_token_in_epoch"] + tokens
            duration = float(duration)
            fields["_total_wct"] = old["_total_wct"] + duration
            fields["_iteration_wct"] = old["_iteration_wct"] + duration
            fields["_epoch_wct"] = old["_epoch_wct"] + duration
            fields["_batch_wct"] = duration
            return new
        return self.copy(
            batch=self._batch + 1,
            batch_in_epoch=self._batch_in_epoch + 1,
            sample=self._sample + samples,
            sample_in_epoch=self._sample_in_epoch + samples,
            token=self._token + tokens,
            token_in_epoch=self._token_in_epoch + tokens,
            total_wct=self._total_wct + duration,
            iteration_wct=self._iteration_wct + duration,
            epoch_wct=self._epoch_wct + duration,
            batch_wct=duration,
        )

    def to_next_epoch(self, duration: float = 0.0) -> Timestamp:
        """The timestamp after the current epoch ends; per-epoch counters reset."""
        return self.copy(
            epoch=self._epoch + 1,
            epoch_in_iteration=self._epoch_in_iteration + 1,
            batch_in_epoch=0,
            sample_in_epoch=0,
            token_in_epoch=0,
            total_wct=self._total_wct + duration,
            iteration_wct=self._iteration_wct + duration,
            epoch_wct=0.0,
        )

    def to_next_iteration(self, duration: float = 0.0) -> Timestamp:
        """The timestamp after the current iteration ends."""
        return self.copy(
            iteration=self._iteration + 1,
            epoch_in_iteration=0,
            total_wct=self._total_wct + duration,
            iteration_wct=0.0,
        )

    def state_dict(self) -> dict[str, Number]:
        return {name: getattr(self, f"_{name}") for name in _COUNTERS + _CLOCKS}

    @classmethod
    def from_state_dict(cls, state: dict[str, Number]) -> Timestamp:
        return cls(**state)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Timestamp) and self.state_dict() == other.state_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.state_dict().values()))

    def __repr__(self) -> str:
        counters = ", ".join(f"{n}={getattr(self, '_' + n)}" for n in _COUNTERS[:5])
        return f"Timestamp({counters}, total_wct={self._total_wct:.3f})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Timestamp.from_state_dict, (self.state_dict(),))
