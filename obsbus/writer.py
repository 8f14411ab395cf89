"""One background writer for every destination with slow I/O."""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from obsbus._check import check_instance, check_int, check_str, is_number, type_as_value_error
from obsbus._failures import FailureLog

__all__ = ["BackgroundWriter", "WritePeriod"]

log = logging.getLogger("obsbus")
_STOP = object()


class WritePeriod:
    """When a destination's held values go to its writer: at most once every ``seconds``.

    A destination that holds values (tensors until due) hands them to its
    writer at the first log interval at least ``seconds`` after the previous
    hand-over. Each hand-over wakes the writer thread, whose Python work then
    takes the GIL from the training thread, so fewer, larger ones cost the
    step less. ``0``: at every interval.

    Example:
        >>> period = WritePeriod("MyLogger", 0)
        >>> period.due()
        True
        >>> WritePeriod("MyLogger", -1)
        Traceback (most recent call last):
        ValueError: MyLogger write_period must be >= 0 seconds and finite, got -1.
    """

    __slots__ = ("_last", "seconds")

    def __init__(self, owner: str, seconds: object) -> None:
        if not is_number(seconds):
            raise TypeError(f"{owner} write_period must be a number of seconds, got {seconds!r}.")
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError(
                f"{owner} write_period must be >= 0 seconds and finite, got {seconds!r}."
            )
        self.seconds = float(seconds)
        self._last = -math.inf

    def due(self) -> bool:
        """Whether ``seconds`` have passed since the last hand-over (always, before the first)."""
        return _now() - self._last >= self.seconds

    def handed_over(self) -> None:
        """Record a hand-over now."""
        self._last = _now()


_now = time.monotonic  # the clock of WritePeriod (a test may replace it)


