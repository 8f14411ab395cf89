"""How often a plug-in acts: every N batches or every N epochs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from obsbus.time import Time, TimeLike, TimeUnit

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = ["LogInterval", "at_interval"]


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


#: Events ``at_interval`` gates, and how each finds its count: the batch about to end
#: (``+1``: the batch is counted just before ``batch_end``), the batch just counted
#: (``0``), or the epoch just counted (``EPOCH``).
EPOCH = -1
GATED_EVENTS: dict[str, int] = {
    **{
        name: 1
        for name in (
            "before_dataloader",
            "after_dataloader",
            "batch_start",
            "before_train_batch",
            "before_forward",
            "after_forward",
            "before_loss",
            "after_loss",
            "before_backward",
            "after_backward",
            "after_train_batch",
        )
    },
    "batch_end": 0,
    "batch_checkpoint": 0,
    "epoch_end": EPOCH,
    "epoch_checkpoint": EPOCH,
}
_MARK = "__obsbus_interval__"
F = TypeVar("F", bound=Callable[..., Any])


def at_interval(attribute: str = "log_interval") -> Callable[[F], F]:
    """Declare that a hook only acts when the plug-in's ``self.<attribute>`` interval is due.

    The engine then does not call the hook on the other batches (or epochs): a
    monitor that logs every 10 batches costs nothing on the nine between. The
    interval is the :class:`LogInterval` the attribute holds when the engine
    builds its dispatch table (when the run is built, or a callback added);
    an attribute that holds ``None`` then leaves the hook called every time.
    The hook should still check the interval itself (``at_batch_end``), so a
    direct call, or a loop with no engine, behaves the same.

    Due means: at ``batch_end``/``batch_checkpoint``, the batch just counted is a
    multiple of the interval's batches; at the events of a batch before it
    (``after_forward``, ``after_train_batch``, ...), the batch being trained
    is; at ``epoch_end``/``epoch_checkpoint``, the epoch just counted is a
    multiple of its epochs. An interval in the other unit is never due.

    Example:
        >>> from obsbus import Callback
        >>> class EveryTen(Callback):
        ...     def __init__(self):
        ...         self.log_interval = LogInterval("10ba", "EveryTen log_interval")
        ...     @at_interval("log_interval")
        ...     def batch_end(self, state, logger):
        ...         if self.log_interval.at_batch_end(state):
        ...             logger.log_metrics({"every_ten": 1})
        >>> at_interval("log_interval")(lambda self, state, logger: None)
        Traceback (most recent call last):
        ...
        ValueError: at_interval decorates a hook of a batch or epoch event (batch_end, ...
    """
    if not isinstance(attribute, str) or not attribute.isidentifier():
        raise TypeError(
            f"at_interval attribute must name the plug-in attribute that holds its "
            f"LogInterval, such as 'log_interval', got {attribute!r}."
        )

    def mark(hook: F) -> F:
        name = getattr(hook, "__name__", None)
        if name not in GATED_EVENTS:
            raise ValueError(
                "at_interval decorates a hook of a batch or epoch event (batch_end, "
                f"after_train_batch, epoch_end, ...), got {name!r}. To fix, decorate one "
                f"of: {', '.join(GATED_EVENTS)}."
            )
        setattr(hook, _MARK, attribute)
        return hook

    return mark


def hook_period(plugin: object, event: str, hook: object) -> int | None:
    """The period, in the event's count, at which the engine calls ``hook`` at ``event``.

    ``None``: every time (not declared with :func:`at_interval`, or its
    attribute holds ``None``); ``0``: never (an interval in the other unit).
    """
    attribute = getattr(getattr(hook, "__func__", hook), _MARK, None)
    if attribute is None or event not in GATED_EVENTS:
        return None
    try:
        interval = getattr(plugin, attribute)
    except AttributeError:
        raise TypeError(
            f"{type(plugin).__name__}.{event} is declared @at_interval({attribute!r}), but "
            f"the plug-in has no attribute {attribute!r}. To fix, set self.{attribute} to a "
            "LogInterval in __init__, or name the attribute that holds it."
        ) from None
    if interval is None:
        return None
    if not isinstance(interval, LogInterval):
        raise TypeError(
            f"{type(plugin).__name__}.{attribute} must be a LogInterval for its "
            f"@at_interval hook {event}, got {interval!r}."
        )
    return interval.epochs if GATED_EVENTS[event] == EPOCH else interval.batches
