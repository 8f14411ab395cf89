"""EarlyStopper and ThresholdStopper: where they read, when they stop, what they refuse."""

from __future__ import annotations

import math
import operator
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, ObsbusWarning, Run, Trainer
from obsbus.callbacks.early_stopper import EarlyStopper
from obsbus.callbacks.threshold_stopper import ThresholdStopper
from tests.helpers import regression_data, tiny_model
from tests.test_values import SyncSpy

# ---------------------------------------------------------------------------
# Drivers: a Trainer whose eval metric is scripted, and a Run whose eval loss is.
# ---------------------------------------------------------------------------


class ScriptEvalMetric(Callback):
    """At eval_end, replaces the eval metric with the next scripted value (runs first)."""

    def __init__(self, name, values, label="eval"):
        self.name, self.values, self.label = name, list(values), label
        self.evals = 0

    def eval_end(self, state, logger):
        if state.dataloader_label == self.label:
            state.eval_metrics[self.label][self.name] = torch.tensor(self.values[self.evals])
            self.evals += 1


def fit_trainer(stopper, name, values, *, epochs=None, batches_per_epoch=2, eval_interval="1ep"):
    """Train with an eval every ``eval_interval``; the metric follows ``values``."""
    script = ScriptEvalMetric(name, values)
    duration = f"{epochs or len(values)}ep"
    trainer = Trainer(tiny_model(), regression_data(batches_per_epoch), duration,
                      loss_fn=F.mse_loss, eval_dataloader=regression_data(1, seed=1),
                      eval_interval=eval_interval, callbacks=[script, stopper], device="cpu")
    with trainer:
        trainer.fit()
    return trainer.state.timestamp


def run_with_eval_losses(stopper, losses, *, max_duration, eval_interval, batches=4):
    """A plain Run loop whose eval loss (computed by run.loss) follows ``losses``."""
    values = iter(losses)

    def evaluate(run):
        for (x,) in run.eval([(torch.zeros(2, 1),)]):
            run.loss(lambda x=x: torch.full((), next(values)) + 0 * x.sum())

    with Run(max_duration=max_duration, callbacks=[stopper], eval_interval=eval_interval,
             eval_fn=evaluate) as run:
        for _ in run.train([[i] for i in range(batches)]):
            pass
    return run.state.timestamp


# ---------------------------------------------------------------------------
# EarlyStopper: stops at the exact epoch or batch
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name", "values", "stop_epoch"),
    [
        ({"patience": "1ep"}, "loss", [4.0, 3.0, 3.5, 3.25, 1.0, 0.5], 4),
        ({"patience": 1}, "loss", [4.0, 3.0, 3.5, 3.25, 1.0, 0.5], 4),
        ({"patience": "0ep"}, "loss", [4.0, 3.0, 3.5, 1.0], 3),
        ({"patience": "2ep"}, "loss", [4.0, 3.0, 3.5, 2.0, 2.5, 2.5, 2.5, 1.0], 7),
        ({"patience": "1ep"}, "loss", [4.0, 3.0, 2.0, 1.0], None),
        ({"patience": "1ep"}, "accuracy", [0.5, 0.6, 0.55, 0.58, 0.9], 4),
        ({"patience": "1ep", "min_delta": 0.25}, "loss", [4.0, 3.875, 3.75, 3.0], 3),
        ({"patience": "1ep", "min_delta": 0.0}, "loss", [4.0, 3.875, 3.75, 3.0], None),
        ({"patience": "1ep"}, "loss", [3.0, 3.0, 3.0, 3.0], 3),
        ({"patience": "1ep", "comp": "le"}, "loss", [3.0, 3.0, 3.0, 3.0], None),
        ({"patience": "1ep"}, "loss", [4.0, math.nan, math.nan, 1.0], 3),
        ({"patience": "1ep"}, "loss", [math.nan, 2.0, 3.0, 3.0, 3.0], 4),
    ],
    ids=[
        "patience-1ep",
        "patience-int-epochs",
        "patience-0",
        "patience-2ep-counts-from-last-improvement",
        "always-improving-never-stops",
        "accuracy-higher-is-better",
        "min-delta-small-gains-do-not-count",
        "same-gains-count-without-min-delta",
        "equal-is-no-improvement",
        "comp-le-equal-is-improvement",
        "nan-never-improves",
        "nan-first-then-real-best",
    ],
)
def test_early_stopper_stops_at_the_exact_epoch(kwargs, name, values, stop_epoch):
    stopper = EarlyStopper(monitor=name, dataloader_label="eval", **kwargs)
    ts = fit_trainer(stopper, name, values)
    expected = stop_epoch or len(values)
    assert ts.epoch == f"{expected}ep"
    assert ts.batch == f"{2 * expected}ba"  # whole epochs: the eval runs at epoch_end


