"""Running averages that skip warm-up and restart at an interval (Primus's log_avg_*)."""

from __future__ import annotations

from typing import Any

from obsbus._check import check_int

__all__ = ["RunningAverage"]


class RunningAverage:
    """The mean of the values added in the current window, warm-up excluded.

    The first ``skip`` values ever added are ignored (Primus's
    ``log_avg_skip_iterations``, default 2: compilation, allocator warm-up
    and first-batch I/O make them unrepresentative). After ``reset_interval``
    values, the next value starts a new window (Primus's
    ``log_avg_reset_interval``, default 10; ``0`` never restarts), so the mean
    follows the run instead of its whole history.

    Values may be tensors: the sum stays on their device, and nothing is
    synced until the caller turns :meth:`mean` into a number at a log step.

    Example:
        >>> avg = RunningAverage(skip=2, reset_interval=3)
        >>> for v in [100.0, 90.0, 1.0, 2.0, 3.0]:
        ...     avg.add(v)
        >>> avg.mean(), avg.count
        (2.0, 3)
        >>> avg.add(10.0); avg.mean()  # a new window
        10.0
    """

    __slots__ = ("_seen", "_sum", "_weight", "count", "reset_interval", "skip")

    def __init__(self, skip: int = 2, reset_interval: int = 10) -> None:
        for name, value in (("skip", skip), ("reset_interval", reset_interval)):
            try:
                check_int("RunningAverage", name, value)
            except TypeError as exc:  # a wrong type has always been a ValueError here
                raise ValueError(str(exc)) from None
        self.skip = skip
        self.reset_interval = reset_interval
        self._seen = 0
        self.count = 0
        self._sum: Any = None
        self._weight = 0.0

    def add(self, value: Any, weight: float = 1.0) -> None:
        """Add ``value`` (a number or a tensor) with ``weight``."""
        self._seen += 1
        if self._seen <= self.skip:
            return
        if self.reset_interval and self.count >= self.reset_interval:
            self.reset()
        term = value * weight if weight != 1.0 else value
        self._sum = term if self._sum is None else self._sum + term
        self._weight += weight
        self.count += 1

    def mean(self) -> Any:
        """The weighted mean of the window, or ``None`` if it is empty (still warming up)."""
        if self._sum is None or not self._weight:
            return None
        return self._sum / self._weight

    def reset(self) -> None:
        """Start a new window (warm-up is not skipped again)."""
        self._sum, self._weight, self.count = None, 0.0, 0
