"""ObsbusCallback under a real transformers.Trainer: a tiny GPT-2 on the CPU, no hub."""

from __future__ import annotations

import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from obsbus import Callback, Event, LoggerDestination  # noqa: E402
from obsbus.callbacks import NaNMonitor  # noqa: E402
from obsbus.integrations.transformers import ObsbusCallback  # noqa: E402
from obsbus.loggers import FileLogger, InMemoryLogger  # noqa: E402

from ..helpers import EventCounter  # noqa: E402
from ..test_values import SyncSpy  # noqa: E402

VOCAB, SEQ = 64, 8


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=gen)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def make_trainer(tmp_path, callbacks, *, trainer_cls=Trainer, n=24, eval_n=8, **overrides):
    """24 samples, batch 4, accumulation 2: 3 optimizer steps per epoch."""
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=16,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    settings = dict(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        learning_rate=1e-3,
        logging_steps=1,
        logging_nan_inf_filter=False,
        eval_strategy="epoch" if eval_n else "no",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    settings.update(overrides)
    trainer = trainer_cls(
        model=model,
        args=TrainingArguments(**settings),
        train_dataset=Tokens(n),
        eval_dataset=Tokens(eval_n, seed=1) if eval_n else None,
        callbacks=callbacks,
    )
    return trainer


def test_event_counts_loss_and_eval(tmp_path):
    counter, memory = EventCounter(), InMemoryLogger()
    cb = ObsbusCallback(callbacks=[counter], loggers=[memory], run_folder=tmp_path / "run")
    trainer = cb.wrap(
        make_trainer(tmp_path, [cb], save_strategy="steps", save_steps=3)
    )
    trainer.train()
    steps, micro = 6, 12
    expected = {
        Event.INIT: 1, Event.BEFORE_LOAD: 1, Event.AFTER_LOAD: 1, Event.FIT_START: 1,
        Event.ITERATION_START: 1, Event.EPOCH_START: 2, Event.BATCH_START: steps,
        Event.BEFORE_TRAIN_BATCH: steps, Event.AFTER_LOSS: micro, Event.AFTER_BACKWARD: micro,
        Event.AFTER_TRAIN_BATCH: steps, Event.BATCH_END: steps, Event.BATCH_CHECKPOINT: 2,
        Event.EVAL_END: 2, Event.EPOCH_END: 2, Event.FIT_END: 1,
    }
    assert dict(counter.counts) == expected
    assert counter.order[:6] == [Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD,
                                 Event.FIT_START, Event.ITERATION_START, Event.EPOCH_START]
    assert counter.order[-1] is Event.FIT_END
    assert cb.run.engine.closed
    ts = cb.run.state.timestamp
    assert (ts.batch.value, ts.epoch.value, ts.sample.value, ts.token.value) == (
        6, 2, 48, 48 * SEQ)
    # The loss series is HF's own logged loss, step by step.
    hf = {row["step"]: row["loss"] for row in trainer.state.log_history if "loss" in row}
    ours = memory.get_timeseries("loss/train/total")
    assert ours["step"] == ours["batch"] == list(range(1, steps + 1)) == sorted(hf)
    for step, value in zip(ours["step"], ours["loss/train/total"], strict=True):
        assert value == pytest.approx(hf[step], abs=1e-4), step
    assert memory.get_timeseries("hf/loss")["step"] == list(range(1, steps + 1))
    assert len(memory.get_timeseries("hf/grad_norm")["step"]) == steps
    assert memory.get_timeseries("hf/learning_rate")["step"][0] == 1
    assert cb.run.state.optimizers[0] is trainer.optimizer.optimizer  # Accelerate's, unwrapped
    evals = memory.get_timeseries("metrics/eval/loss")
    hf_eval = [row["eval_loss"] for row in trainer.state.log_history if "eval_loss" in row]
    assert evals["metrics/eval/loss"] == pytest.approx(hf_eval) and evals["step"] == [3, 6]
    assert cb.run.state.eval_metrics["eval"]["loss"] == pytest.approx(hf_eval[-1])


def test_several_eval_datasets_keep_their_own_labels(tmp_path):
    counter, memory = EventCounter(), InMemoryLogger()
    cb = ObsbusCallback(callbacks=[counter], loggers=[memory], log_hf_logs=False)
    trainer = make_trainer(tmp_path, [cb], num_train_epochs=1)
    trainer.eval_dataset = {"val": Tokens(8, seed=1), "test": Tokens(4, seed=2)}
    cb.wrap(trainer).train()
    hf = trainer.state.log_history
    for name in ("val", "test"):
        want = [row[f"eval_{name}_loss"] for row in hf if f"eval_{name}_loss" in row]
        got = memory.get_timeseries(f"metrics/{name}/loss")
        assert got[f"metrics/{name}/loss"] == pytest.approx(want) and got["step"] == [3]
        assert cb.run.state.eval_metrics[name]["loss"] == pytest.approx(want[-1])
    assert "eval" not in cb.run.state.eval_metrics
    assert not [k for k in memory.data if k.startswith("metrics/eval/")]
    assert counter.counts[Event.EVAL_END] == 2


class LossSeen(Callback):
    """Whether state.loss still carries the step's autograd graph, event by event."""

    def __init__(self):
        self.attached = {}

    def run_event(self, event, state, logger):
        if event in (Event.AFTER_LOSS, Event.AFTER_BACKWARD, Event.BATCH_END):
            self.attached.setdefault(event, set()).add(bool(state.loss.requires_grad))


def test_the_step_graph_is_not_kept_in_state_after_the_loss(tmp_path):
    # The attached loss in state.loss would keep the whole autograd graph alive until
    # batch_end (~80 us a step to free there, bench_bridges.py): only after_loss sees it.
    seen = LossSeen()
    cb = ObsbusCallback(callbacks=[seen], loggers=[InMemoryLogger()], log_hf_logs=False)
    cb.wrap(make_trainer(tmp_path, [cb], eval_n=0, num_train_epochs=1)).train()
    assert seen.attached == {Event.AFTER_LOSS: {True}, Event.AFTER_BACKWARD: {False},
                             Event.BATCH_END: {False}}


def test_hf_token_count_is_used_when_tracked(tmp_path):
    memory = InMemoryLogger()
    cb = ObsbusCallback(loggers=[memory], log_hf_logs=False)
    trainer = cb.wrap(make_trainer(tmp_path, [cb], eval_n=0, num_train_epochs=1,
                                   include_num_input_tokens_seen="all"))
    trainer.train()
    assert cb.run.state.timestamp.token.value == trainer.state.num_input_tokens_seen == 24 * SEQ
    assert memory.get_timeseries("loss/train/total")["token"] == [64, 128, 192]


class NaNAt(Trainer):
    """A trainer whose loss goes NaN in the optimizer step after ``bad_after`` steps."""

    bad_after = 1

    def compute_loss(self, model, inputs, *args, **kwargs):
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        if model.training and self.state.global_step == self.bad_after:
            loss = loss * float("nan")
        return loss


@pytest.mark.parametrize("mode", ["deferred", "immediate"])
def test_nan_found_and_training_stopped_through_control(tmp_path, mode):
    memory = InMemoryLogger()
    nan = NaNMonitor(check_interval="1ba", mode=mode, on_nan="stop")
    cb = ObsbusCallback(callbacks=[nan], loggers=[memory])
    trainer = cb.wrap(make_trainer(tmp_path, [cb], trainer_cls=NaNAt, eval_n=0))
    trainer.train()
    assert trainer.state.global_step == 2  # the bad step finishes, then HF stops (of 6)
    found = memory.get_timeseries("nan/first_bad_batch")
    # immediate mode checks (and logs, before the batch is counted) at each microbatch
    # loss, and both of step 2's are NaN; deferred mode checks at step 2's end.
    assert set(found["nan/first_bad_batch"]) == {2}
    assert found["step"] == ([1, 1] if mode == "immediate" else [2])
    losses = memory.get_timeseries("loss/train/total")["loss/train/total"]
    assert len(losses) == 2 and math.isfinite(losses[0]) and math.isnan(losses[1])


class Broken(LoggerDestination):
    def log_metrics(self, metrics, step=None):
        raise OSError("disk full")


def test_a_raising_destination_does_not_stop_training(tmp_path):
    memory = InMemoryLogger()
    cb = ObsbusCallback(loggers=[Broken(), memory])
    trainer = cb.wrap(make_trainer(tmp_path, [cb], eval_n=0, num_train_epochs=1))
    trainer.train()
    assert trainer.state.global_step == 3
    assert memory.get_timeseries("loss/train/total")["step"] == [1, 2, 3]


class FailAt(Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        if self.state.global_step == 2:
            raise RuntimeError("boom at step 3")
        return super().compute_loss(model, inputs, *args, **kwargs)


def test_exception_fires_event_and_flushes_file_logger(tmp_path):
    counter = EventCounter()
    # A long write period: only the flush at exception/close can write these lines.
    files = FileLogger(write_period=3600.0, flush_interval=1000)
    cb = ObsbusCallback(callbacks=[counter], loggers=[files], run_folder=tmp_path / "run")
    trainer = cb.wrap(make_trainer(tmp_path, [cb], trainer_cls=FailAt, eval_n=0))
    with pytest.raises(RuntimeError, match="boom at step 3"):
        trainer.train()
    assert counter.counts[Event.EXCEPTION] == 1 and counter.counts[Event.FIT_END] == 0
    assert cb.run.engine.closed
    text = (tmp_path / "run" / "metrics-rank0.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    losses = [r["step"] for r in rows if "loss/train/total" in r]
    hf_losses = [r["step"] for r in rows if "hf/loss" in r]
    assert losses == [1, 2] and hf_losses == [1, 2]


def test_stop_training_sets_control(tmp_path):
    class StopAt2(EventCounter):
        def batch_end(self, state, logger):
            super().batch_end(state, logger)
            if state.timestamp.batch.value == 2:
                state.stop_training()

    cb = ObsbusCallback(callbacks=[StopAt2()], log_hf_logs=False)
    trainer = make_trainer(tmp_path, [cb], eval_n=0)  # not wrapped: events still work
    trainer.train()
    assert trainer.state.global_step == 2
    assert cb.run.state.loss is None  # no loss without wrap


class SyncsPerStep(TrainerCallback):
    """Host transfers per optimizer step, read at HF's on_step_end (after every callback)."""

    def __init__(self, spy):
        self.spy, self.per_step, self._seen = spy, [], 0

    def on_step_end(self, args, state, control, **kwargs):
        self.per_step.append(len(self.spy.calls) - self._seen)
        self._seen = len(self.spy.calls)


def _syncs(tmp_path, with_obsbus):
    from obsbus.callbacks import LRMonitor, SpeedMonitor

    spy = SyncSpy()
    recorder = SyncsPerStep(spy)
    every = "3ba"
    callbacks = [recorder]
    if with_obsbus:
        monitors = [SpeedMonitor(window_size=2, log_interval=every), LRMonitor(log_interval=every),
                    NaNMonitor(check_interval=every)]
        cb = ObsbusCallback(callbacks=monitors, loggers=[InMemoryLogger()], log_hf_logs=False)
        callbacks = [cb, recorder]
    trainer = make_trainer(tmp_path, callbacks, eval_n=0, logging_steps=100, optim="sgd",
                           max_grad_norm=0.0, num_train_epochs=1)
    if with_obsbus:
        cb.wrap(trainer)
    with spy:
        trainer.train()
    return recorder.per_step


def test_obsbus_adds_no_host_transfer_on_steps_that_do_not_log(tmp_path):
    base = _syncs(tmp_path / "a", with_obsbus=False)
    ours = _syncs(tmp_path / "b", with_obsbus=True)
    assert len(base) == len(ours) == 3
    quiet = [0, 1]  # steps 1 and 2; the monitors log at step 3
    assert [ours[i] - base[i] for i in quiet] == [0] * len(quiet), (base, ours)


def test_bad_arguments():
    with pytest.raises(TypeError, match="log_hf_logs"):
        ObsbusCallback(log_hf_logs="yes")
    with pytest.raises(TypeError, match="hf_prefix"):
        ObsbusCallback(hf_prefix=1)
    with pytest.raises(TypeError):
        ObsbusCallback(callbacks=[object()])
    with pytest.raises(TypeError, match=r"transformers\.Trainer"):
        ObsbusCallback().wrap(object())


def test_without_transformers_the_import_names_the_extra(monkeypatch):
    import importlib
    import sys

    from obsbus.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "obsbus.integrations.transformers")
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[transformers\]'"):
        importlib.import_module("obsbus.integrations.transformers")
