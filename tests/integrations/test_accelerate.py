"""Accelerate: ``Run(backward=accelerator.backward)`` and ``ObsbusTracker`` under ``log_with``."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
import torch.nn.functional as F

from obsbus import Run
from obsbus.callbacks import NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.errors import MissingExtraError
from obsbus.event import Event
from obsbus.loggers import FileLogger, InMemoryLogger

from ..callbacks.test_sync_free import SyncsPerBatch
from ..helpers import EventCounter, regression_data, tiny_model
from ..test_values import SyncSpy

accelerate = pytest.importorskip("accelerate")
from accelerate.state import AcceleratorState, GradientState, PartialState  # noqa: E402

from obsbus.integrations import accelerate as bridge  # noqa: E402
from obsbus.integrations.accelerate import ObsbusTracker  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_accelerate():
    """Accelerate keeps its state in process-wide singletons; each test starts fresh."""
    saved = dict(os.environ)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()
    os.environ.clear()
    os.environ.update(saved)


def _loop(run, accelerator, model, opt, data):
    for x, y in run.train(data):
        with accelerator.accumulate(model):
            loss = run.loss(F.mse_loss, run.forward(model, x), y)
            run.backward(loss)
            opt.step()
            opt.zero_grad()


def test_accelerate_loop_fires_the_events_and_logs_its_losses():
    accelerator = accelerate.Accelerator(cpu=True)
    model = tiny_model()
    model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))
    counter, mem = EventCounter(), InMemoryLogger()
    data = regression_data(3)
    with Run(model=model, optimizers=opt, max_duration="2ep", callbacks=[counter], loggers=[mem],
             backward=accelerator.backward) as run:
        _loop(run, accelerator, model, opt, data)
    for event in (Event.BATCH_START, Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD, Event.BATCH_END):
        assert counter.counts[event] == 6, event
    order = counter.order
    start = order.index(Event.BEFORE_BACKWARD)
    assert order[start:start + 2] == [Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD]
    series = mem.get_timeseries("loss/train/total")
    assert series["batch"] == list(range(1, 7))
    assert sum(series["loss/train/total"][3:]) < sum(series["loss/train/total"][:3])


def test_accelerator_backward_is_what_runs():
    # Accelerate divides the loss by its accumulation steps in backward; loss.backward() would not.
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = accelerator.prepare(tiny_model())
    x, y = regression_data(1)[0]
    with Run(model=model, max_duration="1ba", backward=accelerator.backward) as run:
        for _ in run.train([(x, y)]):
            loss = run.loss(F.mse_loss, run.forward(model, x), y)
            run.backward(loss, retain_graph=True)
            halved = [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
            loss.backward()
    assert all(torch.allclose(2 * h, p.grad) for h, p in zip(halved, model.parameters(), strict=True))
    # The logged loss is the loss the loop computed, not Accelerate's divided one.
    assert run.state.loss.item() == pytest.approx(loss.item())


def test_tracker_on_a_run_sends_accelerator_log_to_its_destinations(tmp_path):
    mem = InMemoryLogger()
    with Run(max_duration="4ba", loggers=[mem, FileLogger(jsonl_filename="m.jsonl")],
             run_folder=tmp_path / "run") as run:
        tracker = ObsbusTracker(run)
        accelerator = accelerate.Accelerator(cpu=True, log_with=[tracker])
        accelerator.init_trackers("proj", config={"lr": 0.05, "opt": "sgd"})
        assert accelerator.get_tracker("obsbus", unwrap=True) is run
        for _ in run.train([[1, 2]] * 4):
            batch = run.state.timestamp.batch.value
            accelerator.log({"acc/value": torch.tensor(batch * 1.5)}, step=100 + batch)
            accelerator.log({"acc/no_step": batch, "acc/note": f"b{batch}"})
        accelerator.end_training()
        assert not run.engine.closed  # the Run owns its destinations; with-exit closes them
    assert mem.hyperparameters == {"lr": 0.05, "opt": "sgd"}
    series = mem.get_timeseries("acc/value")
    assert series["step"] == [100, 101, 102, 103]
    assert series["acc/value"] == [0.0, 1.5, 3.0, 4.5]
    # step=None: the run's current batch (batches counted so far)
    assert mem.get_timeseries("acc/no_step")["step"] == [0, 1, 2, 3]
    assert mem.traces == {"acc/note": "b3"}
    rows = [json.loads(line) for line in (tmp_path / "run" / "m.jsonl").read_text().splitlines()]
    at = {r["step"]: r["acc/value"] for r in rows if "acc/value" in r}
    assert at == {100: 0.0, 101: 1.5, 102: 3.0, 103: 4.5}


def test_tracker_with_its_own_loggers_flushes_them_at_end_training(tmp_path):
    mem = InMemoryLogger()
    tracker = ObsbusTracker(loggers=[mem, FileLogger(jsonl_filename="m.jsonl")],
                            run_name="acc")
    accelerator = accelerate.Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("proj")
    accelerator.log({"loss": 0.25}, step=5)
    accelerator.log({"loss": 0.125})  # no step: the last one given
    accelerator.end_training()
    assert tracker.tracker.engine.closed
    assert mem.get_timeseries("loss")["step"] == [5, 5]
    (written,) = tmp_path.rglob("m.jsonl")  # in the tracker's own run folder
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == [(5, 0.25), (5, 0.125)]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, ValueError, "exactly one of them, got run=None and loggers=None"),
        ({"run": "my-run"}, TypeError, "run must be an obsbus Run (or None, with loggers=), got 'my-run'"),
        ({"loggers": [], "run_name": 3}, TypeError, "ObsbusTracker run_name must be a non-empty str, got 3."),
        ({"run": None, "loggers": [], "run_name": ""}, ValueError, "run_name must be a non-empty str, got ''"),
    ],
    ids=["neither", "not-a-run", "run-name-type", "run-name-empty"],
)
def test_tracker_refuses_bad_input(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        ObsbusTracker(**kwargs)


def test_tracker_without_accelerate_names_the_extra(monkeypatch):
    monkeypatch.setattr(bridge, "_HAVE_ACCELERATE", False)
    with pytest.raises(MissingExtraError, match=re.escape("pip install 'obsbus[accelerate]'")):
        ObsbusTracker(loggers=[])


def test_accelerate_backward_and_tracker_add_no_sync_on_batches_that_do_not_log(monkeypatch):
    every, batches = "5ba", 10
    spy = SyncSpy()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: spy.calls.append("synchronize"))
    recorder, mem = SyncsPerBatch(spy), InMemoryLogger()
    monitors = [SpeedMonitor(window_size=2, log_interval=every), NaNMonitor(check_interval=every),
                OptimizerMonitor(log_interval=every)]
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with spy, Run(model=model, optimizers=opt, max_duration=f"{batches}ba",
                  callbacks=[*monitors, recorder],
                  backward=lambda loss, **kw: accelerator.backward(loss, **kw),
                  loggers=[mem, FileLogger(log_interval=every, jsonl_filename="m.jsonl")]) as run:
        # The Run comes first, as the tracker needs it; the Accelerator then takes the tracker.
        accelerator = accelerate.Accelerator(cpu=True, log_with=[ObsbusTracker(run)])
        model, opt = accelerator.prepare(model, opt)
        accelerator.init_trackers("proj")
        for x, y in run.train(regression_data(batches)):
            opt.zero_grad()
            loss = run.loss(F.mse_loss, run.forward(model, x), y)
            run.backward(loss)
            opt.step()
            accelerator.log({"acc/loss": loss.detach()})  # a tensor, every batch
    assert set(recorder.per_batch) == set(range(1, batches + 1))
    quiet = {b: c for b, c in recorder.per_batch.items() if b % 5}
    assert all(c == [] for c in quiet.values()), {b: c for b, c in quiet.items() if c}
    assert mem.get_timeseries("acc/loss")["step"] == list(range(batches))
