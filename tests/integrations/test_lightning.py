"""The Lightning bridge under a real ``lightning.pytorch.Trainer`` on the CPU."""

from __future__ import annotations

import logging
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Event, LoggerDestination
from obsbus.callbacks import NaNMonitor
from obsbus.callbacks.nan_monitor import NonFiniteLossError
from obsbus.errors import MissingExtraError
from obsbus.integrations import _lightning_host
from obsbus.loggers import FileLogger, InMemoryLogger

from ..helpers import EventCounter, regression_data
from ..test_values import SyncSpy

pl = pytest.importorskip("lightning.pytorch")
from obsbus.integrations.lightning import ObsbusCallback, ObsbusLogger  # noqa: E402

BATCHES, ACCUM, EPOCHS, VAL_BATCHES = 6, 2, 2, 3


class Tiny(pl.LightningModule):
    def __init__(self, fail_at: int | None = None, log: bool = True, nan_at: int | None = None):
        super().__init__()
        self.log_values = log
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, 1)
        self.losses: list[torch.Tensor] = []
        self.fail_at, self.nan_at = fail_at, nan_at

    def training_step(self, batch, batch_idx):
        if self.fail_at is not None and len(self.losses) == self.fail_at:
            raise RuntimeError("boom")
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        if len(self.losses) == self.nan_at:
            loss = loss * float("nan")
        self.losses.append(loss.detach().clone())
        if self.log_values:
            self.log("custom/train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _loader(batches, seed=0):
    # batch_size=None: the ready-made batches as they are.
    return torch.utils.data.DataLoader(regression_data(batches, seed=seed), batch_size=None)


def fit(bus, module=None, logger=False, extra=(), **kwargs):
    module = module or Tiny()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUM,
        logger=logger,
        callbacks=[bus, *extra],
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        **{"num_sanity_val_steps": 0, "enable_checkpointing": False, **kwargs},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's "few workers" advice
        trainer.fit(module, _loader(BATCHES), _loader(VAL_BATCHES, seed=1))
    return trainer, module


@pytest.fixture(autouse=True)
def _quiet_lightning():
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)


def test_events_count_optimizer_steps_and_loss_is_undivided():
    counter, memory = EventCounter(), InMemoryLogger()
    bus = ObsbusCallback(callbacks=[counter], loggers=[memory], strict=True)
    trainer, module = fit(bus)
    steps = EPOCHS * BATCHES // ACCUM
    micro = EPOCHS * BATCHES
    expected = {
        Event.INIT: 1,
        Event.BEFORE_LOAD: 1,
        Event.AFTER_LOAD: 1,
        Event.FIT_START: 1,
        Event.ITERATION_START: 1,
        Event.EPOCH_START: EPOCHS,
        Event.EPOCH_END: EPOCHS,
        Event.BATCH_START: steps,
        Event.BEFORE_TRAIN_BATCH: steps,
        Event.BEFORE_BACKWARD: micro,
        Event.AFTER_BACKWARD: micro,
        Event.AFTER_TRAIN_BATCH: steps,
        Event.BATCH_END: steps,
        Event.EVAL_BEFORE_ALL: EPOCHS,
        Event.EVAL_START: EPOCHS,
        Event.EVAL_BATCH_START: EPOCHS * VAL_BATCHES,
        Event.EVAL_BATCH_END: EPOCHS * VAL_BATCHES,
        Event.EVAL_END: EPOCHS,
        Event.EVAL_AFTER_ALL: EPOCHS,
        Event.FIT_END: 1,
    }
    assert dict(counter.counts) == expected
    assert counter.order[:6] == [
        Event.INIT,
        Event.BEFORE_LOAD,
        Event.AFTER_LOAD,
        Event.FIT_START,
        Event.ITERATION_START,
        Event.EPOCH_START,
    ]
    assert counter.order[6:12] == [
        Event.BATCH_START,
        Event.BEFORE_TRAIN_BATCH,
        Event.BEFORE_BACKWARD,
        Event.AFTER_BACKWARD,
        Event.BEFORE_BACKWARD,
        Event.AFTER_BACKWARD,
    ]
    ts = bus.state.timestamp
    assert (ts.batch.value, ts.epoch.value, ts.sample.value) == (steps, EPOCHS, micro * 8)
    assert trainer.global_step == steps
    series = memory.get_timeseries("loss/train/total")
    assert series["batch"] == list(range(1, steps + 1))
    want = torch.stack(module.losses).view(-1, ACCUM).mean(dim=1)
    assert torch.allclose(torch.tensor(series["loss/train/total"]), want)
    assert isinstance(bus.state.loss, torch.Tensor) and not bus.state.loss.requires_grad
    assert set(bus.state.eval_metrics["eval"]) == {"val_loss"}
    assert bus.engine.closed


