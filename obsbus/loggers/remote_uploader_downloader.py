"""Upload every file a run produces to an object store, in the background; download for resumes."""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from typing_extensions import override

from obsbus._check import (
    check_bool,
    check_folder,
    check_folder_at_init,
    check_int,
    check_iterable_of,
    check_seconds,
    check_str,
)
from obsbus.errors import ObsbusError
from obsbus.logger import Logger, LoggerDestination
from obsbus.loggers._upload_queue import FailedUpload, UploadJob, UploadQueue
from obsbus.loggers._upload_transfer import (
    check_patterns,
    download,
    wait_with_progress,
)
from obsbus.naming import PLACEHOLDERS, check_placeholders, format_name
from obsbus.object_store import build_object_store, mask_secrets, parse_bucket_uri

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = [
    "FailedUpload",
    "RemoteUploaderDownloader",
    "UploadError",
    "maybe_create_remote_uploader_downloader_from_uri",
    "parse_uri",
]

log = logging.getLogger("obsbus")


class UploadError(ObsbusError):
    """Files did not reach the object store; ``failures`` says which, why, and where the copies are.

    Attributes:
        failures: one :class:`FailedUpload` per file.
    """

    def __init__(self, destination: str, failures: Sequence[FailedUpload]) -> None:
        self.failures = list(failures)
        lines = "".join(f"\n  - {f}" for f in self.failures)
        super().__init__(f"{destination}: {len(self.failures)} upload(s) failed:{lines}")


