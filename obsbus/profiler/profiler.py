"""The Profiler: a schedule, markers, and the trace handlers that store what they record."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from obsbus._check import check_bool, check_folder, check_iterable_of
from obsbus.callback import Callback
from obsbus.event import Event
from obsbus.masking import masks_errors
from obsbus.naming import check_placeholders
from obsbus.profiler import _torch_trace
from obsbus.profiler.marker import Marker
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.torch_profiler import TorchProfiler
from obsbus.profiler.trace_handler import TraceHandler
from obsbus.time import Timestamp

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = ["Profiler"]

_RECORDING = (ProfilerAction.ACTIVE, ProfilerAction.ACTIVE_AND_SAVE)
_SCHEDULED = frozenset({Event.INIT, Event.FIT_START, Event.EPOCH_START, Event.BEFORE_DATALOADER})
_FIT_END = Event.FIT_END


class Profiler:
    """Records spans, instants and counters during the batches its schedule selects.

    Attach it with ``Trainer(..., profiler=profiler)`` or
    ``Run(..., profiler=profiler)``. Before every batch the schedule (any
    ``state -> ProfilerAction``, e.g. ``cyclic_schedule()``) sets :attr:`action`
    for the batch about to run (at its ``before_dataloader``); markers record
    while it is ``active`` or ``active_and_save``, and trace handlers write at
    ``active_and_save``.
    Evaluation inside fit keeps the action of the batch it follows.

    While a profiler is attached, the engine wraps every paired event in a
    span (``event/batch``, ``event/forward``, ``event/eval``, ...), marks
    unpaired ones as instants (``event/batch_checkpoint``), and wraps each
    callback's hook in its own span (``callback/{Class}/{event}``), so a trace
    shows what every monitor and destination costs. Without a profiler the
    engine takes none of these steps.

    ``torch.profiler`` runs too when ``torch_prof_folder`` is given (Composer's
    ``torch_prof_*`` arguments, with Composer's defaults): the same schedule
    drives it, and each window's Chrome trace goes to that folder (relative to
    the run folder), to every trace handler (the JSON handler merges it) and to
    ``logger.upload_file``. ``record_memory_history`` (Primus's switch) records
    the CUDA allocator's history and writes ``memory_snapshot_path`` at
    ``fit_end``. :class:`~obsbus.profiler.torch_profiler.TorchProfiler` documents
    them all. Without these arguments ``torch.profiler`` is never imported, and
    a ``torch_prof_*`` argument without ``torch_prof_folder`` is an error.

    Args:
        schedule: ``state -> ProfilerAction``, called before each batch.
        trace_handlers: where the records go.
        record_events: wrap engine events in spans.
        record_callbacks: wrap each callback hook in a span.
        torch_prof_folder: run ``torch.profiler`` and write its traces here;
            ``None``: no ``torch.profiler``.
        torch_prof_filename: TorchProfiler ``filename``.
        torch_prof_remote_file_name: TorchProfiler ``remote_file_name``; a bucket URI
            (``"s3://bucket/{run_name}/torch_traces/rank{rank}.{batch}.pt.trace.json"``)
            sends the traces to that bucket, with an uploader of its own when no
            destination in ``loggers`` stores it (as Composer does).
        torch_prof_memory_filename: TorchProfiler ``memory_filename``.
        torch_prof_memory_remote_file_name: TorchProfiler ``memory_remote_file_name``
            (a URI works too).
        torch_prof_overwrite: TorchProfiler ``overwrite``.
        torch_prof_use_gzip: TorchProfiler ``use_gzip``.
        torch_prof_record_shapes: TorchProfiler ``record_shapes``.
        torch_prof_profile_memory: TorchProfiler ``profile_memory``.
        torch_prof_with_stack: TorchProfiler ``with_stack``.
        torch_prof_with_flops: TorchProfiler ``with_flops``.
        torch_prof_num_traces_to_keep: TorchProfiler ``num_traces_to_keep``.
        record_memory_history: record the CUDA allocator's history (CUDA only;
            elsewhere it warns once).
        memory_snapshot_path: where its snapshot goes (placeholders allowed).

    Attributes:
        torch_profiler: the :class:`~obsbus.profiler.torch_profiler.TorchProfiler`
            these arguments built, or ``None``.

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
    """

    @masks_errors  # its messages quote the remote names, which may be URIs
    def __init__(
        self,
        schedule: Callable[[State], ProfilerAction],
        trace_handlers: Sequence[TraceHandler] = (),
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
            accepted="a list of TraceHandler instances (e.g. [JSONTraceHandler()])",
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
        # The torch_prof_* arguments and the memory-history pair, by name.
        settings = {k: v for k, v in locals().items() if k in _torch_trace.PROFILER_ARGS}
        self.torch_profiler = _build_torch_profiler(settings)

    def bind(self, state: State) -> list[Callback]:
        """Attach to a run's state; return the callbacks to add to the engine.

        The TorchProfiler comes first, so that at ``close`` its last traces reach
        the trace handlers before they merge.
        """
        self.state = state
        state.profiler = self
        first = [] if self.torch_profiler is None else [self.torch_profiler]
        return [*first, *self.trace_handlers]

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
        actions: Sequence[ProfilerAction] = _RECORDING,
        record_instant_on_start: bool = False,
        record_instant_on_finish: bool = False,
        categories: Sequence[str] = (),
    ) -> Marker:
        """A :class:`~obsbus.profiler.Marker` named ``name`` (the same object for the same name)."""
        marker = self._markers.get(name)
        if marker is None:
            marker = Marker(
                self, name, actions, record_instant_on_start, record_instant_on_finish, categories
            )
            self._markers[name] = marker
        return marker

    @property
    def recording(self) -> bool:
        """Whether the current action records."""
        return self.action in _RECORDING

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


def _build_torch_profiler(settings: dict[str, Any]) -> TorchProfiler | None:
    """The TorchProfiler the ``torch_prof_*`` settings ask for, or ``None``."""
    if settings["torch_prof_folder"] is None:
        _torch_trace.check_unused(settings, _torch_trace.defaults(Profiler))
        if not settings["record_memory_history"]:
            return None
    args = _torch_trace.PROFILER_ARGS
    return TorchProfiler(**{args[key]: value for key, value in settings.items()})
