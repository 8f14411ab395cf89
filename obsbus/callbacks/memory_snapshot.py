"""Record the CUDA allocator's history over a window of batches and write it out."""

from __future__ import annotations

import logging

from typing_extensions import override

from obsbus._check import check_int
from obsbus.callbacks._cuda_memory import (
    SNAPSHOT_FOLDER,
    SnapshotRecorder,
)
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import Time, TimeLike, TimeUnit

__all__ = ["MemorySnapshot"]

log = logging.getLogger("obsbus")


class MemorySnapshot(SnapshotRecorder):
    """Records every CUDA allocation over a window of batches, then writes the memory timeline.

    Composer's ``MemorySnapshot``: after ``skip_batches`` batches (warm-up,
    whose allocations differ from a steady step), the caching allocator
    records its allocations and frees with their Python stacks for
    ``interval`` batches; at the ``batch_end`` that closes the window this
    rank writes into the run folder:

    - ``memory_snapshots/rank{rank}-batch{batch}.pickle``: the snapshot
      (``torch.cuda.memory._snapshot()``); drag it onto
      https://pytorch.org/memory_viz.
    - ``memory_snapshots/rank{rank}-batch{batch}.html``: the active memory
      timeline (``torch.cuda._memory_viz.trace_plot``), to open in a browser.

    and hands both to ``logger.upload_file`` as ``{run_name}/memory_snapshots/...``.
    ``{batch}`` is the last batch of the window. One window per instance;
    a window cut short (the fit ends, the run raises) is written as it
    stands. Writing takes the training thread a moment, once.

    The history is shared with :class:`~obsbus.callbacks.OOMObserver`: while
    that one records, the window's file also holds what came before it, and
    recording goes on after the window.

    On a run without CUDA (or on a CPU device) it warns once, an
    :class:`~obsbus.ObsbusWarning`, and does nothing.

    Keys: none; it writes files.

    Args:
        skip_batches: batches to let pass before recording starts.
        interval: the window's length, in batches (``"3ba"``, or a bare int).
        max_entries: allocations and frees kept (a ring buffer; the oldest go).
        stacks: ``"python"`` (Python frames) or ``"all"`` (also C++ frames,
            which can take minutes to symbolize).
        folder: where the files go, relative to the run folder unless absolute;
            placeholders allowed.
        filename: the files' name without suffix; placeholders allowed.
        html: also write the HTML timeline.
        upload: hand the files to ``logger.upload_file``.

    Example:
        >>> import tempfile, warnings
        >>> from obsbus import ObsbusWarning, Run
        >>> snapshot = MemorySnapshot(skip_batches=1, interval="2ba")
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     with Run(max_duration="4ba", device="cpu", callbacks=[snapshot],
        ...              run_folder=tempfile.mkdtemp()) as run:
        ...         for batch in run.train([[1.0]] * 4):
        ...             pass
        >>> sum(w.category is ObsbusWarning for w in caught), snapshot.written
        (1, [])
    """

    def __init__(
        self,
        skip_batches: int = 1,
        interval: TimeLike = "3ba",
        max_entries: int = 100_000,
        *,
        stacks: str = "python",
        folder: str = SNAPSHOT_FOLDER,
        filename: str = "rank{rank}-batch{batch}",
        html: bool = True,
        upload: bool = True,
    ) -> None:
        check_int("MemorySnapshot", "skip_batches", skip_batches)
        try:
            window = Time.from_input(interval, default_unit=TimeUnit.BATCH)
        except (TypeError, ValueError) as exc:  # the parser's message does not say which argument
            raise type(exc)(
                f"MemorySnapshot interval {interval!r} is not supported: {exc} Accepted: a "
                "positive number of batches, e.g. '3ba' or 3."
            ) from None
        if window.unit is not TimeUnit.BATCH or window.value < 1:
            raise ValueError(
                f"MemorySnapshot interval {str(window)!r} is not supported: use a positive "
                "number of batches, e.g. '3ba' or 3."
            )
        self.skip_batches = skip_batches
        self.interval = window
        super().__init__("MemorySnapshot", max_entries, stacks, (folder, filename, html, upload))
        self._started_after: int | None = None  # batches completed when recording began
        self._done = False

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._cuda(self._history, state)

    @override
    def batch_start(self, state: State, logger: Logger) -> None:
        if self._done or self._started_after is not None or not self._cuda.enabled:
            return
        completed = state.timestamp._batch
        if completed >= self.skip_batches:
            self._started_after = completed
            self._history.start(self, self.max_entries, self.stacks)

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        start = self._started_after
        if start is not None and state.timestamp._batch - start >= self.interval.value:
            self._finish(state, logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        if self._started_after is not None:
            self._finish(state, logger)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        if self._started_after is not None:
            self._finish(state, logger)

    def _finish(self, state: State, logger: Logger) -> None:
        self._started_after = None
        self._done = True
        stem = self.files.stem(state, logger)
        try:
            snapshot = self._history.snapshot()
            paths = self.files.write(state, logger, snapshot, stem)
        except Exception:  # observability must not end the run
            log.exception("MemorySnapshot: could not write the memory snapshot %s", stem)
            return
        finally:
            self._history.stop(self)
        self.written.extend(paths)
        log.info("MemorySnapshot: memory timeline written: %s", ", ".join(map(str, paths)))

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._started_after = None
        self._history.stop(self)
