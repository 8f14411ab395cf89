"""RuntimeEstimator: exact estimates from a fake clock, warm-up skipped, eval time included."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from obsbus import ObsbusWarning, Run, Trainer
from obsbus.callbacks import runtime_estimator
from obsbus.callbacks.runtime_estimator import RuntimeEstimator
from obsbus.loggers import InMemoryLogger

from ..helpers import regression_data, tiny_model
from ..test_values import SyncSpy

KEY = "time/remaining_estimate"


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(runtime_estimator, "_clock", fake)
    return fake


def train(
    clock,
    estimator,
    batch_seconds,
    max_duration=None,
    *,
    eval_every=None,
    eval_seconds=None,
    loader=None,
):
    """Run ``len(batch_seconds)`` batches, each taking its seconds on ``clock``.

    ``eval_seconds`` is ``{label: [seconds of the 1st eval, the 2nd, ...]}``.
    """
    seconds = iter(batch_seconds)
    evals = {label: iter(times) for label, times in (eval_seconds or {}).items()}

    def evaluate(run):
        for label, times in evals.items():
            for _ in run.eval([[0]], label):
                clock.now += next(times)

    mem = InMemoryLogger()
    run = Run(
        max_duration=max_duration or f"{len(batch_seconds)}ba",
        callbacks=[estimator],
        loggers=[mem],
        eval_interval=eval_every,
        eval_fn=evaluate if eval_every else None,
    )
    with run:
        for _ in run.train(loader or [[i] for i in range(len(batch_seconds))]):
            clock.now += next(seconds)
    return mem


def estimates(mem):
    series = mem.get_timeseries(KEY)
    return dict(zip(series["step"], series[KEY], strict=True))


def approx(expected):
    return {k: pytest.approx(v, rel=1e-9, abs=1e-9) for k, v in expected.items()}


def test_exact_estimate_with_eval_time(clock):
    # 12 batches of 2 s after a 10 s warm-up batch; eval every 4 batches on two dataloaders:
    # "val" takes 5 s the first time (warm-up) and 3 s after, "test" 1 s.
    mem = train(
        clock,
        RuntimeEstimator(time_unit="seconds"),
        [10] + [2] * 11,
        "12ba",
        eval_every="4ba",
        eval_seconds={"val": [5, 3, 3], "test": [1, 1, 1]},
    )
    training = {k: 2.0 * (12 - k) for k in range(2, 13)}
    # After the eval at batch 4: 1 of 3 evals done, 2 left at the only known time (5 s, 1 s).
    # After the eval at batch 8: 2 done, 1 left; "val" now counts its later evals only (3 s).
    evals = {k: 0 if k <= 4 else 2 * (5 + 1) if k <= 8 else 3 + 1 for k in range(2, 13)}
    assert estimates(mem) == approx({k: training[k] + evals[k] for k in range(2, 13)})


@pytest.mark.parametrize(
    ("skip", "first_seconds", "first_step"),
    [(1, [100], 2), (2, [100, 50], 3)],
    ids=["skip1", "skip2"],
)
def test_warm_up_batches_are_skipped(clock, skip, first_seconds, first_step):
    seconds = first_seconds + [2] * (10 - len(first_seconds))
    mem = train(clock, RuntimeEstimator(skip_batches=skip, time_unit="seconds"), seconds)
    assert estimates(mem) == approx({k: 2.0 * (10 - k) for k in range(first_step, 11)})


def test_without_skipping_warm_up_counts(clock):
    mem = train(clock, RuntimeEstimator(skip_batches=0, time_unit="seconds"), [100] + [2] * 9)
    got = estimates(mem)
    assert got[1] == pytest.approx(100 / 1 * 9) and got[2] == pytest.approx(102 / 2 * 8)


def test_evals_left_are_whole_evals(clock):
    # Eval every 3 of 10 batches: after the 1st (progress 0.3), 2 are left, not 2.33.
    mem = train(
        clock,
        RuntimeEstimator(time_unit="seconds"),
        [10] + [2] * 9,
        eval_every="3ba",
        eval_seconds={"eval": [4, 4, 4]},
    )
    evals = {k: 0 if k <= 3 else 2 * 4 if k <= 6 else 4 if k <= 9 else 0 for k in range(2, 11)}
    assert estimates(mem) == approx({k: 2.0 * (10 - k) + evals[k] for k in range(2, 11)})


def test_reset_interval_follows_a_change_of_speed(clock):
    seconds = [9, 2, 2, 2, 2] + [4] * 7
    reset = estimates(
        train(clock, RuntimeEstimator(time_unit="seconds", reset_interval=2), seconds)
    )
    # Windows of two batches after warm-up: (2, 3), (4, 5), (6, 7), ...
    assert {k: reset[k] for k in (5, 6, 7)} == approx({5: 2.0 * 7, 6: 4.0 * 6, 7: 4.0 * 5})
    whole = estimates(train(clock, RuntimeEstimator(time_unit="seconds"), seconds))
    assert whole[7] == pytest.approx((4 * 2 + 2 * 4) / 6 * 5)


@pytest.mark.parametrize(
    ("unit", "seconds"),
    [("seconds", 1), ("minutes", 60), ("hours", 3600), ("days", 86400)],
    ids=lambda v: str(v),
)
def test_time_unit(clock, unit, seconds):
    mem = train(clock, RuntimeEstimator(time_unit=unit), [5] + [30] * 4)
    assert estimates(mem) == approx({k: 30.0 * (5 - k) / seconds for k in range(2, 6)})


class NoLength:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter([[i] for i in range(self.n)])


def test_epochs_advance_batch_by_batch_and_epoch_eval_is_included(clock):
    mem = train(
        clock,
        RuntimeEstimator(time_unit="seconds"),
        [30] + [3] * 9,
        "2ep",
        eval_every="1ep",
        eval_seconds={"eval": [6, 6]},
        loader=[[i] for i in range(5)],
    )
    # 10 batches in all; after epoch 1's eval, 1 of 2 evals is left.
    assert estimates(mem) == approx({k: 3.0 * (10 - k) + (6 if k > 5 else 0) for k in range(2, 11)})
    # Without a dataloader length, progress is known once the first epoch has ended.
    mem = train(
        clock, RuntimeEstimator(time_unit="seconds"), [30] + [3] * 9, "2ep", loader=NoLength(5)
    )
    assert estimates(mem) == approx({k: 3.0 * (10 - k) for k in range(7, 11)})


def test_a_new_max_duration_restarts_the_average_and_gaps_are_not_training(clock):
    est = RuntimeEstimator(time_unit="seconds")
    mem = InMemoryLogger()
    run = Run(max_duration="4ba", callbacks=[est], loggers=[mem])
    data = [[i] for i in range(4)]
    with run.fitting():
        for _, seconds in zip(run.train(data), [10, 2, 2, 2], strict=True):
            clock.now += seconds
    clock.now += 1000  # between fits
    for _ in run.eval([[0]]):  # standalone: not timed as part of training
        clock.now += 50
    run.state.max_duration = "8ba"
    with run.fitting():
        for _, seconds in zip(run.train(data), [5, 5, 5, 5], strict=True):
            clock.now += seconds
    run.close()
    assert estimates(mem) == approx({2: 4.0, 3: 2.0, 4: 0.0, 5: 15.0, 6: 10.0, 7: 5.0, 8: 0.0})


def test_no_max_duration_warns_once_and_logs_nothing(clock):
    mem = InMemoryLogger()
    run = Run(callbacks=[RuntimeEstimator()], loggers=[mem])

    def four_batches():
        with run:
            for _ in run.train([[i] for i in range(4)]):
                clock.now += 1

    with pytest.warns(ObsbusWarning, match="no max_duration") as record:
        four_batches()
    assert run.state.timestamp.batch == "4ba"
    assert sum(issubclass(w.category, ObsbusWarning) for w in record) == 1
    assert KEY not in mem.data


def test_under_a_trainer_floats_only_and_no_syncs():
    mem = InMemoryLogger()
    model = tiny_model()
    trainer = Trainer(
        model,
        regression_data(4),
        "2ep",
        loss_fn=F.mse_loss,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        eval_dataloader=regression_data(2, seed=1),
        callbacks=[RuntimeEstimator(log_interval="1ep")],
        loggers=[mem],
        device="cpu",
    )
    with SyncSpy() as spy:
        trainer.fit()
    trainer.close()
    assert spy.calls == []
    values = mem.data[KEY]
    assert [ts.batch.value for ts, _ in values] == [4, 8]
    assert all(isinstance(v, float) and v >= 0 for _, v in values)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"time_unit": "hrs"},
            ValueError,
            "RuntimeEstimator time_unit must be one of 'seconds', 'minutes', 'hours', 'days', got 'hrs'. Did you mean 'hours'?",
        ),
        (
            {"skip_batches": -1},
            ValueError,
            "RuntimeEstimator skip_batches must be a whole number >= 0, got -1.",
        ),
        (
            {"reset_interval": True},
            TypeError,
            "RuntimeEstimator reset_interval must be a whole number >= 0, got True.",
        ),
        (
            {"log_interval": "1dur"},
            ValueError,
            "is not supported: use a positive number of batches or epochs",
        ),
        ({"time_unit": None}, TypeError, "RuntimeEstimator time_unit must be one of 'seconds', 'minutes', 'hours', 'days', got None."),
    ],
    ids=["unit", "skip", "reset", "interval", "unit-type"],
)
def test_bad_arguments_are_refused_when_built(kwargs, error, match):
    import re

    with pytest.raises(error, match=re.escape(match)):
        RuntimeEstimator(**kwargs)


@pytest.mark.parametrize("unit", ["seconds", "minutes", "hours", "days"])
def test_time_unit_is_logged_as_a_hyperparameter_at_init(clock, unit):
    """Composer's ``RuntimeEstimator.init`` (``composer/callbacks/runtime_estimator.py``) logs
    ``{'time/remaining_estimate_unit': time_unit}`` with ``log_hyperparameters``."""
    mem = InMemoryLogger()
    with Run(max_duration="2ba", callbacks=[RuntimeEstimator(time_unit=unit)],
             loggers=[mem]) as run:
        assert mem.hyperparameters["time/remaining_estimate_unit"] == unit  # at init already
        for _ in run.train([[1], [2]]):
            clock.now += 1.0
    assert mem.hyperparameters["time/remaining_estimate_unit"] == unit
