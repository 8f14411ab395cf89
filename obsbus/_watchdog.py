"""A watchdog that names a destination call holding up the training thread."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["CallWatchdog"]

log = logging.getLogger("obsbus")


class CallWatchdog:
    """Reports, once per destination, a call on the training thread longer than ``threshold_s``.

    Every destination method the training thread calls (``log_metrics`` and
    the other logging methods, every hook) can block it: a destination that
    writes to a hung file system or a tracker client called inline stalls
    training, and nothing says which one. With the watchdog on, each such
    call records its name and start in one slot (two attribute writes), and
    a background thread looks at the slot every ``threshold_s / 4`` seconds
    (at most every second): a call running longer than ``threshold_s`` is
    logged as an error naming the destination and the method, once per
    destination. It only reports; the call goes on.

    Example:
        >>> dog = CallWatchdog(60.0)
        >>> dog.call("MyLogger", "log_metrics", lambda metrics: "done", {"loss": 1.0})
        'done'
        >>> dog.stop()
        >>> CallWatchdog(0)
        Traceback (most recent call last):
        ValueError: watchdog threshold must be a number of seconds > 0, got 0.
    """

    def __init__(self, threshold_s: float, what: str = "watchdog threshold") -> None:
        if (
            isinstance(threshold_s, bool)
            or not isinstance(threshold_s, (int, float))
            or not threshold_s > 0
            or math.isinf(threshold_s)
        ):
            raise ValueError(f"{what} must be a number of seconds > 0, got {threshold_s!r}.")
        self.threshold_s = float(threshold_s)
        self.reported: list[str] = []  # "Name.method", in the order they were reported
        self._current: tuple[str, str, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def call(self, name: str, action: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, watched as ``name.action`` (the thread starts on first use)."""
        if self._thread is None:
            self._start()
        outer = self._current  # a destination may log from inside its own hook
        self._current = (name, action, time.monotonic())
        try:
            return fn(*args)
        finally:
            self._current = outer

    def _start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="obsbus-watchdog", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        every = min(self.threshold_s / 4, 1.0)
        told: set[str] = set()
        while not self._stop.wait(every):
            current = self._current
            if current is None:
                continue
            name, action, started = current
            running = time.monotonic() - started
            if running > self.threshold_s and name not in told:
                told.add(name)
                self.reported.append(f"{name}.{action}")
                log.error(
                    "obsbus: %s.%s has run for %.1fs on the training thread, which waits "
                    "for it (watchdog threshold %.1fs). To fix, find why this destination "
                    "blocks (a hung file system or server) or remove it from loggers.",
                    name,
                    action,
                    running,
                    self.threshold_s,
                )

    def stop(self) -> None:
        """Stop watching (the engine calls it at close); a later :meth:`call` restarts it."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2.0)