def test_obsbus_logger_gets_self_log_values_at_obsbus_steps():
    memory = InMemoryLogger()
    bus = ObsbusCallback(loggers=[memory], hparams={"lr": 0.05})
    _, module = fit(bus, logger=bus.lightning_logger)
    series = memory.get_timeseries("custom/train_loss")
    steps = EPOCHS * BATCHES // ACCUM
    # Lightning logs a step's values once per optimizer step, the last microbatch's value.
    assert series["batch"] == list(range(1, steps + 1))
    assert series["custom/train_loss"] == pytest.approx([float(v) for v in module.losses[1::2]])
    val = memory.get_timeseries("val_loss")
    assert val["batch"] == [BATCHES // ACCUM, steps]
    assert "epoch" not in memory.most_recent_values
    assert memory.hyperparameters["lr"] == 0.05


def test_exception_flushes_file_logger(tmp_path):
    path = tmp_path / "metrics.jsonl"
    counter = EventCounter()
    bus = ObsbusCallback(callbacks=[counter], loggers=[FileLogger(str(path), flush_interval=1000)])
    with pytest.raises(RuntimeError, match="boom"):
        fit(bus, module=Tiny(fail_at=5))
    assert counter.counts[Event.EXCEPTION] == 1 and bus.engine.closed
    assert isinstance(bus.state.exception, RuntimeError)
    text = path.read_text()
    assert text.count("loss/train/total") == 2  # the two optimizer steps before the raise


class Broken(LoggerDestination):
    def log_metrics(self, metrics, step=None):
        raise OSError("disk full")


def test_a_raising_destination_does_not_stop_training():
    memory = InMemoryLogger()
    bus = ObsbusCallback(loggers=[Broken(), memory])
    trainer, _ = fit(bus)
    assert trainer.global_step == EPOCHS * BATCHES // ACCUM
    assert len(memory.get_timeseries("loss/train/total")["batch"]) == trainer.global_step


class StopAt(Callback):
    def batch_end(self, state, logger):
        if state.timestamp.batch.value == 2:
            state.stop_training()


def test_stop_training_stops_lightning():
    trainer, _ = fit(ObsbusCallback(callbacks=[StopAt()]))
    assert trainer.global_step == 2


def test_nan_monitor_finds_the_bad_step_and_stops_lightning():
    memory = InMemoryLogger()
    monitor = NaNMonitor(check_interval="1ba", on_nan="stop")
    # Microbatch 5 (0-based) is the second of optimizer step 3.
    trainer, _ = fit(ObsbusCallback(callbacks=[monitor], loggers=[memory]), Tiny(nan_at=5))
    assert trainer.global_step == 3
    losses = memory.get_timeseries("loss/train/total")["loss/train/total"]
    assert len(losses) == 3 and math.isnan(losses[2]) and not math.isnan(losses[1])


def test_nan_monitor_raises_through_lightning_and_the_bus_records_it():
    counter = EventCounter()
    bus = ObsbusCallback(callbacks=[NaNMonitor(check_interval="1ba"), counter])
    with pytest.raises(NonFiniteLossError, match="batch 3"):
        fit(bus, Tiny(nan_at=5))
    assert counter.counts[Event.EXCEPTION] == 1 and counter.counts[Event.BATCH_END] == 2


def test_second_fit_rebuilds_the_bus():
    counter = EventCounter()
    bus = ObsbusCallback(callbacks=[counter])
    fit(bus)
    first = bus.engine
    fit(bus)
    assert bus.engine is not first and counter.counts[Event.FIT_END] == 2
    assert bus.state.timestamp.batch.value == EPOCHS * BATCHES // ACCUM


def test_validate_alone_fires_the_standalone_eval_events():
    counter = EventCounter()
    bus = ObsbusCallback(callbacks=[counter])
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        callbacks=[bus],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's "few workers" advice
        trainer.validate(Tiny(), _loader(VAL_BATCHES), verbose=False)
    assert counter.order == [
        Event.INIT,
        Event.BEFORE_LOAD,
        Event.AFTER_LOAD,
        Event.EVAL_STANDALONE_START,
        Event.EVAL_START,
        *[Event.EVAL_BATCH_START, Event.EVAL_BATCH_END] * VAL_BATCHES,
        Event.EVAL_END,
        Event.EVAL_STANDALONE_END,
    ]
    assert set(bus.state.eval_metrics["eval"]) == {"val_loss"} and bus.engine.closed


def test_a_lightning_checkpoint_fires_batch_checkpoint(tmp_path):
    counter = EventCounter()
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    fit(ObsbusCallback(callbacks=[counter]), extra=[saver], enable_checkpointing=True)
    assert counter.counts[Event.BATCH_CHECKPOINT] == len(list(tmp_path.glob("*.ckpt"))) == 3


def test_bad_arguments_say_what_is_accepted():
    with pytest.raises(TypeError, match="LoggerDestination"):
        ObsbusCallback(loggers=[EventCounter()])
    with pytest.raises(TypeError, match="ObsbusCallback"):
        ObsbusLogger(object())


def test_import_falls_back_to_pytorch_lightning():
    seen = []

    def only_standalone(name):
        seen.append(name)
        if name == "lightning.pytorch":
            raise ModuleNotFoundError("No module named 'lightning'", name="lightning")
        return pl

    assert _lightning_host.import_lightning(only_standalone) is pl
    assert seen == ["lightning.pytorch", "pytorch_lightning"]


def test_import_without_lightning_names_the_extra():
    def nothing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name.split(".")[0])

    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[lightning\]'"):
        _lightning_host.import_lightning(nothing)


