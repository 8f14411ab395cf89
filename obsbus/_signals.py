"""SIGTERM as an exception while a run is active, so destinations flush first."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from obsbus.errors import TrainingTerminated

log = logging.getLogger("obsbus")


@contextmanager
def sigterm_as_exception() -> Iterator[None]:
    """While active, SIGTERM raises :class:`TrainingTerminated` in the main thread.

    The previous handler is restored on exit. Outside the main thread (where
    Python can't install handlers) this does nothing. A second SIGTERM that
    arrives while the first is being handled is logged and ignored, so the
    flush it triggered can finish.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        if fired:
            log.warning("obsbus: signal %d again while flushing; still flushing", signum)
            return
        fired = True
        log.warning("obsbus: received signal %d; flushing every destination, then exiting", signum)
        raise TrainingTerminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