def test_early_stopper_keeps_the_best_and_when():
    stopper = EarlyStopper(patience="1ep")
    fit_trainer(stopper, "loss", [4.0, 3.0, 3.5, 3.25])
    assert stopper.best == 3.0
    assert stopper.best_at == (2, 4)  # epoch 2, batch 4


def test_early_stopper_patience_in_batches_under_run():
    # Eval every 2 batches; best at batch 2; at batch 6 four batches have
    # passed without improvement, more than 3.
    stopper = EarlyStopper(monitor="loss", dataloader_label="eval", patience="3ba")
    ts = run_with_eval_losses(stopper, [1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
                              max_duration="12ba", eval_interval="2ba")
    assert ts.batch == "6ba"
    assert ts.epoch == "1ep"  # stopped mid-epoch (the second epoch was cut)
    assert stopper.best == 1.0


def test_early_stopper_patience_in_batches_with_a_late_improvement():
    stopper = EarlyStopper(patience="4ba")
    ts = run_with_eval_losses(stopper, [1.0, 1.5, 0.5, 0.75, 0.75, 0.75, 0.75],
                              max_duration="14ba", eval_interval="2ba")
    assert ts.batch == "12ba"  # best at 6; 12 - 6 = 6 > 4, while 10 - 6 = 4 is not
    assert stopper.best == 0.5


def test_early_stopper_on_the_train_loss_checks_at_epoch_end():
    # state.loss at epoch_end is the epoch's last batch loss.
    epoch_losses = [2.0, 1.0, 1.5, 1.25, 0.5]
    stopper = EarlyStopper(monitor="loss/train/total", patience="1ep")
    assert (stopper.dataloader_label, stopper.monitor) == ("train", "loss")
    with Run(max_duration="5ep", callbacks=[stopper]) as run:
        for (i,) in run.train([[0], [1]]):
            run.state.loss = torch.tensor(epoch_losses[run.state.timestamp.epoch.value] + i)
    assert run.state.timestamp.epoch == "4ep"
    assert stopper.best == 2.0  # 1.0 + 1, the second batch of epoch 2


def test_early_stopper_reads_a_train_metric_a_loop_stores():
    stopper = EarlyStopper(monitor="accuracy", dataloader_label="train", patience="0ep")
    accuracies = iter([0.5, 0.75, 0.5])
    with Run(max_duration="5ep", callbacks=[stopper]) as run:
        for _ in run.train([[0]]):
            run.state.eval_metrics.setdefault("train", {})["accuracy"] = next(accuracies)
    assert run.state.timestamp.epoch == "3ep"


class Metric:
    """A torchmetrics-like object: the stopper calls compute()."""

    def __init__(self, value):
        self.value = value

    def compute(self):
        return torch.tensor(self.value)


class ScriptMetricObjects(ScriptEvalMetric):
    def eval_end(self, state, logger):
        state.eval_metrics[self.label][self.name] = Metric(self.values[self.evals])
        self.evals += 1


def test_early_stopper_reads_metric_objects_with_compute():
    stopper = EarlyStopper(monitor="f1", patience="0ep")
    script = ScriptMetricObjects("f1", [0.5, 0.25])
    trainer = Trainer(tiny_model(), regression_data(1), "5ep", loss_fn=F.mse_loss,
                      eval_dataloader=regression_data(1), callbacks=[script, stopper],
                      device="cpu")
    with trainer:
        trainer.fit()
    assert trainer.state.timestamp.epoch == "2ep"
    assert stopper.best == 0.5


def test_early_stopper_state_dict_round_trip():
    stopper = EarlyStopper(patience="1ep")
    fit_trainer(stopper, "loss", [4.0, 3.0])
    restored = EarlyStopper(patience="1ep")
    restored.load_state_dict(pickle.loads(pickle.dumps(stopper.state_dict())))
    assert (restored.best, restored.best_at) == (3.0, (2, 4))


# ---------------------------------------------------------------------------
# ThresholdStopper
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "values", "threshold", "comp", "stop_epoch"),
    [
        ("accuracy", [0.5, 0.7, 0.95, 0.99], 0.9, None, 3),
        ("loss", [1.0, 0.5, 0.25, 0.1], 0.3, None, 3),
        ("loss", [1.0, 0.5, 0.25], 0.1, None, None),
        ("loss", [1.0, 2.0, 20.0, 1.0], 10.0, "greater", 3),
        ("accuracy", [0.5, 0.75, 0.875], 0.75, "ge", 2),
        ("accuracy", [0.5, 0.75, 0.875], 0.75, operator.gt, 3),
        ("error_rate", [0.5, 0.2, 0.1], 0.25, None, 2),
    ],
    ids=["accuracy-above", "loss-below", "never-crosses", "loss-diverges-greater",
         "ge-includes-equal", "operator-gt", "error-lower-is-better"],
)
def test_threshold_stopper_stops_when_crossing(name, values, threshold, comp, stop_epoch):
    stopper = ThresholdStopper(name, "eval", threshold, comp=comp)
    ts = fit_trainer(stopper, name, values)
    assert ts.epoch == f"{stop_epoch or len(values)}ep"


