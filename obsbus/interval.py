"""How often a plug-in acts: every N batches or every N epochs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from obsbus.time import Time, TimeLike, TimeUnit

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = ["LogInterval"]


class LogInterval:
    """An interval in batches or epochs, checked at ``batch_end`` / ``epoch_end``.

    Every monitor and destination that acts "every ``log_interval``" uses
    it, so they all accept the same forms and fail the same way.

    Args:
        value: ``"10ba"``, ``"1ep"``, a ``Time``, or a bare int in ``default_unit``.
        what: the owner and parameter, named by every error message
            (``"ConsoleLogger log_interval"``), a bad time string's included.
        default_unit: the unit of a bare int (Composer's loggers: epochs;
            monitors: batches).

    Example:
        >>> from obsbus import State, Timestamp
        >>> every = LogInterval("2ba", "demo log_interval")
        >>> state = State(run_name="r")
        >>> state.timestamp = Timestamp(batch=4)
        >>> every.at_batch_end(state), every.at_epoch_end(state)
        (True, False)
        >>> LogInterval("5sp", "demo log_interval")
        Traceback (most recent call last):
        ...
        ValueError: demo log_interval '5sp' is not supported: use a positive number of ...
        >>> LogInterval("10xx", "demo log_interval")
        Traceback (most recent call last):
        ...
        ValueError: demo log_interval '10xx' is not a valid time: expected a non-negative ...
    """

    __slots__ = ("batches", "epochs", "time")

    def __init__(self, value: TimeLike, what: str, default_unit: TimeUnit = TimeUnit.BATCH) -> None:
        if not isinstance(what, str) or not what.strip():
            raise TypeError(
                f"LogInterval what must be the owner and parameter the errors name, such as "
                f"'ConsoleLogger log_interval', got {what!r}."
            )
        if default_unit not in (TimeUnit.BATCH, TimeUnit.EPOCH):
            raise TypeError(
                f"LogInterval default_unit must be TimeUnit.BATCH or TimeUnit.EPOCH (the unit "
                f"of a bare int), got {default_unit!r}."
            )
        interval = Time.from_input(value, default_unit=default_unit, name=what)
        if interval.unit not in (TimeUnit.BATCH, TimeUnit.EPOCH) or interval.value < 1:
            raise ValueError(
                f"{what} {str(interval)!r} is not supported: use a positive number of batches "
                "or epochs, e.g. '10ba' or '1ep'."
            )
        self.time = interval
        self.batches = int(interval.value) if interval.unit is TimeUnit.BATCH else 0
        self.epochs = int(interval.value) if interval.unit is TimeUnit.EPOCH else 0

    @property
    def unit(self) -> TimeUnit:
        return self.time.unit

    @property
    def value(self) -> int:
        return int(self.time.value)

    def at_batch_end(self, state: State) -> bool:
        """Whether ``batch_end`` of the current batch is due (a batch interval only)."""
        return self.batches > 0 and state.timestamp._batch % self.batches == 0

    def at_epoch_end(self, state: State) -> bool:
        """Whether ``epoch_end`` of the current epoch is due (an epoch interval only)."""
        return self.epochs > 0 and state.timestamp._epoch % self.epochs == 0

    def __repr__(self) -> str:
        return f"LogInterval({str(self.time)!r})"
