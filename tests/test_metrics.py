"""Train and eval metrics: Trainer/Run ``train_metrics=``/``eval_metrics=`` (issue 14, item 3)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from obsbus import Run, Trainer
from obsbus.callbacks import EarlyStopper, ThresholdStopper
from obsbus.loggers import InMemoryLogger

from .test_values import SyncSpy

torchmetrics = pytest.importorskip("torchmetrics")
from torchmetrics.classification import MulticlassAccuracy  # noqa: E402


def classification_data(batches=4, batch_size=8, classes=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch_size, 4, generator=gen),
             torch.randint(0, classes, (batch_size,), generator=gen)) for _ in range(batches)]


def classifier(classes=3):
    torch.manual_seed(0)
    return torch.nn.Linear(4, classes)


class CountingMean:
    """A metric that is not torchmetrics: the mean of outputs[:, 0], and what it was given."""

    def __init__(self):
        self.seen = []
        self.reset()

    def update(self, outputs, targets):
        self.seen.append((outputs.shape, targets.shape, outputs.requires_grad))
        self.total = self.total + outputs[:, 0].sum()
        self.count += outputs.shape[0]

    def compute(self):
        return self.total / self.count

    def reset(self):
        self.total, self.count = torch.zeros(()), 0


def fit(**kwargs):
    mem = InMemoryLogger()
    kwargs.setdefault("max_duration", "2ep")
    with Trainer(classifier(), classification_data(), loss_fn=F.cross_entropy, device="cpu",
                 loggers=[mem], progress_bar=False, **kwargs) as trainer:
        trainer.fit()
    return trainer, mem


def test_train_metrics_are_logged_every_batch_by_default_under_their_class_name():
    trainer, mem = fit(train_metrics=MulticlassAccuracy(num_classes=3))
    series = mem.get_timeseries("metrics/train/MulticlassAccuracy")
    assert series["batch"] == list(range(1, 9))
    assert all(0.0 <= v <= 1.0 for v in series["metrics/train/MulticlassAccuracy"])
    assert isinstance(trainer.state.train_metrics["MulticlassAccuracy"], MulticlassAccuracy)


def test_a_window_of_batches_is_computed_at_the_interval_and_reset_after():
    data = classification_data()
    model = classifier()
    metric = CountingMean()
    mem = InMemoryLogger()
    with Trainer(model, data, "4ba", loss_fn=F.cross_entropy, device="cpu", loggers=[mem],
                 progress_bar=False, optimizers=torch.optim.SGD(model.parameters(), lr=0.0),
                 train_metrics={"mean0": metric}, train_metrics_interval="2ba") as trainer:
        trainer.fit()
    series = mem.get_timeseries("metrics/train/mean0")
    assert series["batch"] == [2, 4]
    with torch.no_grad():  # lr 0: the model does not move, so the window means can be checked
        firsts = [model(x)[:, 0] for x, _ in data]
    expected = [torch.cat(firsts[:2]).mean().item(), torch.cat(firsts[2:]).mean().item()]
    assert series["metrics/train/mean0"] == pytest.approx(expected, rel=1e-5)
    # What update receives (Composer's default): the batch's outputs, detached, and targets.
    assert metric.seen[0] == (torch.Size([8, 3]), torch.Size([8]), False)


def test_eval_metrics_are_computed_at_eval_end_per_label_and_kept_in_state():
    trainer, mem = fit(eval_metrics=[MulticlassAccuracy(num_classes=3, average="micro")],
                       eval_dataloader={"val": classification_data(2, seed=1),
                                        "test": classification_data(3, seed=2)})
    for label in ("val", "test"):
        series = mem.get_timeseries(f"metrics/{label}/MulticlassAccuracy")
        assert series["batch"] == [4, 8]
        assert set(trainer.state.eval_metrics[label]) == {"loss", "MulticlassAccuracy"}
    # One copy per label (Composer deep-copies the metrics per evaluator).
    assert (trainer.state.eval_metrics["val"]["MulticlassAccuracy"]
            is not trainer.state.eval_metrics["test"]["MulticlassAccuracy"])
    model, val = trainer.model, classification_data(2, seed=1)
    with torch.no_grad():
        right = sum((model(x).argmax(1) == y).sum().item() for x, y in val)
    assert mem.get_timeseries("metrics/val/MulticlassAccuracy")[
        "metrics/val/MulticlassAccuracy"][-1] == pytest.approx(right / 16)


def test_standalone_eval_returns_the_metrics():
    data = classification_data()
    with Trainer(classifier(), data, "1ep", loss_fn=F.cross_entropy, device="cpu",
                 progress_bar=False, eval_metrics={"acc": MulticlassAccuracy(num_classes=3)}
                 ) as trainer:
        metrics = trainer.eval(data, label="holdout")
    assert float(metrics["holdout"]["acc"].compute()) == pytest.approx(
        float(trainer.state.eval_metrics["holdout"]["acc"].compute()))


def test_a_model_with_composers_update_metric_decides_what_update_gets():
    class Model(torch.nn.Linear):
        calls = 0

        def update_metric(self, batch, outputs, metric):
            Model.calls += 1
            metric.update(outputs.argmax(1), batch[1])

    torch.manual_seed(0)
    with Trainer(Model(4, 3), classification_data(), "2ba", loss_fn=F.cross_entropy,
                 device="cpu", progress_bar=False,
                 train_metrics=MulticlassAccuracy(num_classes=3)) as trainer:
        trainer.fit()
    assert Model.calls == 2


def test_run_update_metrics_in_a_hand_written_loop():
    mem = InMemoryLogger()
    model = classifier()
    data = classification_data(3)

    def evaluate(run):
        for x, y in run.eval(data):
            run.update_metrics(run.forward(model, x), y)

    with Run(model=model, max_duration="3ba", loggers=[mem], eval_interval="3ba", eval_fn=evaluate,
             train_metrics=MulticlassAccuracy(num_classes=3),
             eval_metrics={"acc": MulticlassAccuracy(num_classes=3)}) as run:
        for x, y in run.train(data):
            run.update_metrics(run.forward(model, x), y)
    assert mem.get_timeseries("metrics/train/MulticlassAccuracy")["batch"] == [1, 2, 3]
    assert mem.get_timeseries("metrics/eval/acc")["batch"] == [3]


def test_the_last_partial_window_is_logged_at_fit_end():
    metric = CountingMean()
    _, mem = fit(max_duration="5ba", train_metrics={"m": metric}, train_metrics_interval="2ba")
    assert mem.get_timeseries("metrics/train/m")["batch"] == [2, 4, 5]


def test_updates_and_non_log_steps_never_sync():
    """Updated every batch on the device; computed (a tensor, unconverted) only when due."""

    import io

    from obsbus import Callback
    from obsbus.loggers import ConsoleLogger

    spy = SyncSpy()

    class Recorder(Callback):
        def __init__(self):
            self.per_batch, self._seen = {}, 0

        def batch_checkpoint(self, state, logger):
            self.per_batch[state.timestamp.batch.value] = spy.calls[self._seen:]
            self._seen = len(spy.calls)

        def epoch_checkpoint(self, state, logger):  # the eval at epoch_end: that batch's
            self.per_batch[state.timestamp.batch.value] += spy.calls[self._seen:]
            self._seen = len(spy.calls)

    recorder = Recorder()
    model = classifier()
    trainer = Trainer(model, classification_data(10), "2ep", loss_fn=F.cross_entropy,
                      device="cpu", progress_bar=False, callbacks=[recorder],
                      loggers=[ConsoleLogger(log_interval="5ba", stream=io.StringIO())],
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
                      train_metrics=MulticlassAccuracy(num_classes=3), train_metrics_interval="5ba",
                      eval_metrics=MulticlassAccuracy(num_classes=3),
                      eval_dataloader=classification_data(2, seed=3))
    with spy:
        trainer.fit()
    trainer.close()
    assert set(recorder.per_batch) == set(range(1, 21))
    quiet = {b: calls for b, calls in recorder.per_batch.items() if b % 5}
    assert all(calls == [] for calls in quiet.values()), {b: c for b, c in quiet.items() if c}
    assert recorder.per_batch[5]  # the console did turn the values into numbers there


def test_early_stopper_reads_train_metrics_with_compute():
    """Composer's EarlyStopper reads state.train_metrics[monitor].compute() for 'train'."""
    seen = []

    class Const(CountingMean):
        def compute(self):
            seen.append(1)
            return torch.tensor(0.5)

    stopper = EarlyStopper("Const", "train", patience="2ba")
    trainer, _ = fit(max_duration="20ba", train_metrics=Const(), callbacks=[stopper])
    # 0.5 forever: the first check sets the best, three batches later patience is exceeded.
    assert trainer.state.timestamp.batch.value == 4
    assert stopper.best == 0.5 and seen


