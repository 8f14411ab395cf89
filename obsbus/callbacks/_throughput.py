"""A throughput window: the last N batches' seconds, samples, tokens and FLOPs, and their rates.

Pure bookkeeping, as Lightning's ``Throughput`` is to its ``ThroughputMonitor``:
no clock, no run, no torch. The caller times each batch and says what it
held; :class:`~obsbus.callbacks.SpeedMonitor` is that caller, and adds the
cross-rank sums (:mod:`obsbus.callbacks._throughput_ranks`) and the MFU
(:mod:`obsbus.callbacks._mfu`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from obsbus._check import check_int

__all__ = ["ThroughputWindow", "WindowTotals", "rates"]


@dataclass(frozen=True, slots=True)
class WindowTotals:
    """What a full window holds: its batches and their summed seconds, samples, tokens, FLOPs.

    ``flops`` is ``None`` when some batch in the window had no FLOPs count.
    """

    batches: int
    seconds: float
    samples: int
    tokens: int
    flops: float | None


class ThroughputWindow:
    """The last ``size`` batches, as parallel deques so each sum is one C-level call.

    Example:
        >>> window = ThroughputWindow(2)
        >>> window.add(0.5, samples=8, tokens=1024)
        >>> window.totals() is None, window.rates()  # not full yet: no rate
        (True, {})
        >>> window.add(1.5, samples=8, tokens=1024)
        >>> window.rates()
        {'batches': 1.0, 'samples': 8.0, 'tokens': 1024.0}
        >>> window.add(1.0, samples=4, tokens=0, flops=2e12)  # the first batch drops out
        >>> window.totals()
        WindowTotals(batches=2, seconds=2.5, samples=12, tokens=1024, flops=None)
    """

    __slots__ = ("_flops", "_flops_missing", "_samples", "_seconds", "_tokens", "size")

    def __init__(self, size: int) -> None:
        check_int("ThroughputWindow", "size", size, minimum=1)  # batches
        self.size = size
        self._seconds: deque[float] = deque(maxlen=size)
        self._samples: deque[int] = deque(maxlen=size)
        self._tokens: deque[int] = deque(maxlen=size)
        self._flops: deque[float] = deque(maxlen=size)
        self._flops_missing: deque[bool] = deque(maxlen=size)

    def add(
        self, seconds: float, samples: int, tokens: int = 0, flops: float | None = None
    ) -> None:
        """Add one batch: its seconds, samples, tokens and FLOPs (``None``: not counted)."""
        self._seconds.append(seconds)
        self._samples.append(samples)
        self._tokens.append(tokens)
        self._flops.append(flops or 0.0)
        self._flops_missing.append(flops is None)

    def reset(self) -> None:
        """Forget every batch: the window fills again from empty."""
        for window in (self._seconds, self._samples, self._tokens, self._flops):
            window.clear()
        self._flops_missing.clear()

    def __len__(self) -> int:
        return len(self._seconds)

    @property
    def full(self) -> bool:
        """Whether the window holds ``size`` batches: only then is there a rate."""
        return len(self._seconds) == self.size

    def totals(self) -> WindowTotals | None:
        """The window's sums once it is full; ``None`` before."""
        if not self.full:
            return None
        has_flops = not any(self._flops_missing)
        return WindowTotals(
            batches=len(self._seconds),
            seconds=math.fsum(self._seconds),
            samples=sum(self._samples),
            tokens=sum(self._tokens),
            flops=math.fsum(self._flops) if has_flops else None,
        )

    def rates(self) -> dict[str, float]:
        """Per second over the window (see :func:`rates`); ``{}`` until it is full."""
        totals = self.totals()
        return {} if totals is None else rates(totals)


def rates(totals: WindowTotals, summed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per second: ``batches``, ``samples``, ``tokens`` (when any were counted) and ``flops``
    (when every batch had a count); ``{}`` when the window took no time.

    ``summed`` gives the ``samples``, ``tokens``, ``flops`` and ``seconds`` to divide
    instead of the window's own: the sums over ranks and the slowest rank's seconds,
    numbers or device tensors. Which rates there are still follows ``totals``, this
    rank's window, so no tensor is read on the host to decide (and the slowest rank's
    seconds are at least this rank's, so they are > 0 when this rank's are).

    Example:
        >>> rates(WindowTotals(batches=4, seconds=2.0, samples=32, tokens=0, flops=8e12))
        {'batches': 2.0, 'samples': 16.0, 'flops': 4000000000000.0}
    """
    if not totals.seconds > 0:
        return {}
    if summed is None:
        summed = {"samples": totals.samples, "tokens": totals.tokens, "flops": totals.flops}
        summed["seconds"] = totals.seconds
    elapsed = summed["seconds"]
    out = {"batches": totals.batches / elapsed, "samples": summed["samples"] / elapsed}
    if totals.tokens:
        out["tokens"] = summed["tokens"] / elapsed
    if totals.flops is not None:
        out["flops"] = summed["flops"] / elapsed
    return out
