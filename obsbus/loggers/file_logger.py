"""Keep a run's metrics on disk: a text log and a JSON Lines file, written in the background."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO, cast

from typing_extensions import override

from obsbus._check import check_bool, check_int, is_int
from obsbus._held import MAX_HELD_ROWS, Backpressure, Handed, RowHolder
from obsbus.interval import LogInterval
from obsbus.logger import Logger, LoggerDestination
from obsbus.loggers._column_names import ColumnNames
from obsbus.loggers._image_files import write_images
from obsbus.loggers._json_lines import COLUMNS, drop_torn_tail, encode_table, json_line
from obsbus.loggers._remote_folder import (
    RemoteFiles,
    check_remote_name,
    check_remote_uri,
    is_uri,
    join,
)
from obsbus.loggers._stream_tee import tee_into, untee
from obsbus.loggers._tracker_media import hold_images, hold_table, table_rows
from obsbus.loggers.console_logger import format_value
from obsbus.loggers.remote_uploader_downloader import RemoteUploaderDownloader
from obsbus.masking import mask_secrets
from obsbus.naming import check_placeholders, epoch_number
from obsbus.state import State
from obsbus.time import TimeLike, TimeUnit
from obsbus.writer import BackgroundWriter, WritePeriod

__all__ = ["FileLogger"]


class FileLogger(LoggerDestination):
    """Writes metrics, hyperparameters, traces and captured output to files, in the background.

    Two files per rank, under the run folder unless a name is absolute:

    - ``filename``: a text log a person reads, e.g.
      ``[metric][batch=12]: loss/train/total: 0.4012``; tables as
      ``[table][batch=12]: name: {"columns":[...],"data":[[...]]}`` (the
      JSON of Composer's ``[table]`` lines).
    - ``jsonl_filename``: JSON Lines a program reads, one object per logged
      call with ``step``, ``epoch``, ``batch``, ``wall_time`` (Unix seconds)
      and the metrics by name. ``epoch`` is numbered as the console's
      ``[epoch=E]`` (:func:`obsbus.naming.epoch_number`: the epoch in
      progress, from 1). Load it with pandas in one line:
      ``pd.read_json(path, lines=True)``.

    **Values in the JSON Lines.** Each line is strict JSON (RFC 8259: ``jq``,
    JavaScript's ``JSON.parse`` and ``json.loads`` with a raising
    ``parse_constant`` read it). Numbers (numpy ones too) are JSON numbers,
    bools are ``true``/``false``, multi-element tensors and arrays are
    (nested) lists. NaN, inf and -inf are written as the strings ``"NaN"``,
    ``"Infinity"`` and ``"-Infinity"`` (the protobuf JSON mapping's choice):
    the three stay apart, ``float(value)`` gives each back in any language,
    and ``obsbus report`` and ``pd.read_json(path, lines=True)`` read them
    back as float64 numbers. Integers beyond int64 (``2**70``) are written as floats,
    since pandas refuses the whole file otherwise ("Value is too big");
    beyond the float range, as their digits in a string. A metric named like
    a column (``step``, ``epoch``, ``batch``, ``wall_time``: Hugging Face
    loops log ``epoch``) is written as ``metric:<name>``, warned once; the
    column keeps the run's own count. A value that can't be written at all
    is left out of its row, counted by key and listed at close (the other
    values of the row are written).

    Metrics stay tensors until due: at the first ``log_interval`` at least
    ``write_period`` seconds after the last hand-over (and at every flush),
    the values held are moved to the host together (one transfer) and handed
    to a :class:`~obsbus.BackgroundWriter`, which formats and writes them.
    Every value logged is written, at its own step; the interval and period
    only set how often that happens.
    Every ``flush_interval`` batches, and at ``fit_end``, ``eval_end``,
    ``exception`` and ``close``, the files are flushed and fsynced, then
    handed to ``logger.upload_file`` (as ``{run_name}/<file name>``, or the
    text log as ``remote_file_name``) when a destination can store files.

    Args:
        filename: the text log; placeholders ``{run_name}``, ``{rank}``, ... are
            filled at ``init``. Relative names resolve against the run folder.
        jsonl_filename: the JSON Lines file, or ``None`` for none.
        log_interval: how often held values are written (``"1ba"``, ``"1ep"``;
            a bare int is batches).
        write_period: seconds; held values go to the writer at most this often
            (besides flushes). Each hand-over wakes the writer thread, whose
            formatting then takes GIL time from the step; ``0``: at every
            ``log_interval``.
        flush_interval: batches between flushes to disk (and uploads).
        log_traces: also write traces.
        capture_stdout: copy what the process prints to stdout into the log
            (off by default; Composer's default is on: it replaces the
            process's stream, which a library should not do unasked).
        capture_stderr: the same for stderr.
        overwrite: replace existing files. Without it, an existing file is an
            error at ``init`` unless ``resume`` is set.
        resume: append to existing files, e.g. when a run restarts from a
            checkpoint (the steps continue from the restored timestamp).
        remote_folder: a bucket URI, e.g. ``"s3://bucket/{run_name}/logs"``: the
            files go there as ``<path>/<file name>``, through the uploader in
            ``loggers`` that stores the bucket, else one the FileLogger makes
            (and closes after its last flush).
        remote_file_name: Composer's argument: the text log's uploaded name, a
            template with the placeholders of ``filename`` (leading ``/``
            dropped), e.g. ``"{run_name}/rank{rank}.log"``; a bucket URI
            works too. With ``remote_folder`` a plain name is taken inside
            it. ``None``: ``{run_name}/<file name>`` (what Composer's default,
            the ``filename`` template ``{run_name}/logs-rank{rank}.txt``,
            gives). The JSON Lines file keeps its own name.
        buffer_size: Composer's argument: the files' buffer, as ``open``'s
            ``buffering`` (``1``: line buffering, ``-1``: the default size,
            ``> 1``: that many bytes). obsbus flushes each write to the OS
            anyway, so no line waits in Python's buffer whatever the size;
            the default is therefore ``-1`` (Composer's is ``1``).

    Example:
        >>> import json, tempfile
        >>> from obsbus import Run
        >>> folder = tempfile.mkdtemp()
        >>> with Run(max_duration="2ba", run_folder=folder, loggers=[FileLogger()]) as run:
        ...     for batch in run.train([[1, 2], [3, 4]]):
        ...         run.state.loss = 0.5
        >>> rows = [json.loads(l) for l in open(f"{folder}/metrics-rank0.jsonl")]
        >>> [(r["step"], r["loss/train/total"]) for r in rows]
        [(1, 0.5), (2, 0.5)]
    """

    def __init__(
        self,
        filename: str = "logs-rank{rank}.txt",
        jsonl_filename: str | None = "metrics-rank{rank}.jsonl",
        *,
        log_interval: TimeLike = "1ba",
        write_period: float = 1.0,
        flush_interval: int = 100,
        log_traces: bool = True,
        capture_stdout: bool = False,
        capture_stderr: bool = False,
        overwrite: bool = False,
        resume: bool = False,
        remote_folder: str | None = None,
        remote_file_name: str | None = None,
        buffer_size: int = -1,
    ) -> None:
        self.filename = check_placeholders(filename, "FileLogger filename")
        self.jsonl_filename = (
            None
            if jsonl_filename is None
            else check_placeholders(jsonl_filename, "FileLogger jsonl_filename")
        )
        interval = LogInterval(log_interval, "FileLogger log_interval", TimeUnit.BATCH)
        check_int("FileLogger", "flush_interval", flush_interval, minimum=1)
        for flag, value in (("log_traces", log_traces), ("capture_stdout", capture_stdout),
                            ("capture_stderr", capture_stderr), ("overwrite", overwrite),
                            ("resume", resume)):  # fmt: skip
            check_bool("FileLogger", flag, value)  # overwrite='false' would mean True
        if overwrite and resume:
            raise ValueError("FileLogger: overwrite=True and resume=True contradict; choose one.")
        if remote_file_name is not None:
            if not isinstance(remote_file_name, str) or not remote_file_name.strip("/"):
                raise TypeError(
                    "FileLogger remote_file_name must be a non-empty str (a file name template "
                    f"or bucket URI) or None, got {remote_file_name!r}."
                )
            check_remote_name(remote_file_name, "FileLogger remote_file_name")
            check_placeholders(remote_file_name, "FileLogger remote_file_name")
        if not is_int(buffer_size):
            raise TypeError(_buffer_message(buffer_size))
        if buffer_size == 0 or buffer_size < -1:  # open() refuses unbuffered text I/O
            raise ValueError(_buffer_message(buffer_size))
        for name in (self.filename, self.jsonl_filename):
            if name is not None and "{" not in name and Path(name).is_absolute():
                _check_not_a_directory(Path(name))
        self.log_interval = interval
        self._period = WritePeriod("FileLogger", write_period)
        self.flush_interval = flush_interval
        self.log_traces_enabled = log_traces
        self.capture_stdout = capture_stdout
        self.capture_stderr = capture_stderr
        self.overwrite = overwrite
        self.resume = resume
        self.remote_folder = remote_folder
        if remote_folder is not None:
            check_remote_uri(remote_folder, "FileLogger remote_folder")
        self.remote_file_name = remote_file_name
        self.buffer_size = buffer_size
        self._remote = RemoteFiles("FileLogger", [self.remote_folder, self.remote_file_name])
        self._writer = BackgroundWriter("FileLogger")
        self._state: State | None = None
        self._logger: Logger | None = None
        # (step, epoch, batch, wall time, metrics) per log_metrics call, from any thread
        self._held = RowHolder()
        self._columns = ColumnNames("its JSON Lines rows")  # metrics named like one
        self._pressure = Backpressure()
        self._text: TextIO | None = None
        self._jsonl: TextIO | None = None
        self._paths: list[Path] = []
        self._made: list[Path] = []  # files and folders the last claim created
        self._tees: list[tuple[str, TextIO]] = []
        self._uploaded_once = False

    @property
    def name(self) -> str:
        """The name messages use (``FileLogger#2`` for a second one in ``loggers``)."""
        return self._writer.name

    @name.setter
    def name(self, value: str) -> None:
        self._writer.name = value

    @property
    def paths(self) -> list[Path]:
        """The files this logger writes (known after ``init``)."""
        return list(self._paths)

    @property
    def write_period(self) -> float:
        """Seconds between hand-overs of held values to the writer (besides flushes)."""
        return self._period.seconds

    @property
    def remote_uploaders(self) -> list[RemoteUploaderDownloader]:
        """The uploader made for ``remote_folder`` at ``init`` (none if ``loggers`` had one)."""
        return self._remote.uploaders

    # ----------------------------------------------------------- lifecycle
    @override
    def init(self, state: State, logger: Logger) -> None:
        self._writer.report_to(logger.failures)
        self._remote.init(state, logger)
        self.claim_files(state, logger)  # a no-op when the run claimed them before init
        self._install_capture()

    def claim_files(self, state: State, logger: Logger) -> None:
        """Create (or, with ``resume``/``overwrite``, open) this rank's files, or refuse.

        A run calls it before it writes anything, so a run refused for its
        name leaves the other run's folder as it was; ``init`` calls it too.

        Raises:
            FileExistsError: a file is there and neither ``resume`` nor
                ``overwrite`` is set (another run has the name).
        """
        self._state, self._logger = state, logger
        names = [self.filename] + ([self.jsonl_filename] if self.jsonl_filename else [])
        paths = [state.run_folder.resolve(logger.format_name(n)) for n in names]
        for path in paths:
            _check_not_a_directory(path)
            if path.exists() and not (self.overwrite or self.resume) and path not in self._paths:
                # Name the first file taken now: a run started at the same instant creates them
                # in order, so the error is the one a run started later gets.
                raise _exists(next((p for p in paths if p.exists()), path))
        if paths == self._paths:
            return  # the same files, still open
        self._close_files()
        # "x" creates the file or fails: a second run started at the same instant in the same
        # folder gets the error above instead of both passing the check and one overwriting
        # the other's metrics.
        mode = "a" if self.resume else "w" if self.overwrite else "x"
        made = [p for path in paths for p in (*reversed(path.parents), path) if not p.exists()]
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.resume:
                drop_torn_tail(path)
        opened: list[TextIO] = []
        try:
            for path in paths:
                # buffering only when asked for: _open(path, mode) is the seam tests replace
                buffered = self.buffer_size != -1
                opened.append(
                    _open(path, mode, self.buffer_size) if buffered else _open(path, mode)
                )
        except FileExistsError:
            for f in opened:  # ours, created a moment ago: the other run owns the name
                f.close()
                Path(f.name).unlink(missing_ok=True)
            raise _exists(path) from None
        self._paths, self._made = paths, list(dict.fromkeys(made))
        self._text = opened[0]
        if len(opened) > 1:
            self._jsonl = opened[1]

    def release_files(self) -> None:
        """Close the files and remove those :meth:`claim_files` created (the run did not start)."""
        self._close_files()
        for path in reversed(self._made):
            with contextlib.suppress(OSError):  # a folder someone else wrote into stays
                if path.is_dir():
                    path.rmdir()
                else:
                    path.unlink()
        self._paths, self._made = [], []

    def _install_capture(self) -> None:
        for tag, wanted in (("stdout", self.capture_stdout), ("stderr", self.capture_stderr)):
            if wanted and not any(t == tag for t, _ in self._tees):
                self._tees.append((tag, tee_into(tag, self, self._captured)))

    def _remove_capture(self) -> None:
        for tag, original in reversed(self._tees):
            untee(tag, self, original)
        self._tees = []

    # ------------------------------------------------------------- logging
    def _stamp(self) -> tuple[int, int]:
        # The epoch counted from 1, as the console and trace names number it (epoch_number).
        ts = self._state.timestamp if self._state is not None else None
        return (epoch_number(ts), ts._batch) if ts is not None else (1, 0)

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        epoch, batch = self._stamp()
        row = (batch if step is None else step, epoch, batch, time.time(), dict(metrics))
        if self._held.add(row) >= MAX_HELD_ROWS:  # no batch boundary may come: bound memory
            self._hand_over()

    @override
    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        _, batch = self._stamp()
        lines = [f"[hyperparameter][batch={batch}]: {k}: {v}" for k, v in hyperparameters.items()]
        self._hand_over()  # lines stay in the order they were logged
        self._writer.submit(self._write_text, lines)

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self.log_traces_enabled:
            _, batch = self._stamp()
            lines = [f"[trace][batch={batch}]: {k}: {v}" for k, v in traces.items()]
            self._hand_over()
            self._writer.submit(self._write_text, lines)

    @override
    def log_table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        name: str = "Table",
        step: int | None = None,
    ) -> None:
        # Tensor cells go to the host without a wait here; the writer formats the line.
        held, pending = hold_table(rows)
        at = self._stamp()[1] if step is None else step
        self._hand_over()
        self._writer.submit(self._write_table, list(columns), held, pending, name, at)

    def _write_table(
        self, columns: list[str], rows: list[list[Any]], pending: Any, name: str, step: int
    ) -> None:
        table = encode_table({"columns": columns, "data": table_rows(rows, pending)})
        self._write_text([f"[table][batch={step}]: {name}: {table}"])

    @override
    def log_images(
        self, images: Any, name: str = "Images", step: int | None = None, **kwargs: Any
    ) -> None:
        """Write each image as a PNG under the run folder (on the writer thread), where
        ``obsbus report`` shows them: ``images/rank{rank}/{name}/step-{step}.png``, or
        ``step-{step}-{i}.png`` for several (see :mod:`obsbus.loggers._image_files`).
        ``channels_last`` (keyword) says whether a 3-D image is ``HWC``."""
        state = self._state
        if state is None or self._text is None:
            return  # before init or after close: nowhere to write
        at = self._stamp()[1] if step is None else step
        # Snapshotted here (detached copies, no sync): the caller may change them next.
        self._writer.submit(write_images, state.run_folder.root, state.rank, name, at,
                            hold_images(images), kwargs.get("channels_last"))  # fmt: skip

    def _captured(self, tag: str, lines: list[str]) -> None:
        text = [f"[{tag}]: {line}" for line in lines]
        if threading.current_thread().name == f"obsbus-writer-{self._writer.name}":
            self._write_text(text)  # output of the writer itself: no queueing to ourselves
        else:
            self._writer.submit(self._write_text, text)

    def _hand_over(self) -> None:
        """Move everything held to the writer: one transfer for all values due.

        Safe against a signal raised into it: see :mod:`obsbus._held`.
        """
        if self._held:
            self._period.handed_over()
            rows = self._held.hand_over(self._submit_rows)
            writer = self._writer  # a writer that falls behind holds about two caps of rows
            if rows and not self._pressure.handed(
                rows, writer.submit, 0.0 if writer.stalled else _WAIT_S
            ):
                writer.gave_up()

    def _submit_rows(self, handed: Handed) -> None:
        self._writer.submit(self._write_metrics, handed)

    def flush(self, timeout: float | None = 10.0, *, fsync: bool = False) -> bool:
        """Write what is held to both files, flush them, and wait for the writer.

        For code that reads the files while the run goes on (a report, a test, a
        notebook). Nothing is uploaded. Returns ``False`` when the writer did not
        finish within ``timeout`` seconds (``None``: wait as long as it takes), or
        the files are not open (before ``init``, after ``close``).
        """
        if self._text is None:
            return False
        self._hand_over()
        self._writer.submit(self._sync_files, fsync, False)
        return self._writer.flush(timeout=timeout)

    def _flush(self, fsync: bool, upload: bool = True) -> None:
        self._hand_over()
        self._writer.submit(self._sync_files, fsync, upload)

    # ---------------------------------------------------------------- hooks
    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if state.timestamp._batch % self.flush_interval == 0:
            self._flush(fsync=False)
        elif self._held and self.log_interval.at_batch_end(state):
            self._hand_over_if_due()

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self._held and self.log_interval.at_epoch_end(state):
            self._hand_over_if_due()

    def _hand_over_if_due(self) -> None:
        if self._period.due():
            self._hand_over()

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        self._hand_over()

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._flush(fsync=True)
        self._wait_for_writer(logger)
        self._remote.fit_end(state, logger)

    @override
    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        self._flush(fsync=False)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        # An error message may quote a URI with its credentials, or a token.
        line = mask_secrets(f"[exception]: {state.exception!r}")
        self._writer.submit(self._write_text, [line])
        self._flush(fsync=True)
        self._wait_for_writer(logger)
        self._remote.exception(state, logger)

    @override
    def close(self, state: State, logger: Logger) -> None:
        if self._text is None:
            return
        self._remove_capture()
        self._flush(fsync=True)
        self._writer.close(timeout=self._budget(logger))
        self._close_files()
        self._remote.close(state, logger)

    def _budget(self, logger: Logger) -> float:
        """How long to wait for the writer: the shared deadline's share, and nothing while
        a previous wait timed out and the writer has not moved since (a hung disk)."""
        return 0.0 if self._writer.stalled else logger.deadline.left(_WAIT_S)

    def _wait_for_writer(self, logger: Logger) -> None:
        self._writer.flush(timeout=self._budget(logger))  # a timeout marks the writer stalled

    def _close_files(self) -> None:
        for f in (self._text, self._jsonl):
            if f is not None and not f.closed:
                try:
                    f.close()
                except OSError as exc:  # the last flush (a full disk): counted with the writes'
                    self._writer.failures.report(self.name, "close", exc)
        self._text = self._jsonl = None

    # -------------------------------------------- the writer thread's side
    # Each write is flushed to the OS (not fsynced): a kill -9 then loses only what was still
    # held, never rows already handed over and left in Python's buffer until a flush_interval.
    def _write_text(self, lines: list[str]) -> None:
        if self._text is not None and not self._text.closed:
            self._text.write("".join(line + "\n" for line in lines))
            self._text.flush()

    def _write_metrics(self, handed: Handed) -> None:
        text: list[str] = []
        rows: list[str] = []
        for (step, epoch, batch, wall, _), values in handed.claim():
            values = self._own_keys(values)
            text.extend(
                f"[metric][batch={step}]: {k}: {format_value(v)}" for k, v in values.items()
            )
            row = {"step": step, "epoch": epoch, "batch": batch, "wall_time": round(wall, 6)}
            row.update(values)
            rows.append(json_line(row, self._skip))
        self._write_text(text)
        if self._jsonl is not None and not self._jsonl.closed:
            self._jsonl.write("".join(r + "\n" for r in rows))
            self._jsonl.flush()

    def _own_keys(self, values: dict[Any, Any]) -> dict[str, Any]:
        """``values`` with every key a str (others skipped, counted) and none a column's name.

        A metric named ``step``, ``epoch``, ``batch`` or ``wall_time`` (Hugging Face
        loops log ``epoch``) is written as ``metric:<name>``, warned once: the
        column keeps the run's own count, and the metric is kept beside it.
        """
        if COLUMNS.isdisjoint(values) and all(type(k) is str for k in values):
            return values
        own: dict[str, Any] = {}
        for key, value in values.items():
            if not isinstance(key, str):
                self._skip(key, f"its key is a {type(key).__name__}, not a str")
                continue
            if key in COLUMNS:
                key = self._columns(self.name, key)
            own[key] = value
        return own

    def _skip(self, key: object, reason: str) -> None:
        self._writer.failures.skipped(self.name, key, reason)

    def _sync_files(self, fsync: bool, upload: bool) -> None:
        for f in (self._text, self._jsonl):
            if f is not None and not f.closed:
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
        logger, state = self._logger, self._state
        if upload and logger is not None and state is not None:
            folder = self.remote_folder or state.run_name
            for i, path in enumerate(self._paths):
                self._remote.upload(
                    logger, self._remote_name(i, folder, path), path, overwrite=True
                )

    def _remote_name(self, index: int, folder: str, path: Path) -> str:
        """The uploaded name of file ``index`` (0: the text log): ``remote_file_name`` or
        ``<folder>/<file name>``."""
        name = self.remote_file_name
        if index or name is None:
            return join(folder, path.name)
        if is_uri(name):
            return name
        name = name.lstrip("/")
        return join(self.remote_folder, name) if self.remote_folder else name


#: The longest the end of a run waits for the writer (less when the destinations' shared
#: deadline leaves less: :class:`obsbus._deadline.SharedDeadline`).
_WAIT_S = 60.0


def _buffer_message(value: object) -> str:
    return (
        "FileLogger buffer_size must be -1 (the default buffer), 1 (line buffering) or a "
        f"buffer size in bytes > 1, as open()'s buffering; got {value!r}."
    )


def _exists(path: Path) -> FileExistsError:
    return FileExistsError(
        f"FileLogger: {str(path)!r} already exists. To fix, pass resume=True to "
        "append to it (restarting a run), overwrite=True to replace it, or use "
        "another run name."
    )


def _open(path: Path, mode: str, buffering: int = -1) -> TextIO:
    return cast(TextIO, open(path, mode, buffering, encoding="utf-8"))  # closed in close()


def _check_not_a_directory(path: Path) -> None:
    if path.is_dir():
        raise IsADirectoryError(
            f"FileLogger: {str(path)!r} is a directory, and a file should be written there. "
            "To fix, give a file name, e.g. 'logs-rank{rank}.txt'."
        )
