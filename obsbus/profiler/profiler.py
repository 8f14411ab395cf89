"""The Profiler: a schedule, markers, and the trace handlers that store what they record."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from obsbus._check import check_bool, check_folder, check_iterable_of
from obsbus._init_args import record_init_args
from obsbus.callback import Callback
from obsbus.errors import ObsbusWarning
from obsbus.event import Event
from obsbus.masking import masks_errors
from obsbus.naming import check_placeholders
from obsbus.profiler import _profiler_setup as _setup
from obsbus.profiler import _torch_trace
from obsbus.profiler.marker import RECORDING, Marker, check_categories
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.system_profiler import SystemProfiler
from obsbus.profiler.trace_handler import TraceHandler
from obsbus.time import Timestamp

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = ["Profiler"]

_SCHEDULED = frozenset({Event.INIT, Event.FIT_START, Event.EPOCH_START, Event.BEFORE_DATALOADER})
_FIT_END = Event.FIT_END


@record_init_args  # its arguments go into the run's config/plugins.json
class Profiler:
    """Records spans, instants and counters during the batches its schedule selects.

    Attach it with ``Trainer(..., profiler=profiler)`` or ``Run(..., profiler=profiler)``.
    Before every batch (at its ``before_dataloader``) the schedule (any
    ``state -> ProfilerAction``, e.g. ``cyclic_schedule()``) sets :attr:`action`;
    markers record while it is ``warmup``, ``active`` or ``active_and_save``
    (Composer's default), and trace handlers write at ``active_and_save``.
    Evaluation inside fit keeps the action of the batch it follows. The engine
    wraps every paired event in a span (``event/batch``, ``event/forward``,
    ...), marks unpaired ones as instants (``event/batch_checkpoint``), and
    wraps each callback's hook in a span (``callback/{Class}/{event}``).

    The other arguments are Composer's, with its defaults and meaning, except
    that ``torch.profiler`` is off by default: ``sys_prof_*`` build a
    :class:`~obsbus.profiler.SystemProfiler` (CPU counters unless all four are
    ``False``; one in ``callbacks`` replaces it). ``torch.profiler`` runs when
    ``torch_prof_folder`` is given (relative to the run folder): the same
    schedule drives it, and each window's Chrome trace goes to that folder, to
    every trace handler and to ``logger.upload_file``;
    :class:`~obsbus.profiler.TorchProfiler` documents the ``torch_prof_*``
    settings. Without ``torch_prof_folder`` torch is never imported; Composer's
    defaults and ``False`` switches (how Composer turns it off) are accepted, and
    any other ``torch_prof_*`` value, which would be ignored, is an error.

    Args:
        schedule: ``state -> ProfilerAction``, called before each batch.
        trace_handlers: where the records go (one handler or a list).
        sys_prof_cpu: SystemProfiler ``profile_cpu``.
        sys_prof_memory: SystemProfiler ``profile_memory``.
        sys_prof_disk: SystemProfiler ``profile_disk``.
        sys_prof_net: SystemProfiler ``profile_net``.
        sys_prof_stats_thread_interval_seconds: seconds between its samples.
        record_events: wrap engine events in spans.
        record_callbacks: wrap each callback hook in a span.
        torch_prof_folder: run ``torch.profiler`` and write its traces here;
            ``None``: no ``torch.profiler``.
        torch_prof_filename: TorchProfiler ``filename``.
        torch_prof_remote_file_name: TorchProfiler ``remote_file_name``; a bucket
            URI sends the traces to that bucket (as in Composer).
        torch_prof_memory_filename: TorchProfiler ``memory_filename``.
        torch_prof_memory_remote_file_name: TorchProfiler ``memory_remote_file_name``.
        torch_prof_overwrite: TorchProfiler ``overwrite``.
        torch_prof_use_gzip: TorchProfiler ``use_gzip``.
        torch_prof_record_shapes: TorchProfiler ``record_shapes``.
        torch_prof_profile_memory: TorchProfiler ``profile_memory``.
        torch_prof_with_stack: TorchProfiler ``with_stack``.
        torch_prof_with_flops: TorchProfiler ``with_flops``.
        torch_prof_num_traces_to_keep: TorchProfiler ``num_traces_to_keep``.
        record_memory_history: record the CUDA allocator's history (Primus's
            switch; CUDA only, elsewhere it warns once).
        memory_snapshot_path: where its snapshot goes at ``fit_end``.

    Attributes:
        system_profiler: the SystemProfiler the ``sys_prof_*`` arguments built, or ``None``.
        torch_profiler: the TorchProfiler the ``torch_prof_*`` arguments built, or ``None``.

    Example:
        >>> from obsbus.profiler.trace_handler import TraceHandler
        >>> class Names(TraceHandler):
        ...     def __init__(self):
        ...         self.names = set()
        ...     def process_duration_event(self, name, categories, is_start, timestamp, wall_ns):
        ...         self.names.add(name)
        >>> from obsbus import Run
        >>> names = Names()
        >>> profiler = Profiler(lambda state: ProfilerAction.ACTIVE, [names])
        >>> with Run(max_duration="1ba", profiler=profiler) as run:
        ...     for batch in run.train([[1]]):
        ...         pass
        >>> sorted(n for n in names.names if n.startswith("event/"))
        ['event/batch', 'event/dataloader', 'event/epoch', 'event/fit', 'event/iteration',
         'event/load', 'event/train_batch']
        >>> Profiler(lambda state: ProfilerAction.SKIP, torch_prof_with_stack=True)
        Traceback (most recent call last):
        ...
        ValueError: Profiler(torch_prof_with_stack=True) has no effect without ...: ...
    """

    @masks_errors  # its messages quote the remote names, which may be URIs
    def __init__(
        self,
        schedule: Callable[[State], ProfilerAction],
        trace_handlers: TraceHandler | Sequence[TraceHandler] = (),
        sys_prof_cpu: bool = True,
        sys_prof_memory: bool = False,
        sys_prof_disk: bool = False,
        sys_prof_net: bool = False,
        sys_prof_stats_thread_interval_seconds: float = 0.5,
        *,
        record_events: bool = True,
        record_callbacks: bool = True,
        torch_prof_folder: str | None = None,
        torch_prof_filename: str = "rank{rank}.{batch}.pt.trace.json",
        torch_prof_remote_file_name: str | None = (
            "{run_name}/torch_traces/rank{rank}.{batch}.pt.trace.json"
        ),
        torch_prof_memory_filename: str | None = None,
        torch_prof_memory_remote_file_name: str | None = (
            "{run_name}/torch_memory_traces/rank{rank}.{batch}.pt.trace.memory.html"
        ),
        torch_prof_overwrite: bool = False,
        torch_prof_use_gzip: bool = False,
        torch_prof_record_shapes: bool = False,
        torch_prof_profile_memory: bool = True,
        torch_prof_with_stack: bool = False,
        torch_prof_with_flops: bool = True,
        torch_prof_num_traces_to_keep: int = -1,
        record_memory_history: bool = False,
        memory_snapshot_path: str = "memory_snapshots/snapshot-rank{rank}.pickle",
    ) -> None:
        if not callable(schedule):
            raise TypeError(
                f"Profiler schedule must be a callable state -> ProfilerAction (e.g. "
                f"cyclic_schedule()), got {schedule!r}."
            )
        handlers = check_iterable_of(
            "Profiler",
            "trace_handlers",
            trace_handlers,
            TraceHandler,
            accepted="a TraceHandler or a list of them (e.g. [JSONTraceHandler()])",
            allow_single=True,
        )
        # Checked here even when no TorchProfiler is built, which would check them later.
        check_folder("Profiler", "torch_prof_folder", torch_prof_folder, allow_none=True)
        check_bool("Profiler", "record_memory_history", record_memory_history)
        check_placeholders(memory_snapshot_path, "Profiler memory_snapshot_path")
        self.schedule = schedule
        self.trace_handlers: list[TraceHandler] = handlers
        self.record_events = check_bool("Profiler", "record_events", record_events)
        self.record_callbacks = check_bool("Profiler", "record_callbacks", record_callbacks)
        self.action = ProfilerAction.SKIP
        self.state: State | None = None
        self._markers: dict[str, Marker] = {}
        # The sys_prof_* and torch_prof_* arguments (and the memory-history pair), by name.
        given = locals()
        sys_prof = {k: given[k] for k in _setup.SYS_PROF}
        self.system_profiler = _setup.build_system_profiler(sys_prof)
        self._sys_prof_changed = [
            f"{k}={v!r}" for k, v in sys_prof.items() if v != _DEFAULTS.get(k, v)
        ]
        self._user_system_profiler: SystemProfiler | None = None
        settings = {k: given[k] for k in _torch_trace.PROFILER_ARGS}
        self.torch_profiler = _setup.build_torch_profiler(settings, _DEFAULTS)

    def bind(self, state: State) -> list[Callback]:
        """Attach to a run's state; return the callbacks to add to the engine.

        The TorchProfiler comes first, so that at ``close`` its last traces reach
        the trace handlers before they merge; the SystemProfiler next, so that
        its samples reach them before they save.
        """
        self.state = state
        state.profiler = self
        self._user_system_profiler = None
        own = [self.torch_profiler, self.system_profiler]
        return [*(cb for cb in own if cb is not None), *self.trace_handlers]

    def bind_to_state(self, state: State) -> None:
        """Composer's name for :meth:`bind`: attach to ``state`` (a Trainer or Run does it).

        The profiler's callbacks are added to ``state.callbacks`` where the
        state keeps that list, as Composer's ``bind_to_state`` does. Markers
        work from then on, and record when :attr:`action` says so.
        """
        callbacks = self.bind(state)
        held = getattr(state, "callbacks", None)
        if isinstance(held, list):
            held.extend(cb for cb in callbacks if cb not in held)

    def record_chrome_json_trace_file(self, filepath: str | os.PathLike[str]) -> None:
        """Hand a Chrome trace written elsewhere to every trace handler (Composer's method)."""
        for handler in self.trace_handlers:
            handler.process_chrome_json_trace_file(Path(filepath))

    def _warn_sys_prof_unused(self) -> None:
        if self._sys_prof_changed:
            warnings.warn(
                f"Profiler({', '.join(self._sys_prof_changed)}) is not used: the run's "
                "callbacks hold a SystemProfiler of their own, which records instead. To fix, "
                "drop the SystemProfiler from callbacks or the sys_prof_* arguments.",
                ObsbusWarning,
                stacklevel=4,
            )

    def on_event(self, event: Event) -> None:
        """Follow the run: the schedule picks the action of each batch before it starts.

        The engine calls this first for every event. At ``before_dataloader``
        the timestamp counts the batches done, so the schedule sees the index
        of the batch about to run (as it would at ``batch_start``), and the
        batch's dataloader wait is profiled with it. It is also asked at
        ``init``, ``fit_start`` and ``epoch_start``, so the spans those open are
        recorded when the first batch will be. ``fit_end`` stops recording.
        """
        if event in _SCHEDULED:
            assert self.state is not None
            self.action = ProfilerAction(self.schedule(self.state))
        elif event is _FIT_END:
            self.action = ProfilerAction.SKIP

    def finish_open_spans(self, only: str | None = None) -> None:
        """End the ``event/`` spans still open (or only the one named ``only``).

        The engine calls it after ``epoch_end`` for the dataloader wait that
        found the epoch exhausted (it has no ``after_dataloader``), and after
        ``fit_end`` and ``exception`` for whatever a crash left open.
        """
        for name, marker in self._markers.items():
            if name.startswith("event/") and (only is None or name == only) and marker.is_open:
                marker.finish()

    def marker(
        self,
        name: str,
        actions: Sequence[ProfilerAction] = RECORDING,
        record_instant_on_start: bool = False,
        record_instant_on_finish: bool = False,
        categories: Sequence[str] | None = (),
    ) -> Marker:
        """The :class:`~obsbus.profiler.Marker` named ``name`` (the same object for the same name).

        As in Composer, the first call's ``actions`` and ``record_instant_*``
        stay, and each call sets the marker's ``categories``. By default a
        marker records in ``warmup``, ``active`` and ``active_and_save`` batches.
        """
        marker = self._markers.get(name)
        if marker is None:
            marker = Marker(
                self, name, actions, record_instant_on_start, record_instant_on_finish, categories
            )
            self._markers[name] = marker
        elif categories != marker.categories:
            marker.categories = check_categories(f"Marker {name!r}", categories)
        return marker

    @property
    def recording(self) -> bool:
        """Whether the current action is one markers record in by default."""
        return self.action in RECORDING

    def _timestamp(self) -> Timestamp:
        return self.state.timestamp if self.state is not None else Timestamp()

    def _emit_duration(
        self, name: str, categories: Sequence[str], is_start: bool, wall_ns: int
    ) -> None:
        ts = self._timestamp()
        for handler in self.trace_handlers:
            handler.process_duration_event(name, categories, is_start, ts, wall_ns)

    def _emit_instant(self, name: str, categories: Sequence[str], wall_ns: int) -> None:
        ts = self._timestamp()
        for handler in self.trace_handlers:
            handler.process_instant_event(name, categories, ts, wall_ns)

    def _emit_counter(
        self, name: str, categories: Sequence[str], wall_ns: int, values: Mapping[str, float]
    ) -> None:
        ts = self._timestamp()
        for handler in self.trace_handlers:
            handler.process_counter_event(name, categories, ts, wall_ns, values)


_DEFAULTS = _torch_trace.defaults(Profiler)
