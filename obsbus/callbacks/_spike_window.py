"""A robust loss-spike test on host floats: median and MAD over a window, with patience.

Pure Python, no torch and no run: :class:`LossSpikeDetector` feeds it the losses
NaNMonitor has already read.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median

__all__ = ["MAD_TO_SIGMA", "Spike", "SpikeWindow"]

#: 1.4826 x MAD estimates the standard deviation of normally distributed values.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True, slots=True)
class Spike:
    """A loss that jumped above the window's baseline and stayed up for ``patience`` batches."""

    batch: int  # the first batch of the jump
    loss: float  # its loss
    baseline: float  # the window's median when it jumped
    score: float  # (loss - baseline) / robust sigma at that batch
    confirmed_at: int  # the batch that completed the patience


class SpikeWindow:
    """The state of the test: the last ``window`` normal losses, and a jump under watch.

    A loss counts as *high* when it exceeds the median of the window by more
    than ``threshold`` robust standard deviations (``1.4826 x MAD``, floored
    at ``rel_floor x |median|`` so a flat loss has a scale). ``patience``
    high losses in a row are a spike, reported once, at the batch the run of
    high losses began. High losses never enter the window, so a spike can't
    raise its own baseline; after a spike the window starts over from the
    losses that follow (the loss may have settled higher), and nothing is
    tested until it holds ``min_history`` values. Non-finite losses are
    skipped (NaNMonitor reports them).

    Example:
        >>> w = SpikeWindow(window=20, threshold=6.0, patience=3, min_history=10)
        >>> losses = [1.0 + 0.01 * (i % 5) for i in range(30)] + [5.0, 5.1, 5.0, 5.2]
        >>> [s.batch for s in w.add(range(1, 35), losses)]
        [31]
    """

    __slots__ = ("_high", "_values", "min_history", "patience", "rel_floor", "threshold")

    def __init__(
        self,
        window: int,
        threshold: float,
        patience: int,
        min_history: int,
        rel_floor: float = 1e-3,
    ) -> None:
        self.threshold = threshold
        self.patience = patience
        self.min_history = min_history
        self.rel_floor = rel_floor
        self._values: deque[float] = deque(maxlen=window)
        self._high: list[tuple[int, float, float, float]] = []  # (batch, loss, baseline, score)

    def reset(self) -> None:
        self._values.clear()
        self._high.clear()

    def _score(self, loss: float) -> tuple[float, float]:
        """(baseline, robust z) of ``loss`` against the window."""
        values = self._values
        center = median(values)
        mad = median(abs(v - center) for v in values)
        scale = max(MAD_TO_SIGMA * mad, self.rel_floor * abs(center), 1e-12)
        return center, (loss - center) / scale

    def add(self, batches: Iterable[int], losses: Iterable[float]) -> list[Spike]:
        """Test each ``(batch, loss)`` in order; the spikes confirmed among them."""
        found: list[Spike] = []
        for batch, loss in zip(batches, losses, strict=True):
            if not math.isfinite(loss):
                continue
            if len(self._values) < self.min_history:
                self._values.append(loss)
                continue
            baseline, score = self._score(loss)
            if score > self.threshold:
                self._high.append((batch, loss, baseline, score))
                if len(self._high) >= self.patience:
                    first = self._high[0]
                    found.append(Spike(first[0], first[1], first[2], first[3], batch))
                    self.reset()
                continue
            # back under the threshold: a blip, not a spike; its losses join the window
            for _, high, _, _ in self._high:
                self._values.append(high)
            self._high.clear()
            self._values.append(loss)
        return found
