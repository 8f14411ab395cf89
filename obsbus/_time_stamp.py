"""The :class:`Timestamp` of a run (re-exported by :mod:`obsbus.time`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from obsbus._time_seconds import Seconds, to_seconds
from obsbus._time_unit import Number, TimeUnit
from obsbus._time_value import Time

__all__ = ["Timestamp"]

_COUNTER_UNITS = {  # Composer's order, which is also the constructor's
    "iteration": TimeUnit.ITERATION,
    "epoch": TimeUnit.EPOCH,
    "batch": TimeUnit.BATCH,
    "sample": TimeUnit.SAMPLE,
    "token": TimeUnit.TOKEN,
    "epoch_in_iteration": TimeUnit.EPOCH,
    "token_in_iteration": TimeUnit.TOKEN,
    "batch_in_epoch": TimeUnit.BATCH,
    "sample_in_epoch": TimeUnit.SAMPLE,
    "token_in_epoch": TimeUnit.TOKEN,
}
_COUNTERS = tuple(_COUNTER_UNITS)
_CLOCKS = ("total_wct", "iteration_wct", "epoch_wct", "batch_wct")
_FIELDS = _COUNTERS + _CLOCKS
_RAW_SLOT = {
    TimeUnit.EPOCH: "_epoch",
    TimeUnit.BATCH: "_batch",
    TimeUnit.SAMPLE: "_sample",
    TimeUnit.TOKEN: "_token",
    TimeUnit.ITERATION: "_iteration",
    TimeUnit.SECOND: "_total_wct",
}
_new = object.__new__
_INF = float("inf")
Duration = float | timedelta | None


def _counter(value: object, name: str, label: str | None = None) -> int:
    unit = _COUNTER_UNITS[name]
    label = label or f"Timestamp {name}"
    if isinstance(value, Time):
        if value.unit is not unit:
            raise ValueError(f"{label} must be in {unit.value}, got {value}.")
        value = value.value
    accepted = f"a non-negative int or a Time in {unit.value}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{label} must be {accepted}, got {value!r}.")
    if value < 0:
        raise ValueError(f"{label} must be {accepted}, got {value!r}.")
    return value


def _duration(duration: object) -> float:
    return 0.0 if duration is None else to_seconds(duration, "duration")


class Timestamp:
    """An immutable snapshot of how far a run has got.

    Counters (``iteration``, ``epoch``, ``batch``, ``sample``, ``token`` and
    the ``*_in_iteration`` / ``*_in_epoch`` ones) read as :class:`Time`
    values, so they compare with times, strings and ints; wall-clock
    durations (``total_wct``, ``iteration_wct``, ``epoch_wct``,
    ``batch_wct``) are float seconds that also behave like Composer's
    ``timedelta`` (``total_seconds()``, ``== timedelta(...)``); they are set
    from seconds or a ``timedelta``. Counters count completed work: at
    ``batch_end`` of the first batch, ``batch`` is ``1ba``.

    Example:
        >>> from datetime import timedelta
        >>> ts = Timestamp().to_next_batch(samples=32, duration=timedelta(seconds=0.5))
        >>> ts.batch, ts.sample, ts.batch >= Time(1, "ba"), ts < "2ba", ts.batch_wct
        (Time(1, 'ba'), Time(32, 'sp'), True, True, 0.5)
        >>> ts.total_wct.total_seconds(), ts.to_next_epoch().batch_in_epoch
        (0.5, Time(0, 'ba'))
        >>> ts
        Timestamp(batch=1, sample=32, batch_in_epoch=1, sample_in_epoch=32, total_wct=0.5,
                  iteration_wct=0.5, epoch_wct=0.5, batch_wct=0.5)
    """

    # No __slots__: the fields live in the instance __dict__, so to_next_batch (every
    # step) copies them with one dict.update instead of 14 slot writes.
    _iteration: int
    _epoch: int
    _batch: int
    _sample: int
    _token: int
    _epoch_in_iteration: int
    _token_in_iteration: int
    _batch_in_epoch: int
    _sample_in_epoch: int
    _token_in_epoch: int
    _total_wct: float
    _iteration_wct: float
    _epoch_wct: float
    _batch_wct: float

    def __init__(
        self,
        iteration: int | Time = 0,
        epoch: int | Time = 0,
        batch: int | Time = 0,
        sample: int | Time = 0,
        token: int | Time = 0,
        epoch_in_iteration: int | Time = 0,
        token_in_iteration: int | Time = 0,
        batch_in_epoch: int | Time = 0,
        sample_in_epoch: int | Time = 0,
        token_in_epoch: int | Time = 0,
        total_wct: float | timedelta = 0.0,
        iteration_wct: float | timedelta = 0.0,
        epoch_wct: float | timedelta = 0.0,
        batch_wct: float | timedelta = 0.0,
    ) -> None:
        values = locals()
        fields = self.__dict__
        for name in _COUNTERS:
            fields[f"_{name}"] = _counter(values[name], name)
        for name in _CLOCKS:
            fields[f"_{name}"] = to_seconds(values[name], name)

    def __setattr__(self, name: str, value: object) -> None:
        field = name.lstrip("_")
        fix = f"ts = ts.copy({field}=...)" if field in _FIELDS else "ts = ts.copy(...)"
        raise AttributeError(
            f"Timestamp is immutable, so {name} can not be set; to change it, write {fix} "
            "(or to_next_batch(), to_next_epoch(), to_next_iteration())."
        )

    # ------------------------------------------------------------------ fields

    @property
    def iteration(self) -> Time:
        """The iterations completed."""
        return Time(self._iteration, TimeUnit.ITERATION)

    @property
    def epoch(self) -> Time:
        """The epochs completed."""
        return Time(self._epoch, TimeUnit.EPOCH)

    @property
    def batch(self) -> Time:
        """The batches completed."""
        return Time(self._batch, TimeUnit.BATCH)

    @property
    def sample(self) -> Time:
        """The samples trained."""
        return Time(self._sample, TimeUnit.SAMPLE)

    @property
    def token(self) -> Time:
        """The tokens trained."""
        return Time(self._token, TimeUnit.TOKEN)

    @property
    def epoch_in_iteration(self) -> Time:
        """The epochs completed in this iteration."""
        return Time(self._epoch_in_iteration, TimeUnit.EPOCH)

    @property
    def token_in_iteration(self) -> Time:
        """The tokens trained in this iteration."""
        return Time(self._token_in_iteration, TimeUnit.TOKEN)

    @property
    def batch_in_epoch(self) -> Time:
        """The batches completed in this epoch."""
        return Time(self._batch_in_epoch, TimeUnit.BATCH)

    @property
    def sample_in_epoch(self) -> Time:
        """The samples trained in this epoch."""
        return Time(self._sample_in_epoch, TimeUnit.SAMPLE)

    @property
    def token_in_epoch(self) -> Time:
        """The tokens trained in this epoch."""
        return Time(self._token_in_epoch, TimeUnit.TOKEN)

    @property
    def total_wct(self) -> Seconds:
        """Seconds since the run started (total_seconds() works as on a timedelta)."""
        return Seconds(self._total_wct)

    @property
    def iteration_wct(self) -> Seconds:
        """Seconds in this iteration."""
        return Seconds(self._iteration_wct)

    @property
    def epoch_wct(self) -> Seconds:
        """Seconds in this epoch."""
        return Seconds(self._epoch_wct)

    @property
    def batch_wct(self) -> Seconds:
        """Seconds the last batch took."""
        return Seconds(self._batch_wct)

    def raw(self, unit: TimeUnit) -> Number:
        """The elapsed amount in ``unit`` as a plain number (``get`` without the ``Time``)."""
        return getattr(self, _RAW_SLOT[unit])  # type: ignore[no-any-return]

    def get(self, unit: TimeUnit | str) -> Time:
        """The elapsed time in ``unit`` (any case; ``sec`` is ``total_wct``).

        Raises:
            ValueError: for ``dur``, which needs a ``max_duration`` (see
                :meth:`obsbus.State.get_elapsed_duration`).
        """
        unit = TimeUnit(unit)
        if unit is TimeUnit.DURATION:
            raise ValueError(
                "A Timestamp cannot express 'dur' on its own: it is a fraction of max_duration. "
                "To fix, use State.get_elapsed_duration()."
            )
        return Time(getattr(self, _RAW_SLOT[unit]), unit)

    # ------------------------------------------------------------------ new timestamps

    def copy(self, **changes: Any) -> Timestamp:
        """A copy with some fields replaced (counters as ints or Times, clocks as seconds or
        timedeltas)."""
        fields: dict[str, Any] = self.state_dict()
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"Unknown Timestamp fields {sorted(unknown)}; known: {sorted(fields)}.")
        fields.update(changes)
        return Timestamp(**fields)

    def to_next_batch(
        self, samples: int | Time = 0, tokens: int | Time = 0, duration: Duration = None
    ) -> Timestamp:
        """The timestamp after one more batch of ``samples`` and ``tokens``, ``duration`` long.

        ``duration`` is seconds or a ``timedelta``; ``samples`` and ``tokens`` are ints
        or Times (Composer's signature).
        """
        if type(duration) is float and 0.0 <= duration < _INF:
            seconds = duration
        else:
            seconds = _duration(duration)
        if type(samples) is not int or type(tokens) is not int or samples < 0 or tokens < 0:
            samples = _counter(samples, "sample", "Timestamp.to_next_batch samples")
            tokens = _counter(tokens, "token", "Timestamp.to_next_batch tokens")
        # Every step takes this path: copy the fields directly, skipping validation
        # that these checked values can't fail (about 10x cheaper than copy()).
        new = _new(Timestamp)
        old, fields = self.__dict__, new.__dict__
        fields.update(old)
        fields["_batch"] = old["_batch"] + 1
        fields["_batch_in_epoch"] = old["_batch_in_epoch"] + 1
        fields["_sample"] = old["_sample"] + samples
        fields["_sample_in_epoch"] = old["_sample_in_epoch"] + samples
        fields["_token"] = old["_token"] + tokens
        fields["_token_in_epoch"] = old["_token_in_epoch"] + tokens
        fields["_token_in_iteration"] = old["_token_in_iteration"] + tokens
        fields["_total_wct"] = old["_total_wct"] + seconds
        fields["_iteration_wct"] = old["_iteration_wct"] + seconds
        fields["_epoch_wct"] = old["_epoch_wct"] + seconds
        fields["_batch_wct"] = seconds
        return new

    def to_next_epoch(self, duration: Duration = None) -> Timestamp:
        """The timestamp after the current epoch ends; per-epoch counters and clocks reset."""
        seconds = _duration(duration)
        return self.copy(
            epoch=self._epoch + 1,
            epoch_in_iteration=self._epoch_in_iteration + 1,
            batch_in_epoch=0,
            sample_in_epoch=0,
            token_in_epoch=0,
            total_wct=self._total_wct + seconds,
            iteration_wct=self._iteration_wct + seconds,
            epoch_wct=0.0,
            batch_wct=0.0,
        )

    def to_next_iteration(self, duration: Duration = None) -> Timestamp:
        """The timestamp after the current iteration ends; per-iteration and per-epoch
        counters and clocks reset."""
        seconds = _duration(duration)
        return self.copy(
            iteration=self._iteration + 1,
            epoch_in_iteration=0,
            token_in_iteration=0,
            batch_in_epoch=0,
            sample_in_epoch=0,
            token_in_epoch=0,
            total_wct=self._total_wct + seconds,
            iteration_wct=0.0,
            epoch_wct=0.0,
            batch_wct=0.0,
        )

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Number]:
        """Every field as a plain int (counters) or float (seconds)."""
        fields = self.__dict__
        return {name: fields[f"_{name}"] for name in _FIELDS}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Timestamp:
        """The timestamp a :meth:`state_dict` describes (Composer's, with timedeltas, too)."""
        return cls(**state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Composer loads a timestamp in place; an obsbus Timestamp is immutable.

        Raises:
            TypeError: always; the message says what to write instead.
        """
        raise TypeError(
            "Timestamp is immutable, so it can not load a state dict in place. To fix, write "
            "state.timestamp = Timestamp.from_state_dict(state_dict)."
        )

    # ------------------------------------------------------------------ comparison

    def _counter_for(self, other: object) -> tuple[Time, Time] | None:
        if isinstance(other, str):
            other = Time.from_timestring(other)
        if not isinstance(other, Time):
            return None
        return self.get(other.unit), other

    def __eq__(self, other: object) -> bool:
        """Equal to a Timestamp with the same fields, or to a time its counter equals."""
        if isinstance(other, Timestamp):
            return self.__dict__ == other.__dict__
        try:
            pair = self._counter_for(other)
        except (TypeError, ValueError):
            return False
        return NotImplemented if pair is None else pair[0] == pair[1]

    def __hash__(self) -> int:
        return hash(tuple(self.state_dict().values()))

    def __lt__(self, other: object) -> bool:
        pair = self._counter_for(other)
        return NotImplemented if pair is None else pair[0] < pair[1]

    def __le__(self, other: object) -> bool:
        pair = self._counter_for(other)
        return NotImplemented if pair is None else pair[0] <= pair[1]

    def __gt__(self, other: object) -> bool:
        pair = self._counter_for(other)
        return NotImplemented if pair is None else pair[0] > pair[1]

    def __ge__(self, other: object) -> bool:
        pair = self._counter_for(other)
        return NotImplemented if pair is None else pair[0] >= pair[1]

    def __repr__(self) -> str:
        """Evaluates back to an equal Timestamp: the fields that are not 0, in order."""
        fields = self.__dict__
        shown = ", ".join(f"{n}={fields['_' + n]!r}" for n in _FIELDS if fields["_" + n])
        return f"Timestamp({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Timestamp.from_state_dict, (self.state_dict(),))
