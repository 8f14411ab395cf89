"""One rank's TensorBoard event files: opened at the first write, handed over once complete."""

from __future__ import annotations

import importlib
import itertools
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from obsbus.logger import Logger

__all__ = ["EventFiles"]

# Numbers the files of this process; zero-padded so that names sort in creation order.
_file_numbers = itertools.count()


class EventFiles:
    """Writes events to ``folder`` as TensorBoard records (writer thread only).

    Records are written where they are made, with TensorBoard's own
    ``RecordWriter`` (length, data and their CRCs): the caller is already a
    background thread, so the extra queue and thread of TensorBoard's
    ``EventFileWriter`` would only add hand-offs. Data reaches the disk every
    ``queue_size`` events, every ``flush_secs`` seconds (checked at each
    write) and at :meth:`flush`.

    A file is opened at the first write after the previous one was closed,
    named as TensorBoard names them
    (``events.out.tfevents.{seconds}.{host}.{pid}.{n}``) with ``n`` counting
    this process's files, zero-padded, so names sort in the order the files
    were written, which is the order TensorBoard reads a folder's files in.

    When some destination stores files, :meth:`flush` with ``hand_over``
    closes the current file and passes it to ``logger.upload_file`` as
    ``remote_prefix + <file name>``: a file handed over is complete and never
    written again, so an uploader that reads it later sees the whole file,
    and nothing needs copying. Without such a destination there is one file.
    """

    def __init__(
        self,
        folder: Path,
        queue_size: int,
        logger: Logger | None,
        remote_prefix: str,
        flush_secs: float = 120.0,
    ) -> None:
        self.folder = folder
        self.queue_size = queue_size
        self.flush_secs = flush_secs
        self.logger = logger
        self.remote_prefix = remote_prefix
        self._event_pb2: Any = importlib.import_module("tensorboard.compat.proto.event_pb2")
        record_writer = importlib.import_module("tensorboard.summary.writer.record_writer")
        self._record_writer_cls: Any = record_writer.RecordWriter
        self._file: IO[bytes] | None = None
        self._records: Any = None
        self._path: Path | None = None
        self._unflushed = 0
        self._flushed_at = time.monotonic()
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path | None:
        """The file being written, if one is open."""
        return self._path

    def _open(self) -> None:
        now = time.time()
        name = (
            f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}."
            f"{next(_file_numbers):06d}"
        )
        self._path = self.folder / name
        self._file = open(self._path, "wb")  # noqa: SIM115 (kept open; closed in close())
        self._records = self._record_writer_cls(self._file)
        version = self._event_pb2.Event(wall_time=now, file_version="brain.Event:2")
        self._records.write(version.SerializeToString())

    def write(self, summary: Any, step: int) -> None:
        """Add one event holding ``summary`` at ``step``."""
        if self._records is None:
            self._open()
        event = self._event_pb2.Event(wall_time=time.time(), step=step, summary=summary)
        self._records.write(event.SerializeToString())
        self._unflushed += 1
        if (
            self._unflushed >= self.queue_size
            or time.monotonic() - self._flushed_at >= self.flush_secs
        ):
            self._flush_file()

    def _flush_file(self) -> None:
        if self._file is not None:
            self._file.flush()
        self._unflushed = 0
        self._flushed_at = time.monotonic()

    def _uploading(self) -> bool:
        return self.logger is not None and self.logger.has_file_uploader()

    def flush(self, hand_over: bool) -> None:
        """Write everything to disk; with ``hand_over``, also close and hand over the file."""
        if self._file is None:
            return
        self._flush_file()
        if hand_over and self._uploading():
            self.close()

    def close(self) -> None:
        """Close the current file and hand it over, if anything stores files."""
        file, path = self._file, self._path
        self._file = self._records = self._path = None
        if file is None or path is None:
            return
        file.close()
        if self.logger is not None and self._uploading():
            self.logger.upload_file(self.remote_prefix + path.name, path, overwrite=True)
