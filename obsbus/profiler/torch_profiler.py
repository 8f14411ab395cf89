"""Run ``torch.profiler`` over the batches the Profiler's schedule records."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus._check import check_bool, check_folder, check_folder_at_init
from obsbus.callback import Callback
from obsbus.logger import Logger
from obsbus.loggers._remote_folder import RemoteFiles, check_remote_name
from obsbus.loggers.remote_uploader_downloader import RemoteUploaderDownloader
from obsbus.masking import masks_errors
from obsbus.profiler import _torch_trace as tt
from obsbus.profiler._trace_files import check_keep, refuse_held_traces
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.state import State
from obsbus.writer import BackgroundWriter

__all__ = ["TorchProfiler"]

log = logging.getLogger("obsbus")
_SKIP, _SAVE = ProfilerAction.SKIP, ProfilerAction.ACTIVE_AND_SAVE


class TorchProfiler(Callback):
    """Profiles the scheduled batches with ``torch.profiler`` and writes a Chrome trace per window.

    Usually built by ``Profiler(..., torch_prof_folder="torch_traces")``; it can
    also be passed in ``callbacks``, next to a :class:`~obsbus.profiler.Profiler`.
    It follows the Profiler's action for each batch (set at ``before_dataloader``):
    ``warmup`` warms ``torch.profiler`` up, ``active`` records and
    ``active_and_save`` records and, at that batch's ``batch_end``, ends the
    window. During ``skip`` batches no ``torch.profiler`` exists. A window cut
    short (the schedule moves on without a save, the fit ends, the run raises)
    is saved as it stands. Each batch is a ``ProfilerStep#{n}`` span, ``n``
    being the batches done before it (0-based).

    For each window, this rank writes, from a background thread:

    - ``{folder}/{filename}``: the Chrome trace (``.gz`` appended with
      ``use_gzip``), with ``otherData.rank`` so ``obsbus merge-traces`` files
      it under the right rank; handed to every trace handler's
      ``process_chrome_json_trace_file`` (the JSON handler merges it into its
      merged trace) and uploaded as ``remote_file_name``;
    - ``{folder}/{memory_filename}``, if set: torch's memory timeline (HTML),
      uploaded as ``memory_remote_file_name``.

    Names take placeholders (``{run_name}``, ``{rank}``, ``{epoch}``, ``{batch}``,
    ...) filled when the window is saved; ``{batch}`` counts the batches done.
    A remote name may be a URI (Composer's way), e.g.
    ``"s3://bucket/{run_name}/torch_traces/rank{rank}.{batch}.pt.trace.json"``:
    the file goes to that bucket under the path, through the uploader in
    ``loggers`` that stores the bucket, else one the TorchProfiler makes (and
    closes after its last trace); the URI is checked at construction.
    ``folder`` is relative to the run folder. Activities: the CPU, plus CUDA when
    it is available and the run is not on another device, so a CPU-only machine
    profiles the CPU, without error.

    ``record_memory_history`` (Primus's switch) records the CUDA allocator's
    history from ``fit_start`` and writes the snapshot pickle to
    ``memory_snapshot_path`` (relative to the run folder, placeholders allowed) at
    ``fit_end`` or when the run raises; open it at https://pytorch.org/memory_viz.
    Without CUDA it warns once and does nothing.

    Args:
        folder: where traces go; ``None`` turns tracing off (for
            ``record_memory_history`` alone).
        filename: one trace per window.
        remote_file_name: the uploaded name; ``None``: no upload.
        memory_filename: the memory timeline (``.html``); needs ``record_shapes``,
            ``profile_memory`` and ``with_stack`` (and matplotlib).
        memory_remote_file_name: its uploaded name; ``None``: no upload.
        overwrite: replace earlier traces; otherwise a folder that already holds
            traces is an error at ``init``.
        use_gzip: gzip the traces.
        record_shapes: record operator input shapes (``Input Dims`` in the trace).
        profile_memory: record tensor allocations (``[memory]`` instants).
        with_stack: record Python stacks.
        with_flops: estimate FLOPs of matrix multiplications and convolutions
            (shown in ``torch.profiler``'s tables; it records shapes too).
        num_traces_to_keep: traces kept locally (``-1``: all), the oldest removed
            first (with their memory timelines).
        record_memory_history: record the CUDA allocator's history.
        memory_snapshot_path: where its snapshot goes.

    Example:
        >>> import tempfile
        >>> from obsbus import Run
        >>> from obsbus.profiler import Profiler, cyclic_schedule
        >>> profiler = Profiler(cyclic_schedule(warmup=1, active=1),
        ...                     torch_prof_folder="torch_traces")
        >>> with Run(max_duration="2ba", run_folder=tempfile.mkdtemp(), profiler=profiler) as run:
        ...     for batch in run.train([[1.0], [2.0]]):
        ...         pass  # batch 0 warms up, batch 1 is recorded and saved
        >>> [path.name for path in profiler.torch_profiler.saved_traces]
        ['rank0.2.pt.trace.json']
    """

    @masks_errors  # its messages quote the remote names, which may be URIs
    def __init__(
        self,
        folder: str | None = "torch_traces",
        filename: str = "rank{rank}.{batch}.pt.trace.json",
        remote_file_name: str | None = "{run_name}/torch_traces/rank{rank}.{batch}.pt.trace.json",
        memory_filename: str | None = None,
        memory_remote_file_name: str | None = (
            "{run_name}/torch_memory_traces/rank{rank}.{batch}.pt.trace.memory.html"
        ),
        overwrite: bool = False,
        use_gzip: bool = False,
        record_shapes: bool = False,
        profile_memory: bool = True,
        with_stack: bool = False,
        with_flops: bool = True,
        num_traces_to_keep: int = -1,
        record_memory_history: bool = False,
        memory_snapshot_path: str = "memory_snapshots/snapshot-rank{rank}.pickle",
    ) -> None:
        self.folder = tt.check_template("folder", folder, optional=True)
        check_folder("TorchProfiler", "folder", folder, allow_none=True)  # a file there: now
        self.use_gzip = check_bool("TorchProfiler", "use_gzip", use_gzip)
        gz = ".gz" if use_gzip else ""
        name = tt.check_template("filename", filename, optional=False)
        remote = tt.check_template(
            "remote_file_name",
            check_remote_name(remote_file_name, "TorchProfiler remote_file_name"),
            optional=True,
        )
        self.filename = str(name) + gz * (not str(name).endswith(".gz"))
        self.remote_file_name = remote and remote + gz * (not remote.endswith(".gz"))
        self.memory_filename = tt.check_template(
            "memory_filename", memory_filename, optional=True, suffix=".html"
        )
        self.memory_remote_file_name = tt.check_template(
            "memory_remote_file_name",
            check_remote_name(memory_remote_file_name, "TorchProfiler memory_remote_file_name"),
            optional=True,
            suffix=".html",
        )
        self.overwrite = check_bool("TorchProfiler", "overwrite", overwrite)
        self.record_shapes = check_bool("TorchProfiler", "record_shapes", record_shapes)
        self.profile_memory = check_bool("TorchProfiler", "profile_memory", profile_memory)
        self.with_stack = check_bool("TorchProfiler", "with_stack", with_stack)
        self.with_flops = check_bool("TorchProfiler", "with_flops", with_flops)
        self.num_traces_to_keep = check_keep("TorchProfiler", num_traces_to_keep)
        self.record_memory_history = check_bool(
            "TorchProfiler", "record_memory_history", record_memory_history
        )
        self.memory_snapshot_path = str(
            tt.check_template("memory_snapshot_path", memory_snapshot_path, optional=False)
        )
        if self.memory_filename is not None:
            tt.check_memory_timeline(record_shapes, profile_memory, with_stack, folder is not None)
        if folder is None and not record_memory_history:
            raise ValueError(
                "TorchProfiler(folder=None, record_memory_history=False) has nothing to do. "
                "To fix, pass a folder for torch.profiler traces, or record_memory_history=True."
            )
        #: The traces written (the newest last); pruned to ``num_traces_to_keep``.
        self.saved_traces: list[Path] = []
        #: The memory timelines and snapshots written.
        self.memory_files: list[Path] = []
        self._kept: list[list[Path]] = []  # per window: its files, for pruning
        self._remote = RemoteFiles(
            "TorchProfiler", [self.remote_file_name, self.memory_remote_file_name]
        )
        self._writer = BackgroundWriter("TorchProfiler")
        self._prof: Any = None  # the torch.profiler.profile of the open window
        self._current: ProfilerAction = _SKIP
        self._next: Any = None  # what the torch schedule answers at the next step()
        self._actions: dict[ProfilerAction, Any] = {}
        self._memory = tt.HistoryRecorder(record_memory_history, self.memory_snapshot_path)
        #: Whether ``torch.profiler`` raised (then this run records no more windows).
        self.failed = False
        self._state: State | None = None
        self._logger: Logger | None = None

    @property
    def remote_uploaders(self) -> list[RemoteUploaderDownloader]:
        """The uploaders made at ``init`` for URIs whose bucket no destination stores."""
        return self._remote.uploaders

    # ------------------------------------------------------------------ hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        if state.profiler is None:
            raise RuntimeError(
                "TorchProfiler follows a Profiler's schedule, and this run has none. To fix, "
                "pass profiler=Profiler(schedule, torch_prof_folder='torch_traces') to the "
                "Trainer or Run instead of the TorchProfiler callback."
            )
        self._state, self._logger = state, logger
        if self.folder is None:
            return
        self._actions = tt.torch_actions()
        self.claim_files(state, logger)
        self._remote.init(state, logger)

    def claim_files(self, state: State, logger: Logger) -> None:
        """Refuse the run, before it writes anything, if the folder holds another run's traces."""
        if self.folder is None:
            return
        folder = check_folder_at_init(
            "TorchProfiler",
            "folder (Profiler torch_prof_folder)",
            state.run_folder.resolve(logger.format_name(self.folder)),
        )
        if not self.overwrite:
            refuse_held_traces(
                "TorchProfiler", folder, ["*.json", "*.json.gz"], "torch_prof_overwrite"
            )

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._memory.start(state)

    @override
    def before_dataloader(self, state: State, logger: Logger) -> None:
        action = state.profiler.action
        if action is _SKIP and self._prof is None:
            return  # a batch outside every window costs this one test
        if self.folder is not None and not self.failed:
            self._guarded(self._follow, action, state)

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if state.profiler.action is _SAVE and self._current is _SAVE:
            self._guarded(self._close_window)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._guarded(self._close_window)
        self._memory.dump(state, logger, self._writer, self.memory_files)
        self._remote.fit_end(state, logger)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        self._guarded(self._close_window)
        self._memory.dump(state, logger, self._writer, self.memory_files)
        self._writer.flush(timeout=60)
        self._remote.exception(state, logger)

    @override
    def close(self, state: State, logger: Logger) -> None:
        try:
            self._guarded(self._close_window)
        finally:
            self._memory.stop()
            self._writer.close(timeout=60)
            self._remote.close(state, logger)

    def _guarded(self, step: Callable[..., None], *args: Any) -> None:
        """Run a ``torch.profiler`` step; if torch raises, stop profiling, not training."""
        try:
            step(*args)
        except Exception:
            self.failed, self._prof, self._current = True, None, _SKIP
            log.exception(
                "obsbus: torch.profiler failed (is another torch.profiler running?); "
                "TorchProfiler records no more windows in this run"
            )

    # --------------------------------------------------------- torch.profiler
    def _follow(self, action: ProfilerAction, state: State) -> None:
        """Move ``torch.profiler`` to ``action`` for the batch about to run."""
        current = self._current
        if action is _SKIP or (action is ProfilerAction.WARMUP and current in tt.RECORDING):
            self._close_window()  # saves a window that recorded
            if action is _SKIP:
                return
        if self._prof is None:
            self._open_window(state)
        self._prof.step_num = state.timestamp._batch - 1  # so the span is ProfilerStep#{batch}
        self._next = self._actions[action]
        self._prof.step()
        self._current = action

    def _open_window(self, state: State) -> None:
        import torch.profiler

        self._next = self._actions[_SKIP]
        prof = torch.profiler.profile(
            activities=tt.activities(state.device),
            schedule=lambda step: self._next,
            on_trace_ready=self._trace_ready,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
        )
        other = {"rank": state.rank, "run_name": state.run_name, "source": "torch.profiler"}
        prof.preset_metadata_json("otherData", tt.json_dumps(other))
        prof.__enter__()  # type: ignore[no-untyped-call]
        self._prof = prof

    def _close_window(self) -> None:
        prof, self._prof = self._prof, None
        self._current = _SKIP
        if prof is not None:
            prof.__exit__(None, None, None)  # a recording window is saved (on_trace_ready)

    def _trace_ready(self, prof: Any) -> None:
        """torch ended a recording window: name its files now, write them in the background."""
        state, logger = self._state, self._logger
        assert state is not None
        assert logger is not None
        assert self.folder is not None
        results, prof.profiler = prof.profiler, None  # the next window gets a fresh one
        folder = state.run_folder.resolve(logger.format_name(self.folder))
        path = folder / logger.format_name(self.filename)
        memory = None
        if self.memory_filename is not None:
            memory = folder / logger.format_name(self.memory_filename)
        remote = self.remote_file_name and logger.format_name(self.remote_file_name).lstrip("/")
        memory_remote = self.memory_remote_file_name and logger.format_name(
            self.memory_remote_file_name
        ).lstrip("/")
        handlers = list(getattr(state.profiler, "trace_handlers", ()))
        device = tt.memory_device(state.device) if memory is not None else "cpu"
        self._writer.submit(
            self._write, results, path, memory, remote, memory_remote, handlers, device
        )

    def _write(
        self,
        results: Any,
        path: Path,
        memory: Path | None,
        remote: str | None,
        memory_remote: str | None,
        handlers: list[Any],
        device: str,
    ) -> None:
        logger = self._logger
        assert logger is not None
        tt.export_chrome_trace(results, path, self.use_gzip)
        files = [path]
        self.saved_traces.append(path)
        log.info("obsbus: torch.profiler trace written: %s", path)
        if memory is not None and tt.contained(
            f"write the memory timeline {memory}", log, tt.export_memory_timeline,
            results, memory, device,
        ):  # fmt: skip
            files.append(memory)
            self.memory_files.append(memory)
        for handler in handlers:
            tt.contained(
                f"hand {path.name} to {type(handler).__name__}",
                log,
                handler.process_chrome_json_trace_file,
                path,
            )
        if remote:
            self._remote.upload(logger, remote, path, overwrite=self.overwrite)
        if memory_remote and memory is not None and memory in files:
            self._remote.upload(logger, memory_remote, memory, overwrite=self.overwrite)
        self._kept.append(files)
        keep = self.num_traces_to_keep
        while keep >= 0 and len(self._kept) > keep:
            for old in self._kept.pop(0):
                old.unlink(missing_ok=True)
                for kept in (self.saved_traces, self.memory_files):
                    if old in kept:
                        kept.remove(old)
