"""Markers: named spans, instants and counters that record only when the schedule says so."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from obsbus.profiler.profiler_action import ProfilerAction

if TYPE_CHECKING:
    from obsbus.profiler.profiler import Profiler

__all__ = ["Marker"]

F = TypeVar("F", bound=Callable[..., Any])
_RECORDING = (ProfilerAction.ACTIVE, ProfilerAction.ACTIVE_AND_SAVE)


class Marker:
    """A named span, usable as ``start()``/``finish()``, a context manager or a decorator.

    Whether a span records is decided when it starts, from the profiler's
    current action (see :class:`~obsbus.profiler.Profiler`): a span that
    started recording always records its end, and one that started while
    not recording never records an end, so a saved trace has no unmatched
    begin or end from a marker. :meth:`instant` and :meth:`counter` record when
    the current action is one of ``actions``.

    Example:
        >>> from obsbus.profiler import Profiler, ProfilerAction
        >>> profiler = Profiler(lambda state: ProfilerAction.ACTIVE)
        >>> profiler.action = ProfilerAction.ACTIVE
        >>> @profiler.marker("load")
        ... def load(n):
        ...     return n * 2
        >>> load(21)
        42
        >>> with profiler.marker("step") as m:
        ...     m.counter({"tokens": 512})
    """

    __slots__ = (
        "_open",
        "_profiler",
        "actions",
        "categories",
        "name",
        "record_instant_on_finish",
        "record_instant_on_start",
    )

    def __init__(
        self,
        profiler: Profiler,
        name: str,
        actions: Sequence[ProfilerAction] = _RECORDING,
        record_instant_on_start: bool = False,
        record_instant_on_finish: bool = False,
        categories: Sequence[str] = (),
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"A marker name must be a non-empty str, got {name!r}.")
        bad = [a for a in actions if not isinstance(a, ProfilerAction)]
        if bad:
            raise TypeError(
                f"Marker {name!r} actions must be ProfilerAction values, got {bad!r}; accepted: "
                + ", ".join(a.value for a in ProfilerAction)
                + "."
            )
        self._profiler = profiler
        self.name = name
        self.actions = frozenset(actions)
        self.record_instant_on_start = record_instant_on_start
        self.record_instant_on_finish = record_instant_on_finish
        self.categories = tuple(categories)
        self._open: bool | None = None  # while a span is open: whether it records

    @property
    def is_open(self) -> bool:
        """Whether a span of this marker has started and not finished."""
        return self._open is not None

    def _recording(self) -> bool:
        return self._profiler.action in self.actions

    def start(self) -> Marker:
        """Begin a span (recorded if the current action is one of ``actions``).

        Raises:
            RuntimeError: this marker's span is already open (markers do not nest).
        """
        if self._open is not None:
            raise RuntimeError(
                f"Marker {self.name!r} started twice: finish() it first. Markers do not nest; "
                "to time a span inside another, use a marker with another name."
            )
        recording = self._recording()
        self._open = recording
        if recording:
            wall = time.time_ns()
            self._profiler._emit_duration(self.name, self.categories, True, wall)
            if self.record_instant_on_start:
                self._profiler._emit_instant(self.name, self.categories, wall)
        return self

    def finish(self) -> None:
        """End the open span.

        Raises:
            RuntimeError: no span of this marker is open (finish before start).
        """
        if self._open is None:
            raise RuntimeError(f"Marker {self.name!r}: finish() without a matching start().")
        recording, self._open = self._open, None
        if recording:
            wall = time.time_ns()
            self._profiler._emit_duration(self.name, self.categories, False, wall)
            if self.record_instant_on_finish:
                self._profiler._emit_instant(self.name, self.categories, wall)

    def instant(self) -> None:
        """Record that something happened now."""
        if self._recording():
            self._profiler._emit_instant(self.name, self.categories, time.time_ns())

    def counter(self, values: Mapping[str, float]) -> None:
        """Record counter values now (a ``C`` event in a Chrome trace)."""
        if self._recording():
            self._profiler._emit_counter(self.name, self.categories, time.time_ns(), values)

    def __enter__(self) -> Marker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish()

    def __call__(self, func: F) -> F:
        """Use the marker as a decorator: each call of ``func`` is a span."""

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
