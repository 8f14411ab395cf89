"""The uploader's work queue: latest wins per name, retries with backoff, nothing dropped."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from obsbus._check import check_seconds
from obsbus.object_store import ObjectStore

__all__ = ["FailedUpload", "UploadJob", "UploadQueue"]

log = logging.getLogger("obsbus")
_IDLE_SLICES = 10  # an idle worker lingers 10 x 0.1 s for more work, then exits


@dataclass(eq=False)
class UploadJob:
    """One staged file waiting for (or in) its upload."""

    name: str
    source: Path
    staged: Path
    size: int
    overwrite: bool
    seq: int
    attempts: int = 0
    abandoned: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class FailedUpload:
    """A file that did not reach the store; its staged copy is kept for a manual upload.

    Attributes:
        remote_file_name: the object's name in the bucket (after formatting).
        uri: the object's full URI (credentials masked).
        source: the file that was handed to ``upload_file``.
        staged_path: the copy that is kept; upload it by hand from here.
        reason: the store's message (masked), or why the upload was given up.
        attempts: how many attempts ran.
    """

    remote_file_name: str
    uri: str
    source: Path
    staged_path: Path
    reason: str
    attempts: int

    def __str__(self) -> str:
        return (
            f"{self.uri} (from {self.source}): {self.reason}; staged copy kept at "
            f"{self.staged_path}"
        )


class UploadQueue:
    """Worker threads that upload staged files to ``store``.

    Per remote name only the newest staged file waits (a newer one replaces
    it, and its staged copy is deleted); two uploads of one name never run at
    once, so the last one handed in is the one the bucket keeps. Transient
    errors are retried up to ``attempts`` times with exponential backoff and
    jitter; permanent ones fail at once. Failures are logged as they happen
    and collected in :attr:`failures`.

    Workers start on demand (at most ``workers``) and exit when idle. They are
    not daemon threads: if the program ends without closing the uploader,
    what was queued is still uploaded before the interpreter exits, for at
    most ``shutdown_timeout`` seconds, and what is left then is reported.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        name: str,
        workers: int,
        attempts: int,
        initial_backoff: float,
        max_backoff: float,
        max_pending: int,
        shutdown_timeout: float,
    ) -> None:
        self.store = store
        self.name = name
        self.workers = workers
        self.attempts = attempts
        # Checked here as well as by the uploader: min(), sleeps and deadlines on nan or inf
        # would retry without waiting or wait forever.
        self.initial_backoff = check_seconds(name, "initial_backoff", initial_backoff)
        self.max_backoff = check_seconds(name, "max_backoff", max_backoff)
        self.max_pending = max_pending
        self.shutdown_timeout = check_seconds(name, "shutdown_timeout", shutdown_timeout)
        self.failures: list[FailedUpload] = []
        self.uploaded = 0
        self.uploaded_bytes = 0
        self.superseded = 0
        self.retries = 0
        self.blocked_puts = 0
        self._cond = threading.Condition()
        self._pending: dict[str, UploadJob] = {}
        self._running: dict[str, UploadJob] = {}
        self._latest: dict[str, int] = {}
        self._alive = 0
        self._threads: list[threading.Thread] = []
        self._quiet = False  # idle workers exit at once (the uploader closed)
        self._shutdown_deadline: float | None = None

    # ------------------------------------------------------- caller's side
    def backlog(self) -> tuple[int, int]:
        """Files and bytes waiting or uploading."""
        with self._cond:
            jobs = [*self._pending.values(), *self._running.values()]
        return len(jobs), sum(j.size for j in jobs)

    def busy(self, name: str) -> bool:
        """Whether an upload of ``name`` waits or runs."""
        with self._cond:
            return name in self._pending or name in self._running

    def put(self, job: UploadJob) -> None:
        """Queue ``job``, replacing a waiting job of the same name (its staged copy goes)."""
        with self._cond:
            while len(self._pending) >= self.max_pending and job.name not in self._pending:
                self.blocked_puts += 1
                if self.blocked_puts == 1:
                    log.warning(
                        "obsbus: %s has %d uploads waiting; the caller waits for room. "
                        "Uploads are slower than the files arrive: raise "
                        "num_concurrent_uploads or upload less often.",
                        self.name,
                        self.max_pending,
                    )
                self._spawn_locked()
                self._cond.wait(0.5)
            old = self._pending.pop(job.name, None)
            self._pending[job.name] = job
            self._latest[job.name] = job.seq
            if old is not None:
                self.superseded += 1
            self._spawn_locked()
            self._cond.notify()
        if old is not None:
            old.staged.unlink(missing_ok=True)

    def wait(self, timeout: float | None, progress: Callable[[int], None] | None = None) -> bool:
        """Wait until nothing waits or runs; ``False`` on timeout. ``progress(bytes_done)``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        start = self.uploaded_bytes
        with self._cond:
            while self._pending or self._running:
                if self._pending:
                    self._spawn_locked()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.1 if remaining is None else min(remaining, 0.1))
                if progress is not None:
                    progress(self.uploaded_bytes - start)
        return True

    def abandon(self, reason: str) -> list[UploadJob]:
        """Give up what waits (each becomes a failure) and what runs after its attempt.

        Returns the jobs still running, which finish or fail in the background.
        """
        with self._cond:
            waiting = list(self._pending.values())
            self._pending.clear()
            running = list(self._running.values())
            for job in running:
                job.abandoned = reason
            self._cond.notify_all()
        for job in waiting:
            self._fail(job, reason)
        return running

    def stop_idle_workers(self, timeout: float = 1.0) -> None:
        """Workers with nothing to do exit now, not after lingering (the uploader closed:
        a closed run leaves no thread behind); new work starts new ones."""
        with self._cond:
            self._quiet = True
            self._cond.notify_all()
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            self._quiet = False

    # ------------------------------------------------------- workers' side
    def _spawn_locked(self) -> None:
        if self._alive < self.workers and self._pending:
            self._alive += 1
            thread = threading.Thread(
                target=self._work, name=f"obsbus-upload-{self.name}", daemon=False
            )
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _next_locked(self) -> UploadJob | None:
        for name, job in self._pending.items():
            if name not in self._running:
                del self._pending[name]
                self._running[name] = job
                return job
        return None

    def _work(self) -> None:
        try:
            while True:
                with self._cond:
                    job = self._next_locked()
                    idle = 0
                    while job is None and idle < _IDLE_SLICES:
                        if not self._running and not self._pending:
                            self._cond.notify_all()
                        if not threading.main_thread().is_alive() and not self._pending:
                            return
                        if self._quiet and not self._pending:
                            return
                        self._cond.wait(0.1)
                        idle += 1
                        job = self._next_locked()
                    if job is None:
                        return
                try:
                    self._run(job)
                finally:
                    with self._cond:
                        self._running.pop(job.name, None)
                        if self._latest.get(job.name) == job.seq and job.name not in self._pending:
                            del self._latest[job.name]
                        self._cond.notify_all()
        finally:
            with self._cond:
                self._alive -= 1
                self._cond.notify_all()

    def _give_up_reason(self, job: UploadJob) -> str | None:
        if job.abandoned is not None:
            return job.abandoned
        if not threading.main_thread().is_alive():  # the program ended without close()
            now = time.monotonic()
            if self._shutdown_deadline is None:
                self._shutdown_deadline = now + self.shutdown_timeout
            if now > self._shutdown_deadline:
                return (
                    f"the program ended without closing the uploader, and uploads went on "
                    f"for {self.shutdown_timeout:.0f}s after it"
                )
        return None

    def _run(self, job: UploadJob) -> None:
        store, last = self.store, ""
        for attempt in range(1, self.attempts + 1):
            with self._cond:
                superseded = self._latest.get(job.name, job.seq) != job.seq
            if superseded:  # a newer file of this name arrived while this one retried
                with self._cond:
                    self.superseded += 1
                job.staged.unlink(missing_ok=True)
                return
            reason = self._give_up_reason(job)
            if reason is not None:
                self._fail(job, f"{reason}; last error: {last}" if last else reason)
                return
            job.attempts = attempt
            try:
                store.upload(job.staged, job.name, overwrite=job.overwrite)
            except Exception as exc:
                transient = store.is_transient(exc)
                last = store.describe_error(exc)
                if not transient:
                    self._fail(job, f"{last} (a permanent error: not retried)")
                    return
                store.reset()
                if attempt == self.attempts:
                    self._fail(job, f"{last} (still failing after {attempt} attempts)")
                    return
                delay = min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1))
                delay *= random.uniform(0.5, 1.0)
                with self._cond:
                    self.retries += 1
                log.debug(
                    "obsbus: %s: upload of %s failed (%s); retrying in %.2fs",
                    self.name,
                    store.object_uri(job.name),
                    last,
                    delay,
                )
                with self._cond:
                    self._cond.wait_for(lambda: job.abandoned is not None, timeout=delay)
                continue
            with self._cond:
                self.uploaded += 1
                self.uploaded_bytes += job.size
            job.staged.unlink(missing_ok=True)
            if job.abandoned is not None:
                log.warning(
                    "obsbus: %s: %s arrived after all, after close stopped waiting.",
                    self.name,
                    store.object_uri(job.name),
                )
            return

    def _fail(self, job: UploadJob, reason: str) -> None:
        failure = FailedUpload(
            remote_file_name=job.name,
            uri=self.store.object_uri(job.name),
            source=job.source,
            staged_path=job.staged,
            reason=self.store.mask(reason),
            attempts=job.attempts,
        )
        with self._cond:
            self.failures.append(failure)
        log.error("obsbus: %s: upload failed: %s", self.name, failure)