def test_a_broken_install_is_not_hidden():
    def broken(name):
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")

    with pytest.raises(ModuleNotFoundError, match="numpy"):
        _lightning_host.import_lightning(broken)


def test_sanity_check_fires_no_eval_events():
    counter = EventCounter()
    fit(ObsbusCallback(callbacks=[counter]), num_sanity_val_steps=2)
    assert counter.counts[Event.EVAL_START] == EPOCHS
    assert counter.counts[Event.EVAL_BATCH_START] == EPOCHS * VAL_BATCHES


class SyncsPerStep(pl.Callback):
    """Host transfers per optimizer step, read after the bridge's own hooks."""

    def __init__(self, spy):
        self.spy, self.per_step, self._seen = spy, {}, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if (batch_idx + 1) % ACCUM == 0:
            self.per_step[trainer.global_step] = self.spy.calls[self._seen :]
            self._seen = len(self.spy.calls)


def _syncs(bus):
    spy = SyncSpy()
    recorder = SyncsPerStep(spy)
    with spy:
        fit(bus, module=Tiny(log=False), extra=[recorder], limit_val_batches=0)
    return recorder.per_step


def test_the_bridge_adds_no_host_sync_on_steps_that_do_not_log(monkeypatch):
    from obsbus.callbacks import (
        LRMonitor,
        MemoryMonitor,
        NaNMonitor,
        OptimizerMonitor,
        SpeedMonitor,
    )

    synchronize_calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: synchronize_calls.append(a))
    every = "4ba"
    monitors = [
        SpeedMonitor(window_size=2, log_interval=every),
        MemoryMonitor(log_interval=every),
        NaNMonitor(check_interval=every),
        LRMonitor(log_interval=every),
        OptimizerMonitor(log_interval=every),
    ]
    memory = InMemoryLogger()
    baseline = _syncs(pl.Callback())  # Lightning alone: its own transfers, if any
    bridged = _syncs(ObsbusCallback(callbacks=monitors, loggers=[memory]))
    steps = EPOCHS * BATCHES // ACCUM
    assert set(bridged) == set(range(1, steps + 1)) == set(baseline)
    assert bridged[4] != baseline[4]  # the monitors did read values at their interval
    quiet = [s for s in bridged if s != 4]
    assert {s: bridged[s] for s in quiet} == {s: baseline[s] for s in quiet}
    assert synchronize_calls == []
    for key in ("throughput/samples_per_sec", "l2_norm/grad/global", "lr-SGD/group0"):
        assert memory.get_timeseries(key)["batch"][-1] == 4, key
