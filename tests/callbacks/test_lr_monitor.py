"""LRMonitor: the learning rate of every group of every optimizer, as the scheduler sets it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from obsbus import Run, Trainer
from obsbus.callbacks.lr_monitor import LRMonitor
from obsbus.loggers import InMemoryLogger

from ..helpers import regression_data, tiny_model
from ..test_values import SyncsPerBatch, SyncSpy


def lr_series(mem, key):
    series = mem.get_timeseries(key)
    return dict(zip(series["step"], series[key], strict=True))


def test_follows_two_schedulers_over_a_trainer_run():
    model = tiny_model()
    sgd = torch.optim.SGD(model[0].parameters(), lr=0.1)
    adamw = torch.optim.AdamW(model[2].parameters(), lr=0.01)
    step = torch.optim.lr_scheduler.StepLR(sgd, step_size=2, gamma=0.5)
    warmup = torch.optim.lr_scheduler.LambdaLR(adamw, lambda k: min(1.0, (k + 1) / 4))
    mem = InMemoryLogger()
    with Trainer(
        model,
        regression_data(3),
        "2ep",
        optimizers=[sgd, adamw],
        schedulers=[step, warmup],
        loss_fn=F.mse_loss,
        callbacks=[LRMonitor()],
        loggers=[mem],
        device="cpu",
    ) as trainer:
        trainer.fit()
    # At batch_end of batch k each scheduler has stepped k times (after optimizer.step()).
    assert lr_series(mem, "lr-SGD/group0") == {k: 0.1 * 0.5 ** (k // 2) for k in range(1, 7)}
    assert lr_series(mem, "lr-AdamW/group0") == {
        k: pytest.approx(0.01 * min(1.0, (k + 1) / 4), rel=1e-12) for k in range(1, 7)
    }
    assert not any(
        key.startswith("lr-") and key not in ("lr-SGD/group0", "lr-AdamW/group0")
        for key in mem.data
    )


def test_param_groups_and_repeated_classes_get_their_own_keys():
    model = tiny_model()
    first = torch.optim.SGD(
        [{"params": model[0].parameters(), "lr": 0.1}, {"params": model[2].weight, "lr": 0.2}]
    )
    second = torch.optim.SGD([model[2].bias], lr=0.3)
    mem = InMemoryLogger()
    with Run(
        model=model,
        optimizers=[first, second],
        max_duration="1ba",
        callbacks=[LRMonitor()],
        loggers=[mem],
    ) as run:
        for _ in run.train([[0]]):
            pass
    assert {k: v for k, v in mem.most_recent_values.items() if k.startswith("lr-")} == {
        "lr-SGD/group0": 0.1,
        "lr-SGD/group1": 0.2,
        "lr-SGD-1/group0": 0.3,
    }


def test_a_hand_written_loop_that_sets_lr_itself():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    mem = InMemoryLogger()
    with Run(
        model=model, optimizers=opt, max_duration="4ba", callbacks=[LRMonitor()], loggers=[mem]
    ) as run:
        for i, (x, y) in enumerate(run.train(regression_data(4))):
            for group in opt.param_groups:  # nanoGPT style: set, then step
                group["lr"] = 0.001 * (i + 1)
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
            opt.step()
            opt.zero_grad()
    assert lr_series(mem, "lr-SGD/group0") == {k: 0.001 * k for k in range(1, 5)}


def test_only_at_the_interval():
    model = tiny_model()
    mem = InMemoryLogger()
    with Trainer(
        model,
        regression_data(5),
        "2ep",
        loss_fn=F.mse_loss,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=[LRMonitor("3ba"), LRMonitor("1ep")],
        loggers=[mem],
        device="cpu",
    ) as trainer:
        trainer.fit()
    # "3ba" logs at batches 3, 6, 9; "1ep" at the ends of epochs 1 and 2 (batches 5 and 10).
    assert mem.get_timeseries("lr-SGD/group0")["step"] == [3, 5, 6, 9, 10]


def test_a_tensor_lr_is_logged_as_a_snapshot_tensor():
    model = tiny_model()
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    mem = InMemoryLogger()
    monitor = LRMonitor()
    with Run(
        model=model, optimizers=opt, max_duration="1ba", callbacks=[monitor], loggers=[mem]
    ) as run:
        for _ in run.train([[0]]):
            pass
    logged = mem.most_recent_values["lr-Adam/group0"]
    assert isinstance(logged, torch.Tensor)
    opt.param_groups[0]["lr"].mul_(0.5)  # a scheduler changing it in place later
    with SyncSpy() as spy:  # Adam's own step syncs; the monitor does not
        monitor.batch_end(run.state, run.logger)
    assert spy.calls == []
    assert mem.get_timeseries("lr-Adam/group0")["lr-Adam/group0"] == [
        pytest.approx(0.01),
        pytest.approx(0.005),
    ]


def test_no_syncs_and_no_optimizers_logs_nothing():
    spy = SyncSpy()
    recorder = SyncsPerBatch(spy)
    model = tiny_model()
    mem = InMemoryLogger()
    trainer = Trainer(
        model,
        regression_data(4),
        "1ep",
        loss_fn=F.mse_loss,
        optimizers=torch.optim.SGD(model.parameters(), lr=1e-3),
        callbacks=[LRMonitor(), recorder],
        loggers=[mem],
        device="cpu",
    )
    with spy:
        trainer.fit()
    trainer.close()
    assert recorder.per_batch == {k: [] for k in range(1, 5)}
    assert len(mem.data["lr-SGD/group0"]) == 4

    empty = InMemoryLogger()
    with Run(max_duration="2ba", callbacks=[LRMonitor()], loggers=[empty]) as run:
        for _ in run.train([[0], [1]]):
            pass
    assert not any(key.startswith("lr-") for key in empty.data)


@pytest.mark.parametrize("interval", ["5sp", "0ba", "2dur"], ids=["samples", "zero", "dur"])
def test_bad_interval_is_refused_when_built(interval):
    with pytest.raises(
        ValueError,
        match=r"LRMonitor log_interval '.*' is not supported: use a positive number of batches or epochs",
    ):
        LRMonitor(interval)
