"""Composer's EarlyStopper and ThresholdStopper tests, ported to obsbus.

Sources (mosaicml/composer at commit 6405188805a0054b4551ec49e4919c54c971d0e8):
tests/callbacks/test_early_stopper.py, tests/callbacks/test_threshold_stopper.py and the
``MetricSetterCallback`` they use (tests/metrics/metric_setter_callback.py). Composer's
``DeviceCPU`` there only moves tensors and modules to the CPU; ``_CPU`` below does the same.
The rest is Composer's code with ``composer`` changed to ``obsbus`` in the imports and
``SimpleModel`` turned into its module plus ``loss_fn=``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from tests.composer_port._common import loss_fn, random_classification_data, simple_model

torchmetrics = pytest.importorskip("torchmetrics")

from obsbus.core import Callback, State, TimeUnit  # noqa: E402
from obsbus.loggers import Logger  # noqa: E402


class _CPU:
    """Composer's ``DeviceCPU`` as MetricSetterCallback uses it."""

    def tensor_to_device(self, tensor):
        return tensor

    def module_to_device(self, module):
        return module


class MetricSetterCallback(Callback):
    def __init__(
        self,
        monitor: str,
        dataloader_label: str,
        metric_cls: Callable,  # metric function
        metric_sequence: Sequence,
        unit: TimeUnit,
        device=None,
        metric_args: dict | None = None,
    ):
        self.monitor = monitor
        self.dataloader_label = dataloader_label
        self.metric_cls = metric_cls
        self.metric_sequence = metric_sequence
        self.unit = unit
        self.device = device
        self.metric_args = metric_args
        if self.metric_args is None:
            self.metric_args = {}

    def _generate_dummy_metric_inputs(self, target_val) -> tuple[torch.Tensor, torch.Tensor]:
        """Generate fake set of predictions and target values to satisfy the given target accuracy value."""
        # predictions is a tensor with a ratio of target_val 1s to sub_target 0s
        preds_ones = torch.ones(int(target_val * 10), dtype=torch.uint8)
        sub_target = float(f"{(1 - target_val) * 10:.2f}")
        preds_zeros = torch.zeros(int(sub_target), dtype=torch.uint8)
        preds = torch.cat((preds_ones, preds_zeros))
        # targets is a tensor full of ones
        targets = torch.ones(10, dtype=torch.uint8)
        return (preds, targets)

    def _update_metrics(self, state: State):
        idx = min(len(self.metric_sequence) - 1, state.timestamp.get(self.unit).value)
        metric_val = self.metric_sequence[idx]
        if self.dataloader_label == "train":
            state.train_metrics = state.train_metrics if state.train_metrics else {}
        else:
            state.eval_metrics[self.dataloader_label] = state.eval_metrics.get(
                self.dataloader_label, dict()
            )
        metric_tensor = torch.tensor(metric_val)
        if self.device is not None:
            self.device.tensor_to_device(metric_tensor)

        raw_metric = self.metric_cls(**self.metric_args)  # type: ignore
        preds, targets = self._generate_dummy_metric_inputs(metric_val)
        raw_metric.update(preds=preds, target=targets)

        # assert for pyright error: "module_to_device" is not a known member of "None"
        assert self.device is not None
        self.device.module_to_device(raw_metric)
        assert state.train_metrics is not None
        if self.dataloader_label == "train":
            state.train_metrics[self.monitor] = raw_metric
        else:
            state.eval_metrics[self.dataloader_label][self.monitor] = raw_metric

    def eval_end(self, state: State, logger: Logger) -> None:
        if self.dataloader_label == state.dataloader_label:
            self._update_metrics(state)

    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.dataloader_label == state.dataloader_label:
            self._update_metrics(state)

    def batch_end(self, state: State, logger: Logger) -> None:
        if self.unit == TimeUnit.BATCH and self.dataloader_label == state.dataloader_label:
            self._update_metrics(state)


@pytest.mark.parametrize(
    "metric_sequence", [[0.1, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1], [0.1, 0.2]]
)
@pytest.mark.parametrize("unit", [TimeUnit.EPOCH, TimeUnit.BATCH])
def test_early_stopper(metric_sequence: list[float], unit: TimeUnit):
    """Source: tests/callbacks/test_early_stopper.py::test_early_stopper (the CPU cases)."""
    from torchmetrics.classification import MulticlassAccuracy

    from obsbus import Trainer
    from obsbus.callbacks.early_stopper import EarlyStopper
    from obsbus.core.time import Time

    if unit == TimeUnit.EPOCH:  # noqa: SIM108 (as in Composer)
        dataloader_label = "eval"
    else:
        dataloader_label = "train"

    test_device = _CPU()

    early_stopper = EarlyStopper("MulticlassAccuracy", dataloader_label, patience=Time(3, unit))

    test_metric_setter = MetricSetterCallback(
        "MulticlassAccuracy",
        dataloader_label,
        MulticlassAccuracy,
        metric_sequence,
        unit,
        test_device,
        metric_args={
            "num_classes": 2,
            "average": "micro",
        },
    )

    trainer = Trainer(
        model=simple_model(num_features=5),
        loss_fn=loss_fn,
        train_dataloader=random_classification_data(shape=(5, 1, 1), batch_size=4),
        eval_dataloader=random_classification_data(shape=(5, 1, 1), batch_size=4, seed=1),
        max_duration="30ep",
        callbacks=[test_metric_setter, early_stopper],
    )

    trainer.fit()

    assert trainer.state.timestamp.get(unit).value == len(metric_sequence) + int(
        early_stopper.patience
    )


@pytest.mark.parametrize("metric_sequence", [[0.1, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8], [0.6, 0.7]])
@pytest.mark.parametrize("unit", [TimeUnit.EPOCH, TimeUnit.BATCH])
def test_threshold_stopper_eval(metric_sequence: list[float], unit: TimeUnit):
    """Source: tests/callbacks/test_threshold_stopper.py::test_threshold_stopper_eval (CPU)."""
    from torchmetrics.classification import MulticlassAccuracy

    from obsbus import Trainer
    from obsbus.callbacks import ThresholdStopper

    metric_threshold = 0.65

    if unit == TimeUnit.EPOCH:
        dataloader_label = "eval"
        stop_on_batch = False
    else:
        dataloader_label = "train"
        stop_on_batch = True

    test_device = "cpu"

    tstop = ThresholdStopper(
        "MulticlassAccuracy",
        dataloader_label,
        metric_threshold,
        comp=None,
        stop_on_batch=stop_on_batch,
    )

    test_metric_setter = MetricSetterCallback(
        "MulticlassAccuracy",
        dataloader_label,
        MulticlassAccuracy,
        metric_sequence,
        unit,
        _CPU(),
        metric_args={
            "num_classes": 2,
            "average": "micro",
        },
    )

    trainer = Trainer(
        model=simple_model(),
        loss_fn=loss_fn,
        train_dataloader=random_classification_data(),
        eval_dataloader=random_classification_data(seed=1),
        train_subset_num_batches=1,
        eval_subset_num_batches=1,
        device=test_device,
        max_duration="30ep",
        callbacks=[test_metric_setter, tstop],
    )

    trainer.fit()

    count_before_threshold = 0
    for metric in metric_sequence:
        if metric_threshold > metric:
            count_before_threshold += 1

    assert trainer.state.timestamp.get(unit).value == count_before_threshold
