"""Markers: named spans, instants and counters that record only when the schedule says so."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from obsbus._check import check_bool, check_iterable_of, check_str, short
from obsbus.profiler.profiler_action import ProfilerAction

if TYPE_CHECKING:
    from obsbus.profiler.profiler import Profiler

__all__ = ["Marker"]

F = TypeVar("F", bound=Callable[..., Any])
#: The actions a marker records in by default: Composer's (warm-up batches too).
RECORDING = (ProfilerAction.WARMUP, ProfilerAction.ACTIVE, ProfilerAction.ACTIVE_AND_SAVE)
_ACCEPTED_ACTIONS = ", ".join(repr(a.value) for a in ProfilerAction)


def check_actions(owner: str, actions: object) -> frozenset[ProfilerAction]:
    """``actions`` as a set of :class:`ProfilerAction` (their string values are taken too)."""
    accepted = f"a list of ProfilerAction (or their values: {_ACCEPTED_ACTIONS})"
    if isinstance(actions, (str, bytes, ProfilerAction)) or not isinstance(actions, Iterable):
        raise TypeError(
            f"{owner} actions must be {accepted}, got {actions!r}. To fix, pass e.g. "
            "[ProfilerAction.ACTIVE, ProfilerAction.ACTIVE_AND_SAVE]."
        )
    items = list(actions)
    out = set()
    for item in items:
        try:
            out.add(ProfilerAction(item))
        except (ValueError, TypeError):
            raise TypeError(
                f"{owner} actions must be {accepted}, got {item!r} among {short(items)}."
            ) from None
    if not out:
        raise ValueError(
            f"{owner} actions is empty ({actions!r}): the marker would never record. "
            f"To fix, pass the actions to record in, from {_ACCEPTED_ACTIONS}."
        )
    return frozenset(out)


def check_categories(owner: str, categories: object) -> tuple[str, ...]:
    """``categories`` as a tuple of str; ``None`` gives ``()``."""
    accepted = "a list of str (e.g. ['dataloader']) or None"
    if isinstance(categories, str):
        raise TypeError(
            f"{owner} categories must be {accepted}, got {categories!r}. "
            f"To fix, pass [{categories!r}]."
        )
    items = check_iterable_of(
        owner, "categories", categories, str, accepted=accepted, allow_none=True
    )
    return tuple(items)


class Marker:
    """A named span, usable as ``start()``/``finish()``, a context manager or a decorator.

    Make markers with :meth:`Profiler.marker(name) <obsbus.profiler.Profiler.marker>`
    (the same object for the same name), as in Composer. Whether a span records
    is decided when it starts, from the profiler's current action (see
    :class:`~obsbus.profiler.Profiler`): by default in ``warmup``, ``active``
    and ``active_and_save`` batches (Composer's default). A span that started
    recording always records its end, and one that started while not
    recording never records an end, so a saved trace has no unmatched begin or
    end from a marker. :meth:`instant` and :meth:`counter` record when the
    current action is one of ``actions``.

    Args:
        profiler: the :class:`~obsbus.profiler.Profiler` whose trace handlers get the records.
        name: the span's name in the trace.
        actions: the actions to record in (``ProfilerAction`` values, or their strings).
        record_instant_on_start: also record an instant when a span starts.
        record_instant_on_finish: also record an instant when a span ends.
        categories: the trace event's categories (``cat`` in a Chrome trace).

    Example:
        >>> from obsbus.profiler import Profiler, ProfilerAction
        >>> profiler = Profiler(lambda state: ProfilerAction.ACTIVE, sys_prof_cpu=False)
        >>> profiler.action = ProfilerAction.ACTIVE
        >>> @profiler.marker("load")
        ... def load(n):
        ...     return n * 2
        >>> load(21)
        42
        >>> with profiler.marker("step", categories=["train"]) as m:
        ...     m.counter({"tokens": 512})
        >>> profiler.marker("other", actions=["sometimes"])
        Traceback (most recent call last):
        ...
        TypeError: Marker 'other' actions must be a list of ProfilerAction (or their values: ...
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
        actions: Sequence[ProfilerAction] = RECORDING,
        record_instant_on_start: bool = False,
        record_instant_on_finish: bool = False,
        categories: Sequence[str] | None = (),
    ) -> None:
        from obsbus.profiler.profiler import Profiler

        if not isinstance(profiler, Profiler):
            raise TypeError(
                f"Marker profiler must be an obsbus.profiler.Profiler, got {profiler!r}. To fix, "
                "make markers with profiler.marker(name), e.g. state.profiler.marker('my_span')."
            )
        check_str("Marker", "name", name)
        owner = f"Marker {name!r}"
        self._profiler = profiler
        self.name = name
        self.actions = check_actions(owner, actions)
        self.record_instant_on_start = check_bool(
            owner, "record_instant_on_start", record_instant_on_start
        )
        self.record_instant_on_finish = check_bool(
            owner, "record_instant_on_finish", record_instant_on_finish
        )
        self.categories = check_categories(owner, categories)
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

    @overload
    def __call__(self, func: None = None) -> Marker: ...
    @overload
    def __call__(self, func: F) -> F: ...
    def __call__(self, func: F | None = None) -> F | Marker:
        """Use the marker as a decorator (``@marker`` or ``@marker()``): each call is a span."""
        if func is None:
            return self
        if not callable(func):
            raise TypeError(f"Marker {self.name!r} decorates a function, got {func!r}.")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