def test_threshold_stopper_on_run_eval_loss_mid_epoch():
    stopper = ThresholdStopper("metrics/eval/loss", "eval", threshold=0.3)
    ts = run_with_eval_losses(stopper, [1.0, 0.5, 0.25, 0.1], max_duration="8ba",
                              eval_interval="2ba")
    assert ts.batch == "6ba"


def test_threshold_stopper_on_batch_stops_at_the_exact_batch():
    stopper = ThresholdStopper("loss/train/total", "train", threshold=0.3, stop_on_batch=True)
    losses = [1.0, 0.5, 0.25, 0.125]
    with Run(max_duration="3ep", callbacks=[stopper]) as run:
        for (i,) in run.train([[i] for i in range(4)]):
            run.state.loss = torch.tensor(losses[i])
    assert run.state.timestamp.batch == "3ba"  # 0.25 < 0.3 at the third batch
    assert run.state.timestamp.epoch == "0ep"


def test_threshold_stopper_without_stop_on_batch_waits_for_epoch_end():
    stopper = ThresholdStopper("loss", "train", threshold=0.3)
    with Run(max_duration="3ep", callbacks=[stopper]) as run:
        for _ in run.train([[0], [1], [2], [3]]):
            run.state.loss = torch.tensor(1.0 / (run.state.timestamp.batch.value + 1))
    assert run.state.timestamp.batch == "4ba"
    assert run.state.timestamp.epoch == "1ep"


# ---------------------------------------------------------------------------
# Comparison inferred from the name, or given
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "lower"),
    [("loss", True), ("val_loss", True), ("CrossEntropyLoss", True), ("error", True),
     ("top1_error_rate", True), ("perplexity", True), ("ppl", True), ("accuracy", False),
     ("f1", False), ("auroc", False), ("metrics/eval/Accuracy", False),
     ("metrics/eval/LanguagePerplexity", True)],
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("cls", [EarlyStopper, ThresholdStopper], ids=lambda c: c.__name__)
def test_comp_inferred_from_the_name(cls, name, lower):
    stopper = cls(monitor=name, dataloader_label="eval", **({"threshold": 1.0} if cls is ThresholdStopper else {}))
    assert stopper.comp.lower_is_better is lower
    assert stopper.comp.name == ("less" if lower else "greater")


@pytest.mark.parametrize(
    ("comp", "name", "lower"),
    [("less", "less", True), ("LT", "lt", True), ("greater_equal", "greater_equal", False),
     (torch.less, "less", True), (torch.greater, "greater", False), (torch.gt, "gt", False),
     (torch.le, "le", True), (operator.lt, "lt", True), (operator.ge, "ge", False)],
    ids=["less", "LT", "greater_equal", "torch.less", "torch.greater", "torch.gt", "torch.le",
         "operator.lt", "operator.ge"],
)
def test_comp_given(comp, name, lower):
    stopper = EarlyStopper(monitor="accuracy", comp=comp)
    assert (stopper.comp.name, stopper.comp.lower_is_better) == (name, lower)


def test_min_delta_follows_a_given_comp():
    # comp=torch.less on a name that would infer "greater": min_delta still
    # asks for values *lower* than the best by more than min_delta.
    stopper = EarlyStopper(monitor="score", comp=torch.less, min_delta=0.5, patience="0ep")
    ts = fit_trainer(stopper, "score", [4.0, 3.75, 3.0])
    assert ts.epoch == "2ep"
    assert stopper.best == 4.0