class RemoteUploaderDownloader(LoggerDestination):
    """Stores every file handed to ``logger.upload_file`` in a bucket without blocking training.

    ``upload_file`` copies the file into a staging folder and returns (the
    caller may change or delete it afterwards); worker threads upload the
    copies. Several uploads of one remote name keep only the newest (latest
    wins). ``overwrite=False`` refuses to replace an existing object. Transient
    errors (connection reset, throttling, 5xx) are retried with exponential
    backoff and jitter, up to ``num_attempts``; permanent ones (no such
    bucket, access denied, object exists) fail at once.

    Nothing is lost: at ``fit_end``, on ``exception`` and at ``close`` (and
    again at ``post_close``, for files other plug-ins hand over while
    closing) the uploader waits for every pending upload, with a progress
    bar for large backlogs, at most ``close_timeout`` seconds; what is still
    pending then is given up. Each file that failed or was given up is
    logged by name with the reason, and listed in :attr:`failed_uploads`;
    its staged copy is kept, and the message says where, so it can be
    uploaded by hand. A failure is also raised once, as
    :class:`UploadError`, at the next ``upload_file``, ``batch_end`` or
    ``fit_end`` (the engine contains it: reported with this destination's
    name, training goes on). Closing twice is a no-op; a closed uploader
    may be used again. If the program ends without closing the uploader,
    the worker threads (not daemons) still upload what was queued, for at
    most ``close_timeout`` seconds, before the interpreter exits.

    Schemes: ``file://`` (a local or mounted folder), ``memory://`` (tests),
    ``s3://`` (AWS; MinIO, R2, Ceph with ``backend_kwargs={"endpoint_url": ...}``),
    ``gs://``, ``az://``/``abfs://`` and ``sftp://``; see
    :mod:`obsbus.object_store` for the libraries and the pip extras
    (``obsbus[s3]``, ``[gcs]``, ``[azure]``, ``[sftp]``). Credentials come from
    the environment or the backend's own configuration chain, never from the
    URI or ``backend_kwargs``; messages never show them.

    Args:
        bucket_uri: where files go, e.g. ``"s3://my-bucket/experiments"``.
        backend_kwargs: options for the store (endpoint, region, retry and
            client settings, ``known_hosts`` for SFTP, ...).
        file_path_format_string: the object name; placeholders
            ``{remote_file_name}``, ``{run_name}``, ``{rank}``, ... (Composer's).
        num_concurrent_uploads: worker threads (default 4; Composer's is 1: a
            slow large checkpoint then holds back every log and trace).
        upload_staging_folder: where staged copies wait (default: a new
            temporary folder, removed at close when nothing failed).
        use_procs: accepted for Composer's code, and changes nothing: obsbus
            always uploads from worker threads, whatever it says. Composer
            (default ``True``) spawns processes so that CPU work on the files
            (checksums) can't hold the GIL against training; obsbus does no
            such work on the training thread: ``upload_file`` only copies
            the file, and the threads spend their time in network I/O and
            the backend's native code, which release the GIL. Threads also
            start at once (no spawn, no pickling of the store), share the
            retry and failure records, and keep uploading what is queued
            when the program ends without closing the uploader.
        num_attempts: attempts per file for transient errors (default 5, with
            backoff; Composer's is 3).
        include: glob patterns of the remote file names (as handed to
            ``upload_file``) this uploader takes; ``None``: all. Route traces
            and checkpoints to different buckets with two uploaders.
        exclude: glob patterns of names it leaves to others.
        initial_backoff: seconds before the first retry; it doubles each time.
        max_backoff: the longest wait between retries.
        max_pending_uploads: distinct files that may wait; beyond, the caller
            waits for room (reported once), so memory stays bounded.
        close_timeout: the most seconds ``fit_end``, ``exception`` and ``close``
            each wait for pending uploads.
        progress_bar: show a progress bar for large backlogs and downloads.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from obsbus import Run
        >>> folder = Path(tempfile.mkdtemp())
        >>> rud = RemoteUploaderDownloader(
        ...     "memory://doc-bucket", file_path_format_string="{run_name}/{remote_file_name}"
        ... )
        >>> _ = (folder / "ckpt.pt").write_bytes(b"weights")
        >>> with Run(max_duration="1ba", run_name="demo", run_folder=folder, loggers=[rud]) as run:
        ...     for batch in run.train([[1]]):
        ...         run.logger.upload_file("ckpt.pt", folder / "ckpt.pt")
        >>> rud.get_uri_for_file("ckpt.pt"), rud.failed_uploads
        ('memory://doc-bucket/demo/ckpt.pt', [])
        >>> rud.download_file("ckpt.pt", str(folder / "restored.pt"))
        >>> (folder / "restored.pt").read_bytes()
        b'weights'
    """

    def __init__(
        self,
        bucket_uri: str,
        backend_kwargs: Mapping[str, Any] | None = None,
        file_path_format_string: str = "{remote_file_name}",
        num_concurrent_uploads: int = 4,
        upload_staging_folder: str | os.PathLike[str] | None = None,
        use_procs: bool = True,
        num_attempts: int = 5,
        *,
        include: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
        initial_backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_pending_uploads: int = 10_000,
        close_timeout: float = 600.0,
        progress_bar: bool = True,
    ) -> None:
        self.store = build_object_store(bucket_uri, backend_kwargs)
        self.bucket_uri = self.store.display
        self.file_path_format_string = check_placeholders(
            file_path_format_string,
            "RemoteUploaderDownloader file_path_format_string",
            (*PLACEHOLDERS, "remote_file_name"),
        )
        cls = "RemoteUploaderDownloader"
        self.num_concurrent_uploads = check_int(
            cls, "num_concurrent_uploads", num_concurrent_uploads, minimum=1
        )
        self.num_attempts = check_int(cls, "num_attempts", num_attempts, minimum=1)
        # nan or inf would make a retry wait forever (or not at all); 0 retries in a busy loop.
        self.initial_backoff = check_seconds(cls, "initial_backoff", initial_backoff)
        self.max_backoff = check_seconds(cls, "max_backoff", max_backoff)
        self.close_timeout = check_seconds(cls, "close_timeout", close_timeout)
        self.include = check_patterns("include", include)
        self.exclude = check_patterns("exclude", exclude)
        self.progress_bar = check_bool(cls, "progress_bar", progress_bar)
        self.use_procs = check_bool(cls, "use_procs", use_procs)  # threads either way (above)
        staging = check_folder(cls, "upload_staging_folder", upload_staging_folder, allow_none=True)
        # Relative to the working directory (not the run folder), so it can be checked now.
        self.upload_staging_folder = (
            None
            if staging is None
            else check_folder_at_init(cls, "upload_staging_folder", staging.absolute())
        )
        self.name = f"RemoteUploaderDownloader({self.bucket_uri})"
        self._queue = UploadQueue(
            self.store,
            name=self.name,
            workers=self.num_concurrent_uploads,
            attempts=self.num_attempts,
            initial_backoff=self.initial_backoff,
            max_backoff=self.max_backoff,
            max_pending=check_int(cls, "max_pending_uploads", max_pending_uploads, minimum=1),
            shutdown_timeout=self.close_timeout,
        )
        self._state: State | None = None
        self._staging: Path | None = None
        self._owns_staging = False
        self._seq = itertools.count()
        self._lock = threading.Lock()  # upload_file may be called from several threads
        self._raised = 0  # failures already raised by check_uploads
        self._reported = 0  # failures already in a close report

    # ----------------------------------------------------------- properties
    @property
    def remote_backend_name(self) -> str:
        """The URI scheme, e.g. ``"s3"`` (Composer's name)."""
        return self.store.uri.scheme

    @property
    def remote_bucket_name(self) -> str:
        """The bucket, container, or SFTP host."""
        return self.store.uri.bucket

    @property
    def failed_uploads(self) -> list[FailedUpload]:
        """Every file that did not reach the store, with the reason and its staged copy."""
        return list(self._queue.failures)

    @property
    def staging_folder(self) -> Path | None:
        """Where staged copies wait (``None`` before the first upload)."""
        return self._staging

    def get_uri_for_file(self, remote_file_name: str) -> str:
        """The full URI ``remote_file_name`` is stored at (credentials masked)."""
        return self.store.object_uri(self._object_name(self._state, remote_file_name))

    # -------------------------------------------------------------- uploads
    @override
    def can_upload_files(self) -> bool:
        return True

    def takes(self, remote_file_name: str) -> bool:
        """Whether ``include``/``exclude`` route ``remote_file_name`` to this uploader."""
        match = fnmatch.fnmatchcase
        if self.include and not any(match(remote_file_name, p) for p in self.include):
            return False
        return not any(match(remote_file_name, p) for p in self.exclude)

    def _object_name(self, state: State | None, remote_file_name: str) -> str:
        name = format_name(self.file_path_format_string, state, remote_file_name=remote_file_name)
        parts = [p for p in name.replace("\\", "/").split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(
                f"Remote file name {name!r} (from {remote_file_name!r}) is not a valid object "
                "name: it must be non-empty, '/'-separated, without '.' or '..' parts."
            )
        return "/".join(parts)

    def _staging_folder(self) -> Path:
        with self._lock:
            if self._staging is None or not self._staging.is_dir():
                if self.upload_staging_folder is None:
                    self._staging = Path(tempfile.mkdtemp(prefix="obsbus-uploads-"))
                    self._owns_staging = True
                else:
                    self.upload_staging_folder.mkdir(parents=True, exist_ok=True)
                    self._staging = self.upload_staging_folder
            return self._staging

    @override
    def upload_file(
        self, state: State, remote_file_name: str, file_path: Path, *, overwrite: bool = False
    ) -> None:
        """Stage a copy of ``file_path`` and queue it; returns as soon as the copy is made."""
        if not self.takes(remote_file_name):
            return
        name = self._object_name(state if state is not None else self._state, remote_file_name)
        source = Path(file_path)
        if not source.is_file():
            raise FileNotFoundError(
                f"{self.name}.upload_file: {str(source)!r} is not a file (remote name "
                f"{remote_file_name!r})."
            )
        seq = next(self._seq)
        staged_name = f"{os.getpid()}-{seq:06d}-{source.name}"
        try:
            staged = self._staging_folder() / staged_name
            shutil.copyfile(source, staged)
        except FileNotFoundError:
            if not source.is_file():
                raise
            staged = self._staging_folder() / staged_name  # a close just removed the folder
            shutil.copyfile(source, staged)
        size = staged.stat().st_size
        self._queue.put(UploadJob(name, source, staged, size, bool(overwrite), seq))
        self.check_uploads()

    def check_uploads(self) -> None:
        """Raise :class:`UploadError` for failures not raised yet (each is raised once)."""
        with self._lock:
            new = self._queue.failures[self._raised :]
            self._raised += len(new)
        if new:
            raise UploadError(self.name, new)

    def wait_for_uploads(self, timeout: float | None = None) -> bool:
        """Wait until every queued upload finished or failed; ``False`` if ``timeout`` ran out."""
        local_rank = self._state.local_rank if self._state is not None else 0
        show_bar = self.progress_bar and local_rank == 0
        return wait_with_progress(self._queue, self.name, timeout, show_bar)

    def _drain(self, logger: Logger | None = None) -> None:
        """Wait (bounded) for the backlog; what is left becomes failures; report new ones.

        The wait is ``close_timeout``, cut to what the destinations' shared
        deadline leaves while the run ends (``logger.deadline``).
        """
        timeout = self.close_timeout if logger is None else logger.deadline.left(self.close_timeout)
        if not self.wait_for_uploads(timeout):
            running = self._queue.abandon(
                f"not uploaded within close_timeout={self.close_timeout:.0f}s (one deadline for "
                "all destinations)"
            )
            for job in running:
                log.error(
                    "obsbus: %s: %s was still uploading when close stopped waiting; it goes "
                    "on in the background, and its staged copy stays at %s until it arrives.",
                    self.name,
                    self.store.object_uri(job.name),
                    job.staged,
                )
        with self._lock:
            new = self._queue.failures[self._reported :]
            self._reported += len(new)
        if new:
            log.error(
                "obsbus: %s: %d file(s) did not reach the store. Their staged copies are "
                "kept; upload them by hand:%s",
                self.name,
                len(new),
                "".join(f"\n  - {f}" for f in new),
            )

    # ---------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        self._state = state

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        self.check_uploads()

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._drain(logger)
        self.check_uploads()

    @override
    def exception(self, state: State, logger: Logger) -> None:
        self._drain(logger)  # what was queued before the crash goes out, or is reported

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._drain(logger)
        with self._lock:  # reported at close: not raised again if the uploader is reused
            self._raised = max(self._raised, self._reported)

    @override
    def post_close(self) -> None:
        self._drain()  # files other plug-ins handed over while closing
        if self._queue.backlog()[0] == 0:
            self.store.close()  # connections reopen on the next use
            self._queue.stop_idle_workers()
        with self._lock:
            staging = self._staging
            if staging is not None and self._owns_staging and self._queue.backlog()[0] == 0:
                with contextlib.suppress(OSError):  # not empty: failed copies stay
                    staging.rmdir()
                    self._staging = None

    # ------------------------------------------------------------ downloads
    @override
    def download_file(
        self,
        remote_file_name: str,
        destination: str,
        overwrite: bool = False,
        progress_bar: bool = True,
    ) -> None:
        """Fetch ``remote_file_name`` (formatted like uploads) into ``destination``.

        Waits first for a pending upload of the same name. The file appears
        whole or not at all. Transient errors are retried like uploads.

        Raises:
            FileExistsError: ``destination`` exists and ``overwrite`` is False.
            FileNotFoundError: no such object.
        """
        name = self._object_name(self._state, remote_file_name)
        dest = Path(destination)
        if dest.exists() and not overwrite:
            raise FileExistsError(
                f"{str(dest)!r} exists. To fix, pass overwrite=True or another destination."
            )
        deadline = time.monotonic() + self.close_timeout
        while self._queue.busy(name) and time.monotonic() < deadline:
            time.sleep(0.02)
        download(
            self.store,
            name,
            dest,
            show_bar=progress_bar and self.progress_bar,
            attempts=self.num_attempts,
            initial_backoff=self.initial_backoff,
            max_backoff=self.max_backoff,
        )

    def __repr__(self) -> str:
        return self.name


def parse_uri(uri: str) -> tuple[str, str, str]:
    """``(backend, bucket, path)`` of a URI (Composer's); ``("", "", uri)`` for a local path.

    Example:
        >>> parse_uri("s3://my-bucket/run/logs.txt")
        ('s3', 'my-bucket', 'run/logs.txt')
        >>> parse_uri("logs/run.txt")
        ('', '', 'logs/run.txt')
    """
    parts = urlsplit(uri)
    if not parts.scheme or "://" not in uri:
        return "", "", uri
    if parts.scheme == "file":
        return "file", "", parts.path.lstrip("/")
    return parts.scheme, parts.netloc, parts.path.lstrip("/")


def maybe_create_remote_uploader_downloader_from_uri(
    uri: str, loggers: Sequence[LoggerDestination]
) -> RemoteUploaderDownloader | None:
    """An uploader for the bucket of ``uri``, unless it is local or ``loggers`` has one already.

    A FileLogger, a trace handler or a checkpointer given ``s3://bucket/path``
    calls this with the destinations it knows, adds the result (if any) to
    them, and hands its files over as ``parse_uri(uri)[2]``.

    Raises:
        ValueError: an unsupported scheme (the message lists the supported ones).

    Example:
        >>> rud = maybe_create_remote_uploader_downloader_from_uri("memory://b1/x.txt", [])
        >>> rud.bucket_uri
        'memory://b1'
        >>> maybe_create_remote_uploader_downloader_from_uri("memory://b1/y.txt", [rud]) is None
        True
        >>> maybe_create_remote_uploader_downloader_from_uri("local/x.txt", []) is None
        True
    """
    check_str("maybe_create_remote_uploader_downloader_from_uri", "uri", uri)
    loggers = check_iterable_of(
        "maybe_create_remote_uploader_downloader_from_uri",
        "loggers",
        loggers,
        LoggerDestination,
        accepted="a list of LoggerDestination",
    )
    backend, _, _ = parse_uri(uri)
    if not backend:
        return None
    bucket_uri = "file:///" if backend == "file" else f"{backend}://{urlsplit(uri).netloc}"
    try:
        wanted = parse_bucket_uri(bucket_uri)
    except ValueError as exc:  # it quotes the bucket URI: name the caller's whole URI too
        raise ValueError(
            f"maybe_create_remote_uploader_downloader_from_uri: uri {mask_secrets(uri)!r}: {exc}"
        ) from None
    for dest in loggers:
        if (
            isinstance(dest, RemoteUploaderDownloader)
            and dest.store.uri.scheme == wanted.scheme
            and dest.store.uri.bucket == wanted.bucket
            and (backend != "file" or dest.store.uri.prefix == "/")
        ):
            log.debug("obsbus: %s already handles %s.", dest.name, dest.store.mask(uri))
            return None
    return RemoteUploaderDownloader(bucket_uri)
