"""Lightning Fabric through ``Run(backward=fabric.backward)``: events, loss, no sync."""

from __future__ import annotations

import os
import re

import pytest
import torch
import torch.nn.functional as F

from obsbus import Run
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.event import Event
from obsbus.loggers import ConsoleLogger, InMemoryLogger

from ..callbacks.test_sync_free import SyncsPerBatch
from ..helpers import EventCounter, regression_data, tiny_model
from ..test_values import SyncSpy

fabric_module = pytest.importorskip("lightning.fabric")

PER_BATCH = (
    Event.BEFORE_DATALOADER, Event.AFTER_DATALOADER, Event.BATCH_START, Event.BEFORE_TRAIN_BATCH,
    Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS,
    Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD, Event.AFTER_TRAIN_BATCH, Event.BATCH_END,
    Event.BATCH_CHECKPOINT,
)


@pytest.fixture(autouse=True)
def _restore_environ():
    """Lightning sets process-wide variables on import and setup; give them back."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _fabric(model, lr=0.05):
    fabric = fabric_module.Fabric(accelerator="cpu", devices=1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model, opt = fabric.setup(model, opt)
    return fabric, model, opt


def test_fabric_loop_fires_the_events_and_logs_its_losses():
    torch.manual_seed(0)
    fabric, model, opt = _fabric(tiny_model())
    data = regression_data(4)
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(
        [(x[i], y[i]) for x, y in data for i in range(len(x))], batch_size=8))
    counter, mem = EventCounter(), InMemoryLogger()
    seen = []

    def backward(loss, **kwargs):  # fabric.backward, and a record that Run called it with the loss
        seen.append(loss)
        fabric.backward(loss, **kwargs)

    losses = []
    with Run(model=model, optimizers=opt, max_duration="2ep", callbacks=[counter], loggers=[mem],
             backward=backward) as run:
        for x, y in run.train(loader):
            opt.zero_grad()
            loss = run.loss(F.mse_loss, run.forward(model, x), y)
            run.backward(loss)
            assert all(p.grad is not None for p in model.parameters())
            opt.step()
            losses.append(loss)
    assert len(seen) == 8 and all(a is b for a, b in zip(seen, losses, strict=True))
    assert run.state.timestamp.batch.value == 8
    for event in PER_BATCH[1:]:
        assert counter.counts[event] == 8, event
    assert counter.counts[Event.BEFORE_DATALOADER] == 8 + 2  # once more per epoch: its end
    assert counter.counts[Event.EPOCH_END] == 2 and counter.counts[Event.FIT_END] == 1
    first = counter.order[counter.order.index(Event.BEFORE_DATALOADER):]
    assert tuple(first[:len(PER_BATCH)]) == PER_BATCH
    series = mem.get_timeseries("loss/train/total")
    assert series["batch"] == list(range(1, 9))
    assert series["loss/train/total"] == pytest.approx([v.item() for v in losses])
    assert sum(losses[4:]) < sum(losses[:4])  # fabric's backward really trained the model


def test_backward_kwargs_reach_the_framework_backward():
    fabric, model, opt = _fabric(tiny_model())
    x, y = regression_data(1)[0]
    with Run(model=model, optimizers=opt, max_duration="1ba", backward=fabric.backward) as run:
        for _ in run.train([(x, y)]):
            loss = run.loss(F.mse_loss, run.forward(model, x), y)
            run.backward(loss, retain_graph=True)
            first = [p.grad.clone() for p in model.parameters()]
            run.backward()  # state.loss, and the graph is still there
    assert all(torch.allclose(p.grad, 2 * g) for p, g in zip(model.parameters(), first, strict=True))


@pytest.mark.parametrize("bad", [0, "fabric.backward", [print]], ids=["int", "str", "list"])
def test_run_backward_must_be_callable(bad):
    with pytest.raises(TypeError, match=re.escape(f"Run backward must be a function or None, got {bad!r}.")):
        Run(backward=bad)


def test_fabric_backward_adds_no_sync_on_batches_that_do_not_log(monkeypatch):
    every, batches = "5ba", 10
    spy = SyncSpy()
    synchronize_calls = []
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda *a, **k: synchronize_calls.append(a) or spy.calls.append("synchronize"))
    fabric, model, opt = _fabric(tiny_model(), lr=0.01)
    recorder, mem = SyncsPerBatch(spy), InMemoryLogger()
    monitors = [SpeedMonitor(window_size=2, log_interval=every), MemoryMonitor(log_interval=every),
                NaNMonitor(check_interval=every), LRMonitor(log_interval=every),
                OptimizerMonitor(log_interval=every)]
    data = regression_data(batches)
    with spy, Run(model=model, optimizers=opt, max_duration=f"{batches}ba",
                  callbacks=[*monitors, recorder], backward=fabric.backward,
                  loggers=[mem, ConsoleLogger(log_interval=every, stream="stdout")]) as run:
        for x, y in run.train(data):
            opt.zero_grad()
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
            opt.step()
    assert set(recorder.per_batch) == set(range(1, batches + 1))
    quiet = {b: c for b, c in recorder.per_batch.items() if b % 5}
    assert all(c == [] for c in quiet.values()), {b: c for b, c in quiet.items() if c}
    assert synchronize_calls == []
    assert mem.get_timeseries("l2_norm/grad/global")["batch"][-1] == batches
