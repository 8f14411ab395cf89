"""One background writer for every destination with slow I/O."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from obsbus._failures import FailureLog

__all__ = ["BackgroundWriter"]

log = logging.getLogger("obsbus")
_STOP = object()


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
        if (
            isinstance(max_queue_size, bool)
            or not isinstance(max_queue_size, int)
            or max_queue_size < 1
        ):
            raise ValueError(f"max_queue_size must be a positive int, got {max_queue_size!r}.")
        self.name = name
        self.max_queue_size = max_queue_size
        self.failures = failures or FailureLog()
        self.blocked_submits = 0
        self._queue: queue.Queue[Any] = queue.Queue(max_queue_size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Each counter is written by one thread only, so no lock is needed.
        self._submitted = 0
        self._done = 0

    @property
    def failure_count(self) -> int:
        """How many writes raised."""
        return self.failures.counts[self.name]

    @property
    def pending(self) -> int:
        """Writes submitted and not yet finished."""
        return self._submitted - self._done

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._queue = queue.Queue(self.max_queue_size)
            self._submitted = self._done = 0
            self._thread = threading.Thread(
                target=self._loop,
                args=(self._queue,),
                name=f"obsbus-writer-{self.name}",
                daemon=True,
            )
            self._thread.start()

    def _loop(self, q: queue.Queue[Any]) -> None:
        while True:
            item = q.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            fn, args = item
            try:
                fn(*args)
            except Exception as exc:
                self.failures.report(self.name, getattr(fn, "__name__", "write"), exc)
            finally:
                self._done += 1

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``; blocks (and reports once) when the queue is full."""
        self._ensure_thread()
        self._submitted += 1
        item = (fn, args)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.blocked_submits += 1
            if self.blocked_submits == 1:
                log.warning(
                    "obsbus: the queue of %s is full (%d writes); the training thread waits "
                    "for it. It is slower than training: log less often or raise max_queue_size.",
                    self.name,
                    self.max_queue_size,
                )
            self._queue.put(item)

    def _put_marker(self, marker: Any, deadline: float | None) -> bool:
        try:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            self._queue.put(marker, timeout=timeout)
            return True
        except queue.Full:
            return False

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write submitted so far has run; ``False`` on timeout."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        done = threading.Event()
        if not self._put_marker(done, deadline):
            return False
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        return done.wait(remaining)

    def close(self, timeout: float | None = 30.0) -> bool:
        """Flush and stop the thread, waiting at most ``timeout`` s; ``False`` if writes were left.

        What could not be written in time is reported by count. Failures are
        summarized. Safe to call twice.
        """
        thread = self._thread
        if thread is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if thread.is_alive() and self._put_marker(_STOP, deadline):
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            thread.join(remaining)
        clean = not thread.is_alive()
        if not clean:
            log.error(
                "obsbus: %s did not finish within %.1fs; %d write(s) were not delivered.",
                self.name,
                timeout,
                self.pending,
            )
        self._thread = None
        for line in self.failures.summary():
            if line.startswith(self.name + " "):
                log.warning("obsbus: %s", line)
        return clean