# ---------------------------------------------------------------------------
# Bad arguments: refused at construction, with the value and what is accepted
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"comp": "max"}, ValueError,
         r"EarlyStopper comp 'max' is not accepted; accepted: None \(inferred from the name\), "
         r"one of the strings 'less', 'lt', 'less_equal', 'le', 'greater', 'gt'"),
        ({"comp": lambda a, b: a < b}, ValueError, r"A custom function is refused because min_delta"),
        ({"patience": "10sp"}, ValueError,
         r"EarlyStopper patience '10sp' is not accepted: use a whole number of epochs >= 0 \(an "
         r"int\), or a time in epochs or batches such as '2ep' or '500ba'"),
        ({"patience": -1}, ValueError, r"EarlyStopper patience -1 is not accepted"),
        ({"patience": "1.5ep"}, ValueError, r"EarlyStopper patience '1.5ep' is not accepted"),
        ({"patience": True}, ValueError, r"EarlyStopper patience True is not accepted"),
        ({"patience": "soon"}, ValueError, r"EarlyStopper patience 'soon' is not accepted"),
        ({"min_delta": -0.1}, ValueError, r"EarlyStopper min_delta must be a finite number >= 0, got -0.1"),
        ({"min_delta": "0.1"}, ValueError, r"EarlyStopper min_delta must be a finite number >= 0, got '0.1'"),
        ({"min_delta": math.nan}, ValueError, r"min_delta must be a finite number >= 0, got nan"),
        ({"monitor": ""}, ValueError, r"EarlyStopper monitor must be a non-empty str such as 'loss' or 'eval', got ''"),
        ({"monitor": None}, ValueError, r"EarlyStopper monitor must be a non-empty str"),
        ({"dataloader_label": ""}, ValueError, r"EarlyStopper dataloader_label must be a non-empty str"),
        ({"monitor": "metrics/val/acc", "dataloader_label": "test"}, ValueError,
         r"EarlyStopper monitor 'metrics/val/acc' is the logged key of label 'val', but "
         r"dataloader_label is 'test'. To fix, pass dataloader_label='val'"),
    ],
    ids=["comp-string", "comp-custom-function", "patience-unit", "patience-negative",
         "patience-fraction", "patience-bool", "patience-garbage", "min-delta-negative",
         "min-delta-str", "min-delta-nan", "monitor-empty", "monitor-none", "label-empty",
         "key-label-conflict"],
)
def test_early_stopper_bad_args(kwargs, error, match):
    with pytest.raises(error, match=match):
        EarlyStopper(**kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("accuracy", "eval", "0.9"), {}, ValueError,
         r"ThresholdStopper threshold must be a finite number, got '0.9'"),
        (("accuracy", "eval", math.inf), {}, ValueError, r"threshold must be a finite number, got inf"),
        (("accuracy", "eval", None), {}, ValueError, r"threshold must be a finite number, got None"),
        (("accuracy", "eval", 0.9), {"comp": "above"}, ValueError,
         r"ThresholdStopper comp 'above' is not accepted; accepted:"),
        (("accuracy", "eval", 0.9), {"stop_on_batch": "yes"}, TypeError,
         r"ThresholdStopper stop_on_batch must be True or False, got 'yes'"),
        (("", "eval", 0.9), {}, ValueError, r"ThresholdStopper monitor must be a non-empty str"),
        (("loss/train/total", "eval", 0.9), {}, ValueError,
         r"monitor 'loss/train/total' is the logged key of label 'train', but dataloader_label is 'eval'"),
    ],
    ids=["threshold-str", "threshold-inf", "threshold-none", "comp", "stop-on-batch",
         "monitor-empty", "key-label-conflict"],
)
def test_threshold_stopper_bad_args(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        ThresholdStopper(*args, **kwargs)


# ---------------------------------------------------------------------------
# A metric that isn't there: a clear error at the first check
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stopper",
    [EarlyStopper(monitor="accuracy"), ThresholdStopper("accuracy", "eval", 0.9)],
    ids=["EarlyStopper", "ThresholdStopper"],
)
def test_missing_eval_metric_names_it_and_lists_the_available_ones(stopper):
    trainer = Trainer(tiny_model(), regression_data(2), "3ep", loss_fn=F.mse_loss,
                      eval_dataloader=regression_data(1), callbacks=[stopper], device="cpu")
    name = type(stopper).__name__
    with trainer, pytest.raises(
        ValueError,
        match=rf"{name}\(monitor='accuracy', dataloader_label='eval'\): no metric 'accuracy' "
              r"for dataloader_label 'eval'; available: \['loss'\]. To fix, pass monitor=",
    ):
        trainer.fit()
    assert trainer.state.timestamp.epoch == "1ep"  # at the first check