class BackgroundWriter:
    """A daemon thread that runs a destination's writes off the training thread.

    The training thread calls :meth:`submit` with a function and its
    arguments; the thread runs them in order. The queue is bounded: when it
    is full, :meth:`submit` blocks until there is room (nothing is dropped)
    and the first such wait is reported, since it means the destination is
    slower than training. A write that raises is contained: reported once
    with the writer's name, counted in :attr:`failures`, and the writes after
    it still run.

    :meth:`flush` waits for everything submitted so far; :meth:`close` flushes
    and stops the thread, waiting at most ``timeout`` seconds, so a hung
    backend can't hang the end of training. A closed writer starts a new
    thread on the next :meth:`submit`, so a destination can be reused.

    Example:
        >>> lines = []
        >>> writer = BackgroundWriter("demo")
        >>> writer.submit(lines.append, "step 1")
        >>> writer.flush()
        True
        >>> lines
        ['step 1']
        >>> writer.close()
        True
    """

    def __init__(
        self, name: str, *, max_queue_size: int = 1024, failures: FailureLog | None = None
    ) -> None:
        with type_as_value_error():  # a wrong type has always been a ValueError here
            check_int("BackgroundWriter", "max_queue_size", max_queue_size, minimum=1)
        check_instance("BackgroundWriter", "failures", failures, FailureLog, allow_none=True)
        self.name = check_str("BackgroundWriter", "name", name)  # it names every report
        self.max_queue_size = max_queue_size
        self._owns_failures = failures is None
        self.failures = failures or FailureLog()
        self.blocked_submits = 0
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        # One write at a time, even while an abandoned thread finishes a hung write.
        self._run_lock = threading.Lock()
        # How many writes had finished when a wait for them gave up (see ``stalled``).
        self._gave_up_at: int | None = None

    def report_to(self, failures: FailureLog) -> None:
        """Count this writer's failures in ``failures`` (the run's, which the logger
        summarizes at close and RunReport writes to ``run-status-rank*.json``) from now on."""
        self.failures = check_instance("BackgroundWriter", "failures", failures, FailureLog)
        self._owns_failures = False

    @property
    def failure_count(self) -> int:
        """How many writes raised."""
        return self.failures.counts[self.name]

    @property
    def pending(self) -> int:
        """Writes submitted and not yet finished."""
        worker = self._worker
        return 0 if worker is None else worker.submitted - worker.done

    def _ensure_worker(self) -> _Worker:
        # No ``return`` inside the ``with``: an exception raised into this thread (a signal)
        # at the return line could then leave the lock held, and the exception path that
        # flushes next would wait on it forever.
        with self._lock:
            worker = self._worker
            if worker is None or not worker.thread.is_alive():
                worker = _Worker(self.max_queue_size)
                worker.thread = threading.Thread(
                    target=self._loop,
                    args=(worker,),
                    name=f"obsbus-writer-{self.name}",
                    daemon=True,
                )
                self._worker = worker
                worker.thread.start()
        return worker

    def _loop(self, worker: _Worker) -> None:
        while True:
            item = worker.queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            if worker.abandoned:  # close() gave up on these and said so
                worker.done += 1
                continue
            fn, args = item
            try:
                with self._run_lock:
                    fn(*args)
            except Exception as exc:
                self.failures.report(self.name, getattr(fn, "__name__", "write"), exc)
            finally:
                worker.done += 1

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``; blocks (and reports once) when the queue is full."""
        worker = self._ensure_worker()
        with self._lock:  # any thread may submit: a lost increment would hide a lost write
            worker.submitted += 1
        item = (fn, args)
        try:
            worker.queue.put_nowait(item)
        except queue.Full:
            self.blocked_submits += 1
            if self.blocked_submits == 1:
                log.warning(
                    "obsbus: the queue of %s is full (%d writes); the training thread waits "
                    "for it. It is slower than training: log less often or raise max_queue_size.",
                    self.name,
                    self.max_queue_size,
                )
            worker.queue.put(item)

    def try_submit(self, fn: Callable[..., Any], *args: Any, timeout: float) -> bool:
        """Queue ``fn(*args)``, waiting at most ``timeout`` s for room; ``False`` if none came.

        For destinations whose backend may hang (trackers): they drop and
        count a write rather than let a stuck backend stop training.
        """
        worker = self._ensure_worker()
        with self._lock:
            worker.submitted += 1
        try:
            worker.queue.put((fn, args), timeout=timeout)
        except queue.Full:
            with self._lock:
                worker.submitted -= 1
            return False
        return True

    @staticmethod
    def _put_marker(worker: _Worker, marker: Any, deadline: float | None) -> bool:
        try:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            worker.queue.put(marker, timeout=timeout)
            return True
        except queue.Full:
            return False

    @property
    def stalled(self) -> bool:
        """Whether a wait for this writer timed out and no write has finished since.

        A destination then waits no more (close after a ``fit_end`` flush that
        timed out), so a hung backend costs one timeout, not one per wait.
        """
        worker = self._worker
        return worker is not None and self._gave_up_at == worker.done

    def gave_up(self) -> None:
        """Record that a wait for this writer timed out (:meth:`flush` does it itself)."""
        worker = self._worker
        if worker is not None:
            self._gave_up_at = worker.done

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write submitted so far has run; ``False`` on timeout."""
        worker = self._worker
        if worker is None or not worker.thread.is_alive():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        done = threading.Event()
        if not (
            self._put_marker(worker, done, deadline)
            and done.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        ):
            self.gave_up()
            return False
        return True

    def close(self, timeout: float | None = 30.0, *, report: bool = True) -> bool:
        """Flush and stop the thread, waiting at most ``timeout`` s; ``False`` if writes were left.

        Writes that could not run in time are reported by count and dropped
        (the hung write itself finishes whenever its backend returns, but
        nothing queued after it runs). ``report=False`` leaves that message to
        the caller, whose count of what was lost may differ (a tracker counts
        rows, the writer counts queued calls). Failures are summarized. Safe to
        call twice; the next :meth:`submit` starts a fresh thread.
        """
        worker = self._worker
        if worker is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if worker.thread.is_alive() and self._put_marker(worker, _STOP, deadline):
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            worker.thread.join(remaining)
        clean = not worker.thread.is_alive()
        if not clean:
            worker.abandoned = True
        if not clean and report:
            log.error(
                "obsbus: %s did not finish within %.1fs; %d write(s) were not delivered "
                "(the one running is left to finish; the rest are dropped).",
                self.name,
                timeout,
                worker.submitted - worker.done,
            )
            self.failures.lost(
                self.name, worker.submitted - worker.done, f"it did not finish within {timeout}s"
            )
        with self._lock:
            if self._worker is worker:
                self._worker = None
                self._gave_up_at = None
        if self._owns_failures:
            for line in self.failures.summary():
                log.warning("obsbus: %s", line)
        return clean


class _Worker:
    """One thread's queue and counters; each counter is written by one thread only."""

    __slots__ = ("abandoned", "done", "queue", "submitted", "thread")

    def __init__(self, max_queue_size: int) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(max_queue_size)
        self.thread: threading.Thread
        self.submitted = 0
        self.done = 0
        self.abandoned = False
