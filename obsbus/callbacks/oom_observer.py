"""On a CUDA out-of-memory error, write the allocator's memory snapshot and timeline."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus.callbacks._cuda_memory import (
    SNAPSHOT_FOLDER,
    SnapshotRecorder,
    find_oom,
)
from obsbus.logger import Logger
from obsbus.state import State

__all__ = ["OOMObserver"]

log = logging.getLogger("obsbus")
GB = 1e9


class OOMObserver(SnapshotRecorder):
    """Records the CUDA allocator's history and, on out-of-memory, writes what it saw.

    From ``fit_start`` to ``close`` the caching allocator records its last
    ``max_entries`` allocations and frees, with their Python stacks
    (``torch.cuda.memory._record_memory_history``). When memory runs out,
    this rank writes into the run folder:

    - ``memory_snapshots/oom-rank{rank}-batch{batch}.pickle``: the snapshot
      (``torch.cuda.memory._snapshot()``); drag it onto
      https://pytorch.org/memory_viz.
    - ``memory_snapshots/oom-rank{rank}-batch{batch}.html``: the active
      memory timeline (``torch.cuda._memory_viz.trace_plot``), to open in a
      browser (it loads the viewer's script from a CDN).

    and hands both to ``logger.upload_file`` as ``{run_name}/memory_snapshots/...``.
    ``{batch}`` is the number of batches completed when memory ran out.

    It hears of the error twice, and writes once: the allocator's OOM
    observer fires inside the failing allocation, while the memory is as it
    was, and the snapshot is taken there; the ``exception`` event (with a
    ``torch.OutOfMemoryError`` on ``state.exception``, or raised from one)
    then writes the timeline and uploads. An OOM that only the ``exception``
    event sees (the observer is missing from this torch build) is
    snapshotted there. An OOM that the program caught and survived is
    written at the next ``batch_end``.

    Cost: recording adds about 2 µs per allocation and holds a few KB of host
    memory per entry (100000 entries: a few hundred MB). The history is
    shared with :class:`~obsbus.callbacks.MemorySnapshot` and is switched
    off at ``close`` after its last user; a history you started yourself is
    switched off then too.

    On a run without CUDA (or on a CPU device) it warns once, an
    :class:`~obsbus.ObsbusWarning`, and does nothing.

    Keys: none; it writes files.

    Args:
        max_entries: allocations and frees kept in the history (a ring buffer).
        stacks: ``"python"`` (Python frames) or ``"all"`` (also C++ frames,
            which can take minutes to symbolize when the snapshot is taken).
        folder: where the files go, relative to the run folder unless absolute;
            placeholders (``{run_name}``, ``{rank}``, ...) allowed.
        filename: the files' name without suffix; placeholders allowed.
        html: also write the HTML timeline.
        upload: hand the files to ``logger.upload_file``.

    Example:
        >>> import tempfile, warnings
        >>> from obsbus import ObsbusWarning, Run
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     with Run(max_duration="2ba", device="cpu", callbacks=[OOMObserver()],
        ...              run_folder=tempfile.mkdtemp()) as run:
        ...         for batch in run.train([[1.0], [2.0]]):
        ...             pass
        >>> [str(w.message)[:51] for w in caught if w.category is ObsbusWarning]
        ["OOMObserver does nothing: the run is on 'cpu', not "]
    """

    def __init__(
        self,
        max_entries: int = 100_000,
        *,
        stacks: str = "python",
        folder: str = SNAPSHOT_FOLDER,
        filename: str = "oom-rank{rank}-batch{batch}",
        html: bool = True,
        upload: bool = True,
    ) -> None:
        super().__init__("OOMObserver", max_entries, stacks, (folder, filename, html, upload))
        self._state: State | None = None
        self._logger: Logger | None = None
        # What the allocator's observer captured, until it is written out.
        self._pending: tuple[Any, Path, str] | None = None

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        if not self._cuda(self._history, state):
            return
        self._state, self._logger = state, logger
        self._history.start(self, self.max_entries, self.stacks)
        if not self._history.add_oom_observer(self, self._on_allocator_oom):
            log.warning(
                "OOMObserver: this torch build has no allocator OOM observer; snapshots are "
                "taken at the exception event instead, after the stack has unwound."
            )

    def _on_allocator_oom(self, device: int, alloc: int, total: int, free: int) -> None:
        """The allocator's observer: take the snapshot now, while memory is as it was.

        ``total`` is the device's capacity, or what ``set_per_process_memory_fraction`` allows.
        """
        state, logger = self._state, self._logger
        if self._pending is not None or state is None or logger is None:
            return  # one snapshot per OOM: the allocator may retry and call again
        detail = (
            f"device {device} could not allocate {alloc / GB:.3f} GB; "
            f"{free / GB:.3f} GB free of {total / GB:.3f} GB"
        )
        self._pending = (self._history.snapshot(), self.files.stem(state, logger), detail)

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self._pending is not None:  # an OOM the program survived
            self._flush(state, logger)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        if (
            self._pending is None
            and self._cuda.enabled
            and self._history.is_recording(self)
            and find_oom(state.exception) is not None
        ):
            snapshot = self._history.snapshot()
            self._pending = (snapshot, self.files.stem(state, logger), "out of memory")
        if self._pending is not None:
            self._flush(state, logger)

    def _flush(self, state: State, logger: Logger) -> None:
        assert self._pending is not None
        snapshot, stem, detail = self._pending
        self._pending = None
        try:
            paths = self.files.write(state, logger, snapshot, stem)
        except Exception:
            log.exception("OOMObserver: could not write the memory snapshot %s", stem)
            return
        self.written.extend(paths)
        log.warning(
            "OOMObserver: CUDA out of memory (%s); memory snapshot written: %s",
            detail,
            ", ".join(map(str, paths)),
        )

    @override
    def close(self, state: State, logger: Logger) -> None:
        if self._pending is not None:
            self._flush(state, logger)
        self._history.remove_oom_observer(self)
        self._history.stop(self)
        self._state = self._logger = None
