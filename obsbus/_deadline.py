"""One deadline that every destination shares while a run ends."""

from __future__ import annotations

import time

__all__ = ["SharedDeadline"]


class SharedDeadline:
    """How long destinations may still wait at ``fit_end``, ``exception`` and ``close``.

    Each destination waits for its own background work with its own
    timeout (a tracker's ``close_timeout``). Waited for one after another,
    two hung trackers would cost twice that. While the engine runs one of
    those steps it starts this deadline once, for all destinations; each
    wait is then at most what is left of it (:meth:`left`), so the whole
    step takes about one timeout however many destinations hang. Their
    background threads keep working in parallel meanwhile, so a healthy
    destination seldom needs what the hung one used up.

    Example:
        >>> deadline = SharedDeadline()
        >>> deadline.left(5.0)  # no run is ending: a destination's own timeout
        5.0
        >>> deadline.begin(0.0)
        >>> deadline.left(5.0)
        0.0
        >>> deadline.end()
    """

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at: float | None = None

    @property
    def active(self) -> bool:
        """Whether a run is ending (the engine is in ``fit_end``, ``exception`` or ``close``)."""
        return self._at is not None

    def begin(self, seconds: float) -> None:
        """Start the deadline ``seconds`` from now (kept if one is running: steps don't nest)."""
        if self._at is None:
            self._at = time.monotonic() + seconds

    def end(self) -> None:
        self._at = None

    def left(self, timeout: float) -> float:
        """Seconds a destination may wait now: ``timeout``, cut to what the deadline leaves."""
        at = self._at
        if at is None:
            return timeout
        return min(timeout, max(at - time.monotonic(), 0.0))