def test_threshold_stopper_on_a_train_metric():
    stopper = ThresholdStopper("MulticlassAccuracy", "train", threshold=-1.0, stop_on_batch=True)
    trainer, _ = fit(max_duration="5ba", train_metrics=MulticlassAccuracy(num_classes=3),
                     callbacks=[stopper])
    assert trainer.state.timestamp.batch.value == 1


def test_composers_early_stopping_documentation_example_runs():
    """Composer docs/source/notes/early_stopping.rst, "Early Stopping" testcode, ported.

    Composer's ``model`` there is a ComposerClassifier whose train metric is
    MulticlassAccuracy; here it is a plain module with ``loss_fn=`` and the
    metric passed as ``train_metrics=``.
    """
    model = classifier()
    train_dataloader = classification_data(8)
    eval_dataloader = classification_data(2, seed=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    # --- Composer's example, imports changed ---
    import torch as torch_  # the example's `import torch`

    early_stopper = EarlyStopper(
        monitor="MulticlassAccuracy",
        dataloader_label="train",
        patience="50ba",
        comp=torch_.greater,
        min_delta=0.01,
    )

    trainer = Trainer(
        model=model,
        train_dataloader=train_dataloader,
        eval_dataloader=eval_dataloader,
        optimizers=optimizer,
        callbacks=[early_stopper],
        max_duration="1ep",
        # --- the ComposerModel's part ---
        loss_fn=F.cross_entropy,
        train_metrics=MulticlassAccuracy(num_classes=3),
        progress_bar=False,
    )
    trainer.fit()
    trainer.close()
    assert trainer.state.timestamp.batch.value == 8  # patience 50ba is not reached in 8
    assert early_stopper.best is not None


def test_composers_threshold_stopping_documentation_example_runs():
    """Composer docs/source/notes/early_stopping.rst, "Threshold Stopping" testcode, ported."""
    model = classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = InMemoryLogger()
    threshold_stopper = ThresholdStopper(
        monitor="MulticlassAccuracy",
        dataloader_label="eval",
        threshold=0.8,
    )
    trainer = Trainer(
        model=model,
        train_dataloader=classification_data(4),
        eval_dataloader=classification_data(2, seed=1),
        optimizers=optimizer,
        callbacks=[threshold_stopper],
        max_duration="3ep",
        loss_fn=F.cross_entropy,
        eval_metrics=MulticlassAccuracy(num_classes=3),
        loggers=[mem],
        progress_bar=False,
    )
    trainer.fit()
    trainer.close()
    accuracies = mem.get_timeseries("metrics/eval/MulticlassAccuracy")["metrics/eval/MulticlassAccuracy"]
    above = [i for i, acc in enumerate(accuracies) if acc > 0.8]
    assert trainer.state.timestamp.epoch.value == (above[0] + 1 if above else 3)
    assert len(accuracies) == trainer.state.timestamp.epoch.value


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (5, TypeError, r"Trainer train_metrics must be a metric .*got 5\."),
        ("acc", TypeError, r"got 'acc'"),
        ({"acc": 5}, TypeError, r"'acc' holds 5"),
        ({1: MulticlassAccuracy(num_classes=2)}, TypeError, r"the name 1 is not a non-empty str"),
        ([MulticlassAccuracy(num_classes=2), MulticlassAccuracy(num_classes=3)], ValueError,
         r"two metrics are named 'MulticlassAccuracy'.*To fix, pass a dict"),
        (MulticlassAccuracy, TypeError, r"got <class"),
    ],
    ids=["int", "str", "dict-value", "dict-key", "duplicate-names", "a-class"],
)
def test_bad_metrics_fail_at_construction(value, error, match):
    with pytest.raises(error, match=match):
        Trainer(classifier(), classification_data(), "1ep", device="cpu", train_metrics=value)


def test_bad_metrics_interval_fails_at_construction():
    with pytest.raises(ValueError, match=r"Run train_metrics_interval '10sp' is not supported"):
        Run(train_metrics_interval="10sp")
