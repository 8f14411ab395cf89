"""The :class:`Engine`: runs each event's hooks in order and closes plug-ins."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, cast

from obsbus._failures import plugin_name
from obsbus._hook_names import warn_near_misses
from obsbus.callback import Callback
from obsbus.event import Event
from obsbus.interval import EPOCH, GATED_EVENTS, hook_period
from obsbus.logger import Logger, LoggerDestination, is_list_like, takes_files

if TYPE_CHECKING:
    from collections.abc import Callable

    from obsbus.profiler.profiler import Profiler
    from obsbus.state import State

__all__ = ["Engine"]

log = logging.getLogger("obsbus")
#: The shared deadline of a run's end when no destination names a ``close_timeout``.
DEFAULT_CLOSE_TIMEOUT = 30.0
# Module constants: looking members up on the Event class costs ~0.3 µs each on 3.11.
_INIT, _EXCEPTION = Event.INIT, Event.EXCEPTION
_EPOCH_END, _FIT_END = Event.EPOCH_END, Event.FIT_END
# What each event records while profiling, built once: names cost ~1 µs each to format.
_SPANS: dict[Event, tuple[str, str]] = {
    event: (
        ("begin", f"event/{event.canonical_name}")
        if event.is_before_event
        else ("end", f"event/{event.canonical_name}")
        if event.is_after_event
        else ("instant", f"event/{event.value}")
    )
    for event in Event
}


def overrides(plugin: Callback, hook: str) -> bool:
    """Whether ``plugin`` overrides ``hook`` of :class:`Callback` (class or instance)."""
    method = getattr(plugin, hook, None)
    return getattr(method, "__func__", method) is not getattr(Callback, hook)


def _handler(plugin: Callback, event: Event) -> Callable[[State, Logger], None] | None:
    """What runs ``plugin`` at ``event``: its own ``run_event`` if it has one (then it gets
    every event, as in Composer), else the hook it overrides, else nothing."""
    if overrides(plugin, "run_event"):
        return functools.partial(plugin.run_event, event)
    if overrides(plugin, event.value):
        hook: Callable[[State, Logger], None] = getattr(plugin, event.value)
        return hook
    return None


class _Gate(NamedTuple):
    """How a gated event finds its count, its hooks' periods (> 1), and the entries whose
    period is 1 (run alone on a count no other period divides)."""

    offset: int
    periods: tuple[int, ...]
    always_cbs: tuple[tuple[Any, ...], ...]
    always_dests: tuple[tuple[Any, ...], ...]


class Engine:
    """Dispatches events to callbacks and to the logger's destinations.

    Order: at ``init`` destinations run first (so they are ready before a
    callback logs); at every other event callbacks run first and destinations
    last (so they see what callbacks logged in the same event), each group in
    the order given.

    A callback's exception propagates: that is how a monitor stops a run. A
    destination's exception is contained by the logger's failure log:
    reported once with its name, counted, the rest go on (``strict=True`` on
    the :class:`~obsbus.Logger` raises instead), with one exception: at
    ``init``, before anything has run, a destination that can't set itself
    up (a file it must not overwrite, a directory where a file should be)
    raises, so a misconfigured run fails at once instead of losing its logs.
    At ``exception`` every error is contained, so the original one reaches
    the caller.

    Dispatch goes through a table of the plug-ins that override each hook,
    built when the engine is and again after ``init`` (so a plug-in can drop,
    in its ``init``, a hook this run gives it nothing to do in); an event
    nobody handles costs one dict lookup. A plug-in that
    overrides :meth:`~obsbus.Callback.run_event` is called through it at
    every event (``exception`` included), as Composer's engine calls every
    callback; its hook methods then run only if its ``run_event`` calls them
    (``super().run_event(event, state, logger)`` does).

    ``callbacks`` omitted (Composer's ``Engine(state, logger)``), the engine
    runs the plug-ins in ``state.callbacks``: its callbacks, and its
    destinations as destinations (those the logger was not given get every
    event but no logging calls, as in Composer).

    A plug-in with a method named like a hook but not quite
    (``on_batch_end``, ``batch_ends``, ``after_backwards``) gets an
    :class:`~obsbus.ObsbusWarning` here, naming the hook it probably meant.

    Example:
        >>> from obsbus import Event, Logger, State
        >>> from obsbus.loggers import InMemoryLogger
        >>> state = State(run_name="r")
        >>> mem = InMemoryLogger()
        >>> engine = Engine(state, Logger(state, [mem]))
        >>> engine.run_event(Event.INIT)
        >>> mem.state is state
        True
        >>> engine.close(); engine.close()  # idempotent
    """

    def __init__(
        self, state: State, logger: Logger, callbacks: Iterable[Callback] | None = None
    ) -> None:
        if not hasattr(state, "timestamp"):
            raise TypeError(f"Engine state must be an obsbus State, got {state!r}.")
        if not isinstance(cast(object, logger), Logger):
            raise TypeError(f"Engine logger must be an obsbus Logger, got {logger!r}.")
        listed: tuple[LoggerDestination, ...] = ()
        if callbacks is None:
            callbacks, listed = _from_state(state, logger)
        if not is_list_like(callbacks):
            raise TypeError(f"Engine callbacks must be a list of Callback, got {callbacks!r}.")
        self.state = state
        self.logger = logger
        self.callbacks: list[Callback] = []
        self.close_errors: list[tuple[str, BaseException]] = []
        self._closed = False
        self.profiler: Profiler | None = None
        #: Every destination the engine runs: the logger's, then those only in ``state.callbacks``.
        self.destinations: tuple[LoggerDestination, ...] = (*logger.destinations, *listed)
        self._table: dict[str, tuple[tuple[Any, ...], tuple[Any, ...], Event, _Gate | None]] = {}
        #: Whether anything handles each event: one dict, updated in place, so a loop that
        #: holds it can skip an unhandled event for the price of one lookup.
        self.handles: dict[Event, bool] = {}
        for cb in callbacks:
            self._check(cb)
            self.callbacks.append(cb)
        for dest in self.destinations:
            warn_near_misses(dest)
        self._build_table()

    @staticmethod
    def _check(cb: object) -> None:
        if not isinstance(cb, Callback):
            raise TypeError(f"Expected a Callback instance in callbacks, got {cb!r}.")
        if isinstance(cb, LoggerDestination):
            raise TypeError(
                f"{type(cb).__name__} is a LoggerDestination; pass it in loggers=[...] so "
                "that it receives what is logged."
            )
        warn_near_misses(cb)

    def _build_table(self) -> None:
        """One entry per event: ``(callbacks, destinations, event, gate)``.

        Each callback entry is ``(plugin, hook, period)`` and each destination
        entry ``(plugin, hook, name, period)``. ``period`` is 1 for a hook called
        every time; a hook declared with :func:`~obsbus.interval.at_interval`
        has its interval's period (a hook whose interval is never due at the
        event is left out). ``gate`` is ``None`` when every period is 1, else a
        :class:`_Gate`: how the event finds its count
        (:data:`~obsbus.interval.GATED_EVENTS`), the distinct periods, and the
        entries called every time.
        """
        table: dict[str, tuple[tuple[Any, ...], tuple[Any, ...], Event, _Gate | None]] = {}
        spanned = self._spanned
        for event in Event:
            name = event.value
            cbs: list[tuple[Any, ...]] = []
            dests: list[tuple[Any, ...]] = []
            for plugin in (*self.callbacks, *self.destinations):
                handler = _handler(plugin, event)
                if handler is None:
                    continue
                period = hook_period(plugin, name, handler)
                if period == 0:
                    continue  # its interval is in the other unit: never due here
                period = period or 1
                hook = spanned(plugin, event, handler)
                if isinstance(plugin, LoggerDestination):
                    dests.append((plugin, self._watched(plugin, name, hook), name, period))
                else:
                    cbs.append((plugin, hook, period))
            periods = {entry[-1] for entry in (*cbs, *dests)} - {1}
            gate = None
            if periods:
                gate = _Gate(
                    GATED_EVENTS[name],
                    tuple(sorted(periods)),
                    tuple(e for e in cbs if e[-1] == 1),
                    tuple(e for e in dests if e[-1] == 1),
                )
            table[event] = (tuple(cbs), tuple(dests), event, gate)
            # Run skips an event nobody handles without calling run_event (profiling: none).
            self.handles[event] = self.profiler is not None or bool(cbs or dests)
        self._table = table

    def _watched(
        self, dest: LoggerDestination, action: str, hook: Callable[[State, Logger], None]
    ) -> Callable[[State, Logger], None]:
        """The hook as the logger's watchdog sees it (unchanged when there is none)."""
        dog = self.logger.watchdog
        if dog is None:
            return hook
        name = plugin_name(dest)

        def watched(state: State, logger: Logger) -> None:
            dog.call(name, action, hook, state, logger)

        return watched

    def _spanned(
        self, plugin: Callback, event: Event, hook: Callable[[State, Logger], None]
    ) -> Callable[[State, Logger], None]:
        """``hook``, wrapped in a ``callback/{Class}/{event}`` span when profiling."""
        profiler = self.profiler
        if profiler is None or not profiler.record_callbacks:
            return hook
        marker = profiler.marker(
            f"callback/{type(plugin).__name__}/{event.value}", categories=("callback",)
        )

        def spanned(state: State, logger: Logger) -> None:
            marker.start()
            try:
                hook(state, logger)
            finally:
                marker.finish()

        return spanned

    def attach_profiler(self, profiler: Profiler) -> None:
        """Profile this run: event and hook spans, and the trace handlers as callbacks.

        Without this call :meth:`run_event` takes none of these steps.
        """
        self.profiler = profiler
        for cb in profiler.bind(self.state):
            self._check(cb)
            if cb not in self.callbacks:
                self.callbacks.append(cb)
                self._list_in_state(cb)
        self._build_table()
        self.run_event = self._run_profiled  # type: ignore[method-assign]

    def _run_profiled(self, event: Event | str) -> None:
        profiler = self.profiler
        assert profiler is not None
        event = self._table[event][2] if event in self._table else _unknown(event)
        profiler.on_event(event)
        marker = None
        if profiler.record_events:
            kind, name = _SPANS[event]
            if kind == "begin":
                profiler.marker(name, categories=("event",)).start()
            elif kind == "end":
                marker = profiler.marker(name, categories=("event",))
            else:
                profiler.marker(name, categories=("event",)).instant()
        try:
            Engine.run_event(self, event)
        finally:
            if marker is not None and marker.is_open:
                marker.finish()
            if event is _EPOCH_END:
                profiler.finish_open_spans("event/dataloader")
            elif event is _FIT_END or event is _EXCEPTION:
                profiler.finish_open_spans()

    def add_callback(self, callback: Callback) -> None:
        """Add a callback; safe from inside a hook (the running event sees the old list)."""
        self._check(callback)
        self.callbacks.append(callback)
        self._list_in_state(callback)
        self._build_table()

    def _list_in_state(self, callback: Callback) -> None:
        """Keep ``state.callbacks`` (Composer's list of what the run uses) up to date."""
        held = getattr(self.state, "callbacks", None)
        if isinstance(held, list) and callback not in held:
            held.append(callback)

    @property
    def closed(self) -> bool:
        return self._closed

    def run_event(self, event: Event | str) -> None:
        """Run every hook that handles ``event`` (an :class:`Event`, or its value as Composer)."""
        try:
            cbs, dests, event, gate = self._table[event]
        except KeyError:
            _unknown(event)
        if not (cbs or dests):
            return
        state, logger = self.state, self.logger
        if gate is not None:  # a batch or epoch event with at_interval hooks
            ts, offset = state.timestamp, gate.offset
            count = ts._epoch if offset == EPOCH else ts._batch + offset
            for period in gate.periods:
                if count % period == 0:
                    self._run_gated(cbs, dests, count)
                    return
            # Most batches: no gated hook is due (one modulo per distinct period said so),
            # so only the hooks called every time run, below, in their order.
            cbs, dests = gate.always_cbs, gate.always_dests
        if event is _EXCEPTION:
            self._run_contained(event, cbs)
            with self._ending():
                self._run_contained(event, dests)
            return
        if event is _INIT:
            # Nothing has run yet: a destination that can't set itself up (a
            # file it must not clobber, a bad path) fails the run now, loudly.
            for _, hook, _, _ in dests:
                hook(state, logger)
            for _, hook, _ in cbs:
                hook(state, logger)
            # A plug-in may have dropped a hook it has no use for in this run (an instance
            # attribute holding the base class's hook; see Callback): look again.
            self._build_table()
            return
        for _, hook, _ in cbs:
            hook(state, logger)
        if dests:
            if event is _FIT_END:
                with self._ending():
                    self._run_destinations(dests)
                return
            call = logger.failures.call  # _run_destinations, inlined: this runs every step
            for dest, hook, name, _ in dests:
                call(dest, name, hook, state, logger)

    def _run_gated(
        self, cbs: tuple[tuple[Any, ...], ...], dests: tuple[tuple[Any, ...], ...], count: int
    ) -> None:
        """A gated event at a ``count`` some period divides: only the hooks due are called."""
        state, logger = self.state, self.logger
        for _, hook, period in cbs:
            if count % period == 0:
                hook(state, logger)
        if dests:
            call = logger.failures.call
            for dest, hook, name, period in dests:
                if count % period == 0:
                    call(dest, name, hook, state, logger)

    def _run_destinations(self, dests: tuple[tuple[Any, ...], ...]) -> None:
        call, state, logger = self.logger.failures.call, self.state, self.logger
        for dest, hook, name, _ in dests:
            call(dest, name, hook, state, logger)

    @contextmanager
    def _ending(self) -> Iterator[None]:
        """While destinations flush at the end of a run, one deadline bounds all their waits.

        It is the longest ``close_timeout`` among them (30 s if none has one), so
        hung destinations cost about one timeout in all, not one each.
        """
        timeouts = [getattr(d, "close_timeout", None) for d in self.destinations]
        numbers = [t for t in timeouts if isinstance(t, (int, float)) and not isinstance(t, bool)]
        deadline = self.logger.deadline
        deadline.begin(max(numbers, default=DEFAULT_CLOSE_TIMEOUT))
        try:
            yield
        finally:
            deadline.end()

    def _run_contained(self, event: Event, entries: tuple[tuple[Any, ...], ...]) -> None:
        for plugin, hook, *_ in entries:
            try:
                hook(self.state, self.logger)
            except Exception as exc:
                self.logger.failures.report(plugin_name(plugin), event.value, exc)

    def close(self) -> None:
        """Close every plug-in once, best effort; then ``post_close`` those that closed.

        Callbacks close before destinations, so a monitor's last metrics
        still reach them, and destinations that store files (they override
        ``upload_file`` or say ``can_upload_files()``) close last, so the files
        the others hand over as they close (a FileLogger's final log) still
        reach them. A failing ``close`` is logged and skips only that
        plug-in's ``post_close``. Nothing raises out of here unless the
        logger is strict and no exception is already ending the run.
        """
        if self._closed:
            return
        self._closed = True
        closed: list[Callback] = []
        dests = self.destinations
        stores = [d for d in dests if takes_files(d)]
        others = [d for d in dests if not takes_files(d)]
        for group in (self.callbacks, [*others, *stores]):
            with self._ending() if group is not self.callbacks else nullcontext():
                for plugin in group:
                    try:
                        plugin.close(self.state, self.logger)
                        closed.append(plugin)
                    except Exception as exc:
                        name = plugin_name(plugin)
                        self.close_errors.append((name, exc))
                        log.error("obsbus: %s.close failed", name, exc_info=exc)
        for plugin in closed:
            try:
                plugin.post_close()
            except Exception as exc:
                name = plugin_name(plugin)
                self.close_errors.append((name, exc))
                log.error("obsbus: %s.post_close failed", name, exc_info=exc)
        if self.logger.watchdog is not None:
            self.logger.watchdog.stop()
        for line in self.logger.failures.summary():
            log.warning("obsbus: %s", line)
        if self.close_errors and self.logger.failures.strict and sys.exc_info()[1] is None:
            name, first = self.close_errors[0]
            raise RuntimeError(f"{name} failed to close: {first!r}") from first


def _from_state(
    state: State, logger: Logger
) -> tuple[list[Callback], tuple[LoggerDestination, ...]]:
    """The callbacks, and the destinations the logger lacks, in ``state.callbacks``."""
    held = getattr(state, "callbacks", None) or []
    if not is_list_like(held):
        raise TypeError(f"state.callbacks must be a list of Callback, got {held!r}.")
    callbacks = [p for p in held if not isinstance(p, LoggerDestination)]
    known = {id(d) for d in logger.destinations}
    listed = tuple(p for p in held if isinstance(p, LoggerDestination) and id(p) not in known)
    return callbacks, listed


def _unknown(event: object) -> NoReturn:
    """Raise the error for a name that is not an event."""
    raise ValueError(
        f"{event!r} is not an obsbus Event; expected one of: "
        + ", ".join(e.value for e in Event)
        + "."
    )
