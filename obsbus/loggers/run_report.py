"""Write the run's HTML report at its end, and hand it on as an artifact (``obsbus[report]``).

**What the end of a run costs.** One page, written on the training thread
at ``fit_end`` (``exception`` for a failed run); ``close`` writes it again
only when a file the page is made of changed since
(:func:`obsbus.report._read.input_files`, by size and time) or the status or
failures did. A short run (20 batches of :func:`tests.report._runs.train`:
six monitors, a FileLogger, a profiler window with a JSON trace handler; 10
plots), measured with::

    .venv/bin/python -m tests.report._measure_end --runs 3   # 3 times, alternated

on a 2-core machine shared with other work (load ~3, so the spread is
wide), 9 runs each, in seconds:

==========================  ======================  ===========================
                            before (31054f3)        now
==========================  ======================  ===========================
page at fit_end             1.55 median (1.39 min)  1.94 median (1.29 min)
page again at close         1.12 median (0.64 min)  none (nothing changed)
render alone, Bokeh loaded  1.09 median             0.87 median
whole run                   5.05 median             4.01 median
==========================  ======================  ===========================

The page at ``fit_end`` includes importing Bokeh (0.6-1 s here, once per
process): the first page of a process costs that much more than the render
alone. Before, the profiler's merged trace (written at close, never summed)
made every profiled run render twice. A failed run writes the page at
``exception`` and usually once more at close (FileLogger's ``[exception]``
line lands in its text log after RunReport's hook).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus._check import check_int, type_as_value_error
from obsbus._failures import plugin_name
from obsbus.errors import MissingExtraError, ObsbusWarning
from obsbus.logger import Logger, LoggerDestination
from obsbus.masking import mask_secrets
from obsbus.naming import check_placeholders
from obsbus.state import State

__all__ = ["RunReport"]

#: The longest RunReport waits for a FileLogger's writer before reading its files.
_FLUSH_WAIT_S = 30.0
_KILLS = ("TrainingTerminated", "KeyboardInterrupt")


class RunReport(LoggerDestination):
    """Writes ``obsbus report``'s page of the run into the run folder, at its end.

    At ``fit_end``, at ``exception`` and at ``close`` (when something
    changed since the last page), rank 0 writes ``filename`` (default
    ``{run_folder}/report.html``; see :mod:`obsbus.report` for what it shows)
    and hands it to ``logger.upload_file`` as ``remote_file_name``, so it
    reaches the trackers and buckets among the destinations as an artifact.

    Before reading, it waits for every :class:`~obsbus.loggers.FileLogger`
    of the run to write what it holds (bounded by the destinations' shared
    deadline), so the page has every metric logged, wherever RunReport sits
    in ``loggers``.

    Every rank writes ``run-status-rank{rank}.json`` next to the page:
    ``running`` at ``init``, then ``finished``, ``failed`` (with the
    exception, masked; ``killed`` for SIGTERM's ``TrainingTerminated`` and
    ``KeyboardInterrupt``) or ``closed``, with the times, the timestamp
    (batch, sample, token) and the failures: each destination the logger
    counted as failing, and each upload a store gave up on
    (``failed_uploads``). A status still ``running`` in a folder means the
    process died without an end (the page then says ``killed``). After every
    destination has closed (``post_close``) the status is written once more,
    and the page too if uploads failed meanwhile (not uploaded again: the
    stores are closed by then).

    The page is written on the training thread (at the end only; a long run
    takes a few seconds). A failure to write it is an
    :class:`~obsbus.ObsbusWarning`; training is never stopped by it.

    Args:
        filename: the page, relative to the run folder; placeholders
            ``{run_name}``, ``{rank}``, ... are filled.
        remote_file_name: its uploaded name; ``None``: not uploaded.
        buckets: min/max buckets per line (at most twice as many points).

    Raises:
        MissingExtraError: Bokeh is not installed: ``pip install 'obsbus[report]'``.

    Example:
        >>> import tempfile
        >>> from obsbus import Run
        >>> from obsbus.loggers import FileLogger
        >>> folder = tempfile.mkdtemp()
        >>> with Run(max_duration="2ba", run_folder=folder,
        ...          loggers=[RunReport(), FileLogger()]) as run:
        ...     for batch in run.train([[1], [2]]):
        ...         run.state.loss = 0.5
        >>> import json, pathlib
        >>> json.loads(pathlib.Path(folder, "run-status-rank0.json").read_text())["status"]
        'finished'
        >>> "loss/train/total" in pathlib.Path(folder, "report.html").read_text()
        True
    """

    def __init__(
        self,
        filename: str = "report.html",
        remote_file_name: str | None = "{run_name}/report.html",
        *,
        buckets: int = 2000,
    ) -> None:
        if importlib.util.find_spec("bokeh") is None:
            raise MissingExtraError("report", "RunReport")
        self.filename = check_placeholders(filename, "RunReport filename")  # a non-empty str
        if remote_file_name is not None:
            if not isinstance(remote_file_name, str) or not remote_file_name.strip("/"):
                raise TypeError(
                    f"RunReport remote_file_name must be a non-empty str or None, got "
                    f"{remote_file_name!r}."
                )
            check_placeholders(remote_file_name, "RunReport remote_file_name")
        self.remote_file_name = remote_file_name
        with type_as_value_error():  # a wrong type has always been a ValueError here
            self.buckets = check_int("RunReport", "buckets", buckets, minimum=1)
        self._state: State | None = None
        self._logger: Logger | None = None
        self._status: dict[str, Any] = {}
        self._rendered: tuple[Any, ...] | None = None
        #: The page's path, once written.
        self.path: Path | None = None

    # -------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        self._state, self._logger = state, logger
        self._rendered = None
        self._status = {
            "status": "running",
            "run_name": state.run_name,
            "rank": state.rank,
            "world_size": state.world_size,
            "started": time.time(),
        }
        self._contained("write its status file", self._write_status, state, logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._end(state, logger, "finished", None)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        exc = state.exception
        kind = "killed" if exc is not None and type(exc).__name__ in _KILLS else "failed"
        self._end(state, logger, kind, exc)

    @override
    def close(self, state: State, logger: Logger) -> None:
        if self._state is None:
            return
        if self._status.get("status") == "running":
            self._status["status"] = "closed"
        self._end(state, logger, str(self._status.get("status", "closed")), None, at_close=True)

    @override
    def post_close(self) -> None:
        # Every destination has closed: the uploads still queued at close have ended, so
        # their failures are known now. The page is written again if they add any (it can't
        # be uploaded any more: the stores are closed).
        state, logger = self._state, self._logger
        if state is None or logger is None:
            return
        before = self._status.get("failures")
        self._contained("write its status file", self._write_status, state, logger)
        if state.rank == 0 and self._status.get("failures") != before:
            self._contained("write the report", self._render, state, logger, True, False)

    # ------------------------------------------------------------ helpers
    def _contained(self, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            warnings.warn(
                f"obsbus: RunReport could not {what}: "
                f"{mask_secrets(f'{type(exc).__name__}: {exc}')}. Training goes on.",
                ObsbusWarning,
                stacklevel=3,
            )

    def _end(
        self,
        state: State,
        logger: Logger,
        status: str,
        exc: BaseException | None,
        *,
        at_close: bool = False,
    ) -> None:
        self._status["status"] = status
        if exc is not None:
            self._status["exception"] = mask_secrets(repr(exc))
        self._contained("write its status file", self._write_status, state, logger)
        if state.rank == 0:
            self._contained("write the report", self._render, state, logger, at_close)

    def _folder(self, state: State) -> Path:
        return Path(state.run_folder.root)

    def _write_status(self, state: State, logger: Logger) -> None:
        ts = state.timestamp
        self._status.update(
            ended=time.time(),
            timestamp={
                "epoch": ts._epoch,
                "batch": ts._batch,
                "sample": ts._sample,
                "token": ts._token,
            },
            failures=failures_of(logger),
        )
        path = self._folder(state) / f"run-status-rank{state.rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self._status, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def _signature(self, root: Path, own: str) -> tuple[Any, ...]:
        """What this page shows, to tell whether the last one is still up to date."""
        failures = tuple(self._status.get("failures") or ())
        return self._status.get("status"), failures, _inputs(root, own)

    def _render(self, state: State, logger: Logger, at_close: bool, upload: bool = True) -> None:
        from obsbus.report import write_report

        flush_file_loggers(logger)
        root = self._folder(state)
        own = f"run-status-rank{state.rank}.json"
        inputs = self._signature(root, own)
        if at_close and self._rendered == inputs:
            return  # nothing new since the page written at fit_end or exception
        path = state.run_folder.resolve(logger.format_name(self.filename))
        self.path = write_report(root, path, buckets=self.buckets)
        self._rendered = self._signature(root, own)
        if upload and self.remote_file_name is not None:
            logger.upload_file(self.remote_file_name, self.path, overwrite=True)


def failures_of(logger: Logger) -> list[str]:
    """What failed so far: the destinations the logger counted (one line each) and every
    upload a store gave up on (``failed_uploads``), masked."""
    lines = list(logger.failures.summary())
    for dest in logger.destinations:
        try:
            failed = getattr(dest, "failed_uploads", None)
        except Exception:  # a property of someone else's destination
            continue
        if isinstance(failed, list):
            lines.extend(f"{plugin_name(dest)}: upload failed: {item}" for item in failed)
    return [mask_secrets(str(line)) for line in lines]


def flush_file_loggers(logger: Logger) -> None:
    """Have every open FileLogger of ``logger`` write and flush what it holds, and wait for it.

    The engine runs destinations in their order, so at ``fit_end`` a
    FileLogger after RunReport has not flushed yet.
    """
    from obsbus.loggers.file_logger import FileLogger

    for dest in logger.destinations:
        if isinstance(dest, FileLogger) and dest._text is not None:
            dest._flush(fsync=False, upload=False)
            dest._writer.flush(timeout=logger.deadline.left(_FLUSH_WAIT_S))


def _inputs(root: Path, own: str) -> tuple[Any, ...]:
    """The files the page is made of (:func:`obsbus.report._read.input_files`), by name, size
    and time: unchanged means the same page. ``own``, this rank's status file, is left out: it
    is rewritten at every end (its status and failures count instead)."""
    from obsbus.report._read import input_files

    found = []
    for path in input_files(root):
        if path.name == own and path.parent == root:
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        found.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(found)
