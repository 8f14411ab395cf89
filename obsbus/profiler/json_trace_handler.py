"""Write what the profiler records as Chrome/Perfetto JSON traces, one per saved window."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus import dist
from obsbus._check import check_bool, check_folder, check_folder_at_init
from obsbus.logger import Logger
from obsbus.loggers._remote_folder import RemoteFiles, check_remote_uri
from obsbus.loggers.remote_uploader_downloader import RemoteUploaderDownloader
from obsbus.naming import check_placeholders
from obsbus.profiler import _json_trace as jt
from obsbus.profiler._trace_files import check_keep, refuse_held_traces
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.trace_handler import TraceHandler
from obsbus.state import State
from obsbus.time import Timestamp
from obsbus.writer import BackgroundWriter

__all__ = ["JSONTraceHandler"]

log = logging.getLogger("obsbus")


class JSONTraceHandler(TraceHandler):
    """Saves each profiled window as a Chrome trace (open it in Perfetto or chrome://tracing).

    Events are held in memory while the schedule records and written, by a
    background writer, at every ``active_and_save`` batch: every cycle's
    trace is kept (``num_traces_to_keep`` prunes the oldest). The format is
    Chrome's trace event JSON: ``B``/``E`` spans, ``i`` instants, ``C``
    counters, ``M`` metadata naming the process (``rank {r}``, sorted by rank)
    and thread; ``ts`` is wall-clock µs and ``pid`` the global rank. A span
    still open when a window is saved is ended at the save; its real end,
    which lands in a later window, is dropped, so no saved trace has an
    unmatched begin or end.

    Clocks: at ``fit_start``, on several ranks, each rank measures its clock
    against rank 0's (one gather) and writes the offset as an
    ``obsbus_clock`` metadata event, which :func:`obsbus.profiler.merge.merge_traces`
    applies. At ``close``, rank 0 merges every rank's traces found in the
    folder into ``merged_trace_filename`` (on several nodes, point the folder
    at shared storage, or merge by hand with ``obsbus merge-traces``). Chrome
    traces written by others and handed to :meth:`process_chrome_json_trace_file`
    (``torch.profiler``'s, from :class:`~obsbus.profiler.torch_profiler.TorchProfiler`)
    are listed in :attr:`chrome_traces` and merged too, on their rank's row. Each
    file is handed to ``logger.upload_file`` under the name
    ``remote_file_name`` (or ``merged_trace_remote_file_name``) gives it.

    The arguments are Composer's, with its defaults, except that ``folder`` is
    relative to the run folder (``'traces'``; Composer's ``'{run_name}/traces'``
    is relative to the working directory), the merge happens once, at
    ``close``, ``num_traces_to_keep=0`` is refused, and a file is a JSON object
    (read its events as ``json.load(f)["traceEvents"]``; Composer's is a list).

    Args:
        folder: where traces go; relative to the run folder.
        filename: one trace per saved window; placeholders ``{epoch}``,
            ``{batch}``, ``{rank}``, ``{run_name}``, ...
        remote_file_name: each trace's uploaded name (a bucket URI works too:
            ``"s3://bucket/{run_name}/traces/ep{epoch}-ba{batch}-rank{rank}.json"``);
            ``None``: not uploaded.
        merged_trace_filename: the merged trace (in ``folder``), or ``None``.
        merged_trace_remote_file_name: its uploaded name (or URI); ``None``: not uploaded.
        overwrite: replace existing files; otherwise a folder that already holds
            traces is an error at ``init``.
        num_traces_to_keep: how many per-window traces to keep (``-1``: all).
        remote_folder: obsbus's shorthand for both remote names: a bucket URI
            such as ``"s3://bucket/{run_name}/traces"`` (or a plain remote
            folder) that every trace goes to under its own file name.

    A URI's bucket is stored through the uploader in ``loggers`` that stores
    it, else one the handler makes (and closes after the merged trace).

    Example:
        >>> import json, tempfile
        >>> from obsbus import Run
        >>> from obsbus.profiler import Profiler, ProfilerAction
        >>> handler = JSONTraceHandler()
        >>> profiler = Profiler(lambda state: ProfilerAction.ACTIVE_AND_SAVE, [handler])
        >>> folder = tempfile.mkdtemp()
        >>> with Run(max_duration="1ba", run_folder=folder, profiler=profiler) as run:
        ...     for batch in run.train([[1]]):
        ...         pass
        >>> trace = json.load(open(handler.saved_traces[0]))
        >>> sorted({e["ph"] for e in trace["traceEvents"]})
        ['B', 'E', 'M', 'i']
    """

    def __init__(
        self,
        folder: str = "traces",
        filename: str = "ep{epoch}-ba{batch}-rank{rank}.json",
        remote_file_name: str | None = jt.REMOTE_FILE_NAME,
        merged_trace_filename: str | None = "merged_trace.json",
        merged_trace_remote_file_name: str | None = jt.MERGED_REMOTE_FILE_NAME,
        *,
        overwrite: bool = False,
        num_traces_to_keep: int = -1,
        remote_folder: str | None = None,
    ) -> None:
        self.folder = check_placeholders(folder, "JSONTraceHandler folder")
        check_folder("JSONTraceHandler", "folder", folder)  # an absolute one; relative at init
        self.filename = str(jt.check_name(filename, "filename", optional=False))
        self.merged_trace_filename = jt.check_name(
            merged_trace_filename, "merged_trace_filename", optional=True
        )
        self.remote_file_name = jt.check_name(remote_file_name, "remote_file_name", optional=True)
        self.merged_trace_remote_file_name = jt.check_name(
            merged_trace_remote_file_name, "merged_trace_remote_file_name", optional=True
        )
        self.num_traces_to_keep = check_keep("JSONTraceHandler", num_traces_to_keep)
        self.overwrite = check_bool("JSONTraceHandler", "overwrite", overwrite)
        self.remote_folder = remote_folder
        if remote_folder is not None:
            check_remote_uri(remote_folder, "JSONTraceHandler remote_folder")
        self._remote_trace, self._remote_merged = jt.remote_names(
            remote_folder,
            self.remote_file_name,
            self.merged_trace_remote_file_name,
            self.filename,
            self.merged_trace_filename,
        )
        self._remote = RemoteFiles(
            "JSONTraceHandler", [remote_folder, self._remote_trace, self._remote_merged]
        )
        self.saved_traces: list[Path] = []
        #: Chrome traces others wrote (``torch.profiler``), merged at close if still there.
        self.chrome_traces: list[Path] = []
        self._expected: list[Path] = []  # every rank's traces, known at fit_end
        self.name = "JSONTraceHandler"
        self._writer = BackgroundWriter("JSONTraceHandler")
        self._events: list[dict[str, Any]] = []
        self._open: dict[str, int] = {}  # name -> spans begun in this window, not ended
        self._carried: dict[str, int] = {}  # name -> spans ended early by a save
        self._offset_us = 0.0
        self._lock = threading.Lock()
        self._state: State | None = None
        self._logger: Logger | None = None

    @property
    def remote_uploaders(self) -> list[RemoteUploaderDownloader]:
        """The uploader made for ``remote_folder`` at ``init`` (none if ``loggers`` had one)."""
        return self._remote.uploaders

    # ------------------------------------------------------------ recording
    def _event(
        self, ph: str, name: str, categories: Sequence[str], wall_ns: int, **extra: Any
    ) -> None:
        event = {"name": name, "ph": ph, "ts": wall_ns / 1000.0, "pid": self._rank(), "tid": 0}
        if categories:
            event["cat"] = ",".join(categories)
        event.update(extra)
        with self._lock:
            self._events.append(event)

    def _rank(self) -> int:
        return self._state.rank if self._state is not None else 0

    @override
    def process_duration_event(
        self,
        name: str,
        categories: Sequence[str],
        is_start: bool,
        timestamp: Timestamp,
        wall_clock_time_ns: int,
    ) -> None:
        if is_start:
            self._open[name] = self._open.get(name, 0) + 1
            args = {"epoch": timestamp.epoch.value, "batch": timestamp._batch}
            self._event("B", name, categories, wall_clock_time_ns, args=args)
            return
        if self._open.get(name, 0) > 0:
            self._open[name] -= 1
            self._event("E", name, categories, wall_clock_time_ns)
        elif self._carried.get(name, 0) > 0:
            self._carried[name] -= 1  # ended at an earlier save already

    @override
    def process_instant_event(
        self, name: str, categories: Sequence[str], timestamp: Timestamp, wall_clock_time_ns: int
    ) -> None:
        args = {"epoch": timestamp.epoch.value, "batch": timestamp._batch}
        self._event("i", name, categories, wall_clock_time_ns, s="t", args=args)

    @override
    def process_counter_event(
        self,
        name: str,
        categories: Sequence[str],
        timestamp: Timestamp,
        wall_clock_time_ns: int,
        values: Mapping[str, float],
    ) -> None:
        self._event("C", name, categories, wall_clock_time_ns, args=dict(values))

    @override
    def process_chrome_json_trace_file(self, file_path: Path) -> None:
        with self._lock:  # called from the TorchProfiler's writer thread
            self.chrome_traces.append(Path(file_path))

    # ---------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        if state.profiler is None:  # Composer raises too (at batch_start)
            raise RuntimeError(
                "JSONTraceHandler records what a Profiler's markers record, and this run has "
                "no Profiler. To fix, pass profiler=Profiler(schedule, [JSONTraceHandler()]) to "
                "the Trainer or Run instead of the handler in callbacks."
            )
        self.claim_files(state, logger)
        self._remote.init(state, logger)

    def claim_files(self, state: State, logger: Logger) -> None:
        """Refuse the run, before it writes anything, if the folder holds another run's traces."""
        if state.profiler is None:
            return  # init says what is wrong
        self._state, self._logger = state, logger
        folder = check_folder_at_init(
            "JSONTraceHandler", "folder", self._path(state, logger, "x").parent
        )
        if not self.overwrite:
            refuse_held_traces("JSONTraceHandler", folder, ["*.json"])

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._offset_us = jt.clock_offset_us()

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        profiler = state.profiler
        if profiler is not None and profiler.action is ProfilerAction.ACTIVE_AND_SAVE:
            self._save(state, logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._writer.flush()
        if dist.is_initialized() and dist.get_world_size() > 1:
            # Every rank's traces are on disk once all ranks are past this point, so
            # rank 0's merge at close can't miss a rank that finished its last window late.
            names = dist.all_gather_object([str(p) for p in self.saved_traces])
            self._expected = [Path(n) for rank_names in names for n in rank_names]
        self._remote.fit_end(state, logger)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        if self._events and any(e["ph"] != "M" for e in self._events):
            self._save(state, logger)  # what was recorded before the crash
        self._writer.flush(timeout=60)
        self._remote.exception(state, logger)

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._writer.flush(timeout=60)
        if self.merged_trace_filename is not None and state.rank == 0 and self.saved_traces:
            self._writer.submit(self._merge, state, logger)
        self._writer.close(timeout=60)
        self._remote.close(state, logger)

    # --------------------------------------------------------------- saving
    def _save(self, state: State, logger: Logger) -> None:
        wall = time.time_ns()
        with self._lock:
            events, self._events = self._events, []
        events += jt.end_open_spans(events, self._open, self._carried, wall / 1000.0, state.rank)
        self._open = {}
        path = self._path(state, logger, self.filename)
        self.saved_traces.append(path)
        doc = {
            "traceEvents": jt.metadata(state.rank, self._offset_us, wall) + events,
            "displayTimeUnit": "ms",
            "otherData": {
                "rank": state.rank,
                "run_name": state.run_name,
                "batch": state.timestamp._batch,
            },
        }
        # The remote name is filled now: the writer runs when the timestamp moved on.
        remote = self._remote_trace and logger.format_name(self._remote_trace).lstrip("/")
        self._writer.submit(self._write, path, doc, remote, logger)
        if self.num_traces_to_keep > 0:
            while len(self.saved_traces) > self.num_traces_to_keep:
                self._writer.submit(jt.remove, [self.saved_traces.pop(0)])

    def _path(self, state: State, logger: Logger, name: str) -> Path:
        folder = state.run_folder.resolve(logger.format_name(self.folder))
        return folder / logger.format_name(name)

    def _write(self, path: Path, doc: dict[str, Any], remote: str | None, logger: Logger) -> None:
        jt.write_json(path, doc)
        if remote:
            self._remote.upload(logger, remote, path, overwrite=self.overwrite)

    def _merge(self, state: State, logger: Logger) -> None:
        assert self.merged_trace_filename is not None
        folder = self._path(state, logger, "x").parent
        target = folder / logger.format_name(self.merged_trace_filename)
        with self._lock:
            others = list(self.chrome_traces)
        if jt.merge(folder, target, self._expected, others, log) and self._remote_merged:
            remote = logger.format_name(self._remote_merged).lstrip("/")
            self._remote.upload(logger, remote, target, overwrite=True)
