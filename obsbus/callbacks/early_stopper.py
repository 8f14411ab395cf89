"""Stop training when a metric stops improving (Composer's ``EarlyStopper``)."""

from __future__ import annotations

import logging
import math
from typing import Any

from typing_extensions import override

from obsbus._check import check_number, type_as_value_error
from obsbus.callbacks._metric_lookup import MetricRef, read_metric, resolve_comp
from obsbus.callbacks._metric_stopper import MetricStopper
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import Time, TimeLike, TimeUnit

__all__ = ["EarlyStopper"]

log = logging.getLogger("obsbus")

_PATIENCE_ACCEPTED = (
    "a whole number of epochs >= 0 (an int), or a time in epochs or batches such as "
    "'2ep' or '500ba'"
)


def _check_patience(value: Any) -> Time:
    if isinstance(value, bool):
        raise ValueError(
            f"EarlyStopper patience {value!r} is not accepted: use {_PATIENCE_ACCEPTED}."
        )
    try:
        patience = Time.from_input(value, default_unit=TimeUnit.EPOCH)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"EarlyStopper patience {value!r} is not accepted: use {_PATIENCE_ACCEPTED}. ({exc})"
        ) from None
    if (
        patience.unit not in (TimeUnit.EPOCH, TimeUnit.BATCH)
        or patience.value < 0
        or patience.value != int(patience.value)
    ):
        raise ValueError(
            f"EarlyStopper patience {value!r} is not accepted: use {_PATIENCE_ACCEPTED}."
        )
    return Time(int(patience.value), patience.unit)


class EarlyStopper(MetricStopper):
    """Stops training when ``monitor`` has not improved for more than ``patience``.

    Composer's API and rule: the first check sets the best value; a later
    value is an improvement when ``comp(value -/+ min_delta, best)`` holds
    (it must beat the best by more than ``min_delta``, in the better
    direction); training stops (``state.stop_training()``) at the first
    check where more than ``patience`` has passed since the last
    improvement (or since the first check, if nothing improved). With an
    eval every epoch and ``patience="1ep"``, one epoch without improvement
    is tolerated and the second stops the run. A NaN is never an improvement.

    Where the metric is read (see ``obsbus/callbacks/_metric_lookup.py``):

    - an eval label: ``state.eval_metrics[dataloader_label][monitor]``,
      checked at ``eval_end`` of that dataloader (what ``Trainer`` and
      ``Run.eval`` fill; ``"loss"`` is ``metrics/{label}/loss``);
    - ``dataloader_label="train"``: ``monitor="loss"`` reads ``state.loss``
      (the batch loss logged as ``loss/train/total``), other names
      ``state.train_metrics[monitor].compute()`` (the ``train_metrics=`` of
      ``Trainer``/``Run``; else ``state.eval_metrics["train"][monitor]``);
      checked at ``epoch_end``, and at every ``batch_end`` when ``patience``
      is in batches, as in Composer.

    ``monitor`` may also be a logged key: ``"loss/train/total"`` or
    ``"metrics/{label}/{name}"``. A metric that is not there is a
    ``ValueError`` at the first check, listing what is; a label that was
    never evaluated is reported once (an :class:`~obsbus.ObsbusWarning`) at
    ``eval_after_all``.

    Each check turns the value into a float: one host transfer, which is a
    device sync for a GPU tensor. That is in the nature of a stop decision,
    and it happens only at the checks above, never on other steps (a train
    metric with ``patience`` in batches is checked, so synced, every batch).

    Logs no metrics; it says why it stopped on the ``obsbus`` logger.

    Args:
        monitor: the metric's name (``"loss"``, ``"accuracy"``) or logged key.
        dataloader_label: ``"eval"`` (the default eval label), another eval
            label, or ``"train"``.
        comp: which way is better: ``None`` infers it from the name (loss,
            error, perplexity, ppl: lower; anything else: higher); or
            ``"less"``, ``"greater"``, ``"le"``, ``"ge"``, ... or
            ``torch.less``/``torch.greater``/``operator.lt``/...
        min_delta: how much better than the best a value must be to count (>= 0).
        patience: how long without improvement is tolerated: an int is
            epochs; or ``"2ep"``, ``"500ba"``. Counted from the last improvement.

    Example:
        >>> import torch
        >>> from obsbus import Run
        >>> eval_losses = iter([4.0, 3.0, 3.5, 3.25, 1.0])
        >>> def evaluate(run):
        ...     for _ in run.eval([torch.zeros(1)]):
        ...         run.loss(lambda: torch.tensor(next(eval_losses)))
        >>> stopper = EarlyStopper(monitor="loss", dataloader_label="eval", patience="1ep")
        >>> with Run(max_duration="5ep", callbacks=[stopper], eval_interval="1ep",
        ...          eval_fn=evaluate) as run:
        ...     for batch in run.train([[0], [1]]):
        ...         pass
        >>> run.state.timestamp.epoch, stopper.best  # 3.0 at epoch 2; epochs 3 and 4 don't beat it
        (Time(4, 'ep'), 3.0)
        >>> EarlyStopper(patience="10sp")
        Traceback (most recent call last):
        ...
        ValueError: EarlyStopper patience '10sp' is not accepted: use a whole number of epochs ...
    """

    _name = "EarlyStopper"

    def __init__(
        self,
        monitor: str = "loss",
        dataloader_label: str = "eval",
        comp: Any = None,
        min_delta: float = 0.0,
        patience: TimeLike = "1ep",
    ) -> None:
        self.ref = MetricRef.parse(monitor, dataloader_label, "EarlyStopper", "eval")
        self.monitor = self.ref.name
        self.dataloader_label = self.ref.label
        self.comp = resolve_comp(comp, self.ref.name, "EarlyStopper")
        with type_as_value_error():  # a wrong type here has always been a ValueError
            self.min_delta = float(check_number("EarlyStopper", "min_delta", min_delta, minimum=0))
        self.patience = _check_patience(patience)
        self.best: float | None = None
        # Epoch and batch counts at the last improvement (or the first check).
        self.best_at: tuple[int, int] | None = None
        self._warned_label = False

    def _improves(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        shifted = value + self.min_delta if self.comp.lower_is_better else value - self.min_delta
        return self.comp(shifted, self.best)

    def _check(self, state: State) -> None:
        value = read_metric(state, self.ref, self._owner())
        ts = state.timestamp
        now = (ts._epoch, ts._batch)
        if self.best_at is None or self._improves(value):
            self.best_at = now
            if not math.isnan(value):
                self.best = value
            return
        index = 0 if self.patience.unit is TimeUnit.EPOCH else 1
        waited = now[index] - self.best_at[index]
        if waited > self.patience.value:
            unit = self.patience.unit.value
            log.info(
                "obsbus: EarlyStopper stops training at %s: %s has not improved on %s "
                "(at %d%s) for %d%s, more than patience %s.",
                ts.batch,
                self.ref,
                self.best,
                self.best_at[index],
                unit,
                waited,
                unit,
                self.patience,
            )
            state.stop_training()

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        # Composer checks a train metric every batch when patience counts batches.
        if self.ref.is_train and self.patience.unit is TimeUnit.BATCH:
            self._check(state)

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.ref.is_train and self.patience.unit is not TimeUnit.BATCH:
            self._check(state)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_at": self.best_at}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = state.get("best")
        best_at = state.get("best_at")
        self.best_at = None if best_at is None else (int(best_at[0]), int(best_at[1]))
