"""Flag a training loss that jumps and stays up, from the losses NaNMonitor already reads."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from typing_extensions import override

from obsbus._check import check_int
from obsbus.callback import Callback
from obsbus.callbacks._kept_losses import _READ_ALL_MAX, KeptLosses
from obsbus.callbacks._spike_window import Spike, SpikeWindow
from obsbus.interval import LogInterval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike
from obsbus.values import to_host

__all__ = ["LossSpikeDetector"]

log = logging.getLogger("obsbus")

ON_SPIKE = ("log", "stop")


class LossSpikeDetector(Callback):
    """Flags a loss spike: a jump above a robust threshold that stays up for ``patience`` batches.

    The test (:class:`~obsbus.callbacks._spike_window.SpikeWindow`): a batch's
    loss is *high* when it is more than ``threshold`` robust standard deviations
    (1.4826 x the median absolute deviation) above the median of the last
    ``window`` normal losses. ``patience`` high losses in a row are one spike,
    dated at the batch the jump began; a shorter run of high losses is noise
    and joins the window. After a spike the window starts over, so a loss that
    settles higher is the new normal and is not flagged again. Losses only go
    up when something is wrong, so falls are never flagged.

    **No new sync.** With a :class:`~obsbus.callbacks.NaNMonitor` in the run
    (``deferred`` mode, the default, with a ``check_interval`` of at most 4096
    batches) it reads nothing itself: NaNMonitor already reads every batch's
    loss at its checks (one transfer), and hands them on. Alone, it keeps the
    losses on their device the same way and reads them every ``check_interval``
    (one transfer then). Either way a spike is known at the check after it (the
    keys are logged then, at that step). A dict or list loss is tested as the
    sum of its tensors; a loss given as a Python number is not seen.

    Keys (logged only when a spike is confirmed, at the step of the check):

    - ``loss_spike/batch``: the batch the jump began (the ``step`` of its
      ``loss/train/total``).
    - ``loss_spike/loss``: the loss at that batch.
    - ``loss_spike/baseline``: the window's median before the jump.
    - ``loss_spike/score``: how many robust standard deviations above the
      baseline the loss was.

    Alert destinations (:class:`~obsbus.loggers.SlackLogger`,
    :class:`~obsbus.loggers.WebhookLogger`) send a ``loss_spike`` alert for
    these keys.

    Args:
        window: normal losses the baseline is taken over (>= 10).
        threshold: robust standard deviations above the median that make a
            loss high (> 0).
        patience: high losses in a row that make a spike (>= 1; 1 flags a
            single outlier).
        min_history: normal losses needed before anything is tested
            (``None``: ``window // 2``, at least 10).
        on_spike: ``"log"`` (the keys and a warning) or ``"stop"`` (also
            :meth:`~obsbus.State.stop_training` after the batch).
        check_interval: how often the losses are read when the run has no
            NaNMonitor (``"100ba"``; at most ``"4096ba"``); with one, its
            ``check_interval`` is used.

    Example:
        >>> import math
        >>> from obsbus import Run
        >>> from obsbus.callbacks import NaNMonitor
        >>> from obsbus.loggers import InMemoryLogger
        >>> import torch
        >>> mem = InMemoryLogger()
        >>> spikes = LossSpikeDetector(window=20, patience=3)
        >>> with Run(max_duration="60ba", callbacks=[NaNMonitor(check_interval="10ba"), spikes],
        ...          loggers=[mem]) as run:
        ...     for (i,) in run.train([[i] for i in range(60)]):
        ...         noise = 0.01 * math.sin(i)
        ...         run.state.loss = torch.tensor((3.0 if i >= 40 else 1.0) + noise)
        >>> mem.get_timeseries("loss_spike/batch")["loss_spike/batch"]
        [41]
    """

    def __init__(
        self,
        window: int = 100,
        threshold: float = 6.0,
        patience: int = 10,
        min_history: int | None = None,
        on_spike: str = "log",
        check_interval: TimeLike = "100ba",
    ) -> None:
        cls = "LossSpikeDetector"
        self.window = check_int(cls, "window", window, minimum=10)
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not math.isfinite(threshold)
            or threshold <= 0
        ):
            raise ValueError(
                f"{cls} threshold must be a finite number of robust standard deviations > 0, "
                f"got {threshold!r}. To fix, pass e.g. threshold=6.0."
            )
        self.threshold = float(threshold)
        self.patience = check_int(cls, "patience", patience, minimum=1)
        if min_history is None:
            min_history = max(10, window // 2)
        self.min_history = check_int(cls, "min_history", min_history, minimum=2)
        if self.min_history > self.window:
            raise ValueError(
                f"{cls} min_history must be at most window ({self.window}), got "
                f"{min_history!r}: the window holds only that many losses."
            )
        if on_spike not in ON_SPIKE:
            raise ValueError(f"{cls} on_spike must be 'log' or 'stop', got {on_spike!r}.")
        self.on_spike = on_spike
        self.check_interval = LogInterval(check_interval, f"{cls} check_interval")
        if not 0 < self.check_interval.batches <= _READ_ALL_MAX:
            raise ValueError(
                f"{cls} check_interval must be at most {_READ_ALL_MAX} batches, got "
                f"{check_interval!r}: past that the losses are read as a sum. To fix, pass "
                f"e.g. check_interval='100ba'."
            )
        self._own: KeptLosses | None = None  # the losses, when no NaNMonitor reads them
        self.spikes: list[Spike] = []  # every spike of this run, in order
        self._window = SpikeWindow(self.window, self.threshold, self.patience, self.min_history)

    @override
    def init(self, state: State, logger: Logger) -> None:
        from obsbus.callbacks.nan_monitor import NaNMonitor

        monitors = [
            cb for cb in state.callbacks if isinstance(cb, NaNMonitor) and cb.mode == "deferred"
        ]
        self._window.reset()
        if monitors and monitors[0].check_interval.batches <= _READ_ALL_MAX:
            monitors[0].read_losses_with(self._read)
            self._own = None
        else:
            self._own = KeptLosses()

    @override
    def after_train_batch(self, state: State, logger: Logger) -> None:
        own = self._own
        if own is not None and state.loss is not None:
            batch = state.timestamp._batch + 1
            for tensor in _tensors(state.loss):
                own.keep(batch, tensor)

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self._own is not None and self.check_interval.at_batch_end(state):
            self._read_own(state, logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        if self._own is not None:
            self._read_own(state, logger)

    def _read_own(self, state: State, logger: Logger) -> None:
        assert self._own is not None
        taken = self._own.take()
        if not taken:
            return
        values = to_host(KeptLosses.to_read(taken))  # one transfer per device
        by_batch: dict[int, float] = {}
        for batches, losses in KeptLosses.read_values(taken, values):
            for batch, loss in zip(batches, losses, strict=True):
                by_batch[batch] = by_batch.get(batch, 0.0) + loss
        ordered = sorted(by_batch)
        self._read(state, logger, ordered, [by_batch[b] for b in ordered])

    def _read(self, state: State, logger: Logger, batches: list[int], losses: list[float]) -> None:
        for spike in self._window.add(batches, losses):
            self.spikes.append(spike)
            logger.log_metrics(
                {
                    "loss_spike/batch": spike.batch,
                    "loss_spike/loss": spike.loss,
                    "loss_spike/baseline": spike.baseline,
                    "loss_spike/score": spike.score,
                }
            )
            stop = self.on_spike == "stop"
            log.warning(
                "LossSpikeDetector: the training loss jumped at batch %d to %.6g (baseline "
                "%.6g, %.1f robust standard deviations above) and stayed up for %d batches.%s",
                spike.batch,
                spike.loss,
                spike.baseline,
                spike.score,
                self.patience,
                " Stopping training after this batch (on_spike='stop')." if stop else "",
            )
            if stop:
                state.stop_training()


def _tensors(loss: Any) -> list[Any]:
    """The tensors of a loss (a tensor, or a dict/list/tuple of them); numbers are left out."""
    if hasattr(loss, "detach"):
        return [loss]
    if isinstance(loss, Mapping):
        loss = list(loss.values())
    if isinstance(loss, (list, tuple)):
        return [t for part in loss for t in _tensors(part)]
    return []
