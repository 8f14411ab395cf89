"""Stop training once a metric crosses a threshold (Composer's ``ThresholdStopper``)."""

from __future__ import annotations

import logging
from typing import Any

from typing_extensions import override

from obsbus._check import check_bool, check_number, type_as_value_error
from obsbus.callbacks._metric_lookup import MetricRef, read_metric, resolve_comp
from obsbus.callbacks._metric_stopper import MetricStopper
from obsbus.logger import Logger
from obsbus.state import State

__all__ = ["ThresholdStopper"]

log = logging.getLogger("obsbus")


class ThresholdStopper(MetricStopper):
    """Stops training once ``comp(metric, threshold)`` holds: a loss low or an accuracy high enough.

    ``comp`` defaults as in :class:`~obsbus.callbacks.EarlyStopper`: names
    containing loss, error, perplexity or ppl stop when the value is *below*
    ``threshold`` (``less``); other names when it is *above* (``greater``).

    Where the metric is read and when (the lookup of ``EarlyStopper``, see
    ``obsbus/callbacks/_metric_lookup.py``):

    - an eval label: ``state.eval_metrics[dataloader_label][monitor]`` at
      ``eval_end`` of that dataloader (mid-epoch too, when evaluation runs
      every N batches);
    - ``"train"``: ``monitor="loss"`` is ``state.loss`` (logged as
      ``loss/train/total``), other names ``state.eval_metrics["train"][monitor]``;
      checked at ``epoch_end``, or at every ``batch_end`` with
      ``stop_on_batch=True`` (which then stops mid-epoch).

    Each check turns the value into a float: one host transfer, a device sync
    for a GPU tensor, in the nature of a stop decision. With
    ``stop_on_batch=True`` on a train metric that is one per batch; leave it
    off where that costs too much. ``stop_on_batch`` does nothing for an eval
    metric (the check runs whenever evaluation does), as in Composer.

    Logs no metrics; it says why it stopped on the ``obsbus`` logger.

    Args:
        monitor: the metric's name or logged key (``"metrics/eval/accuracy"``).
        dataloader_label: an eval label such as ``"eval"``, or ``"train"``.
        threshold: the value to cross (a finite number).
        comp: ``None`` (inferred), ``"less"``, ``"greater"``, ``"le"``,
            ``"ge"``, ... or ``torch.less``/``operator.gt``/...
        stop_on_batch: check a train metric at every batch, not every epoch.

    Example:
        >>> from obsbus import Run
        >>> stopper = ThresholdStopper("loss", "train", threshold=0.25, stop_on_batch=True)
        >>> with Run(max_duration="10ba", callbacks=[stopper]) as run:
        ...     for (i,) in run.train([[i] for i in range(10)]):
        ...         run.state.loss = 1.0 / (i + 1)
        >>> run.state.timestamp.batch  # 1/5 < 0.25 at the fifth batch
        Time(5, 'ba')
        >>> ThresholdStopper("accuracy", "eval", threshold="0.9")
        Traceback (most recent call last):
        ...
        ValueError: ThresholdStopper threshold must be a finite number, got '0.9'. To fix, ...
    """

    _name = "ThresholdStopper"

    def __init__(
        self,
        monitor: str,
        dataloader_label: str,
        threshold: float,
        comp: Any = None,
        stop_on_batch: bool = False,
    ) -> None:
        self.ref = MetricRef.parse(monitor, dataloader_label, "ThresholdStopper", None)
        self.monitor = self.ref.name
        self.dataloader_label = self.ref.label
        with type_as_value_error():  # a wrong type here has always been a ValueError
            self.threshold = float(check_number("ThresholdStopper", "threshold", threshold))
        self.comp = resolve_comp(comp, self.ref.name, "ThresholdStopper")
        self.stop_on_batch = check_bool("ThresholdStopper", "stop_on_batch", stop_on_batch)
        self._warned_label = False

    def _check(self, state: State) -> None:
        value = read_metric(state, self.ref, self._owner())
        if self.comp(value, self.threshold):
            log.info(
                "obsbus: ThresholdStopper stops training at %s: %s is %s, %s threshold %s.",
                state.timestamp.batch,
                self.ref,
                value,
                self.comp.name,
                self.threshold,
            )
            state.stop_training()

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.stop_on_batch and self.ref.is_train:
            self._check(state)

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        # With stop_on_batch, batch_end already checked this same value.
        if self.ref.is_train and not self.stop_on_batch:
            self._check(state)