def test_train_loss_that_was_never_set_is_a_clear_error():
    stopper = EarlyStopper(dataloader_label="train")
    with pytest.raises(ValueError, match=r"reads state.loss, which is None: this loop does not "
                                         r"record a training loss"), \
            Run(max_duration="2ep", callbacks=[stopper]) as run:
        for _ in run.train([[0]]):
            pass
    assert run.state.timestamp.epoch == "1ep"


def test_train_metric_other_than_loss_missing():
    stopper = ThresholdStopper("accuracy", "train", 0.9, stop_on_batch=True)
    with pytest.raises(ValueError, match=r"no metrics for dataloader_label 'train'; labels with "
                                         r"metrics: \[\]. Looked in state.train_metrics \(which holds \[\]\) and "
                                         r"state.eval_metrics\['train'\]"), \
            Run(max_duration="2ba", callbacks=[stopper]) as run:
        for _ in run.train([[0], [1]]):
            run.state.loss = torch.tensor(1.0)


def test_a_label_never_evaluated_is_warned_once_and_training_goes_on():
    stopper = EarlyStopper(monitor="loss", dataloader_label="val")
    trainer = Trainer(tiny_model(), regression_data(2), "3ep", loss_fn=F.mse_loss,
                      eval_dataloader=regression_data(1), callbacks=[stopper], device="cpu")
    with warnings.catch_warnings(record=True) as caught, trainer:
        warnings.simplefilter("always")
        trainer.fit()
    ours = [w for w in caught if issubclass(w.category, ObsbusWarning)]
    assert len(ours) == 1
    assert str(ours[0].message) == (
        "EarlyStopper(monitor='loss', dataloader_label='val'): evaluation ran on ['eval'] but "
        "never on dataloader_label 'val', so this stopper has nothing to check and will not stop "
        "training. To fix, pass dataloader_label=<one of those>."
    )
    assert trainer.state.timestamp.epoch == "3ep"


# ---------------------------------------------------------------------------
# Syncs: only at the checks
# ---------------------------------------------------------------------------


class SyncsPerEvent(Callback):
    def __init__(self, spy):
        self.spy, self.seen, self.log = spy, 0, []

    def _record(self, where, state):
        calls = self.spy.calls[self.seen:]
        self.seen = len(self.spy.calls)
        self.log.append((where, state.timestamp.batch.value, calls))

    def batch_checkpoint(self, state, logger):
        self._record("batch", state)

    def epoch_checkpoint(self, state, logger):
        self._record("epoch", state)


@pytest.mark.parametrize("stop_on_batch", [False, True], ids=["per-epoch", "per-batch"])
def test_a_train_metric_syncs_only_where_it_is_checked(stop_on_batch):
    spy = SyncSpy()
    stopper = ThresholdStopper("loss", "train", threshold=-1.0, stop_on_batch=stop_on_batch)
    recorder = SyncsPerEvent(spy)
    with spy, Run(max_duration="2ep", callbacks=[stopper, recorder]) as run:
        for _ in run.train([[0], [1], [2]]):
            run.state.loss = torch.tensor(1.0)
    expected_batch = ["tolist"] if stop_on_batch else []
    expected_epoch = [] if stop_on_batch else ["tolist"]
    for where, batch, calls in recorder.log:
        assert calls == (expected_batch if where == "batch" else expected_epoch), (where, batch)
    assert len(recorder.log) == 8


def test_an_eval_metric_syncs_once_per_eval_and_never_on_training_steps():
    spy = SyncSpy()
    stopper = EarlyStopper(patience="5ep")
    recorder = SyncsPerEvent(spy)
    model = tiny_model()
    trainer = Trainer(model, regression_data(3), "2ep", loss_fn=F.mse_loss,
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.01),  # Adam's step syncs
                      eval_dataloader=regression_data(1), callbacks=[stopper, recorder],
                      device="cpu")
    with spy, trainer:
        trainer.fit()
    assert [calls for where, _, calls in recorder.log if where == "batch"] == [[]] * 6
    assert [calls for where, _, calls in recorder.log if where == "epoch"] == [["tolist"]] * 2
