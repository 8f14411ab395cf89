"""The Trainer takes Composer's observability arguments, with Composer's defaults (issue 14, item 2)."""

from __future__ import annotations

import inspect
import io

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, ObsbusWarning, Run, Trainer
from obsbus.callbacks import SpeedMonitor
from obsbus.callbacks._peak_flops import precision_of
from obsbus.loggers import ConsoleLogger, InMemoryLogger, ProgressBarLogger

from .helpers import EventCounter, regression_data, tiny_model


def trainer(**kwargs):
    kwargs.setdefault("max_duration", "2ep")
    return Trainer(tiny_model(), regression_data(4), loss_fn=F.mse_loss, device="cpu", **kwargs)


def test_composers_defaults():
    params = inspect.signature(Trainer).parameters
    defaults = {name: params[name].default for name in (
        "progress_bar", "log_to_console", "console_stream", "console_log_interval", "log_traces",
        "train_subset_num_batches", "eval_subset_num_batches", "max_duration")}
    # composer/trainer/trainer.py: Trainer.__init__'s defaults.
    assert defaults == {"progress_bar": True, "log_to_console": False, "console_stream": "stderr",
                        "console_log_interval": "1ba", "log_traces": False,
                        "train_subset_num_batches": -1, "eval_subset_num_batches": -1,
                        "max_duration": None}


def test_progress_bar_is_added_unless_one_is_given():
    with trainer() as t:
        bars = [d for d in t.state.loggers if isinstance(d, ProgressBarLogger)]
        assert len(bars) == 1 and bars[0].stream == "stderr"
    mine = ProgressBarLogger(stream=io.StringIO())
    with trainer(loggers=mine) as t:
        assert [d for d in t.state.loggers if isinstance(d, ProgressBarLogger)] == [mine]
    with trainer(progress_bar=False) as t:
        assert not any(isinstance(d, ProgressBarLogger) for d in t.state.loggers)


def test_the_default_bar_draws_on_console_stream_and_never_syncs():
    """Deliberate difference: Composer's bar shows the loss; this one shows no values, since
    showing one is a device sync at each refresh (a ProgressBarLogger passed in shows them)."""
    from .test_values import SyncSpy

    out, spy, model = io.StringIO(), SyncSpy(), tiny_model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)  # Adam's own step calls .item()
    with Trainer(model, regression_data(4), "8ba", loss_fn=F.mse_loss, device="cpu",
                 optimizers=sgd, console_stream=out) as t, spy:
        t.fit()
    assert "8/8" in out.getvalue() and "loss=" not in out.getvalue()
    assert spy.calls == []
    bar = next(d for d in t.state.loggers if isinstance(d, ProgressBarLogger))
    assert bar.postfix_keys == ()


def test_log_to_console_prints_train_and_eval_lines_every_console_log_interval():
    out = io.StringIO()
    with trainer(log_to_console=True, progress_bar=False, console_stream=out,
                 console_log_interval="2ba", eval_dataloader=regression_data(2, seed=1)) as t:
        t.fit()
    text = out.getvalue()
    assert text.count("\t Train loss/train/total: ") == 4  # batches 2, 4, 6, 8
    assert text.count("Eval on eval data:") == 2
    assert text.count("\t Eval metrics/eval/loss: ") == 2
    console = [d for d in t.state.loggers if isinstance(d, ConsoleLogger)]
    assert len(console) == 1 and console[0].log_interval.value == 2


def test_a_console_logger_given_is_not_doubled():
    out = io.StringIO()
    mine = ConsoleLogger(stream=out)
    with trainer(loggers=[mine], log_to_console=True, progress_bar=False) as t:
        assert [d for d in t.state.loggers if isinstance(d, ConsoleLogger)] == [mine]


def test_both_bar_and_console_warn_as_composer_does():
    with pytest.warns(ObsbusWarning, match=r"progress_bar=True and log_to_console=True.*"
                                           r"To fix, set one of them to False"):
        trainer(log_to_console=True).close()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"console_log_interval": 0}, ValueError,
         r"console_log_interval 0 is not supported.*To fix, pass log_to_console=False"),
        ({"console_log_interval": "10sp"}, ValueError, r"console_log_interval '10sp' is not supported"),
        ({"console_stream": "stdlog"}, ValueError, r"console_stream 'stdlog' is not supported"),
        ({"progress_bar": "no"}, TypeError, r"progress_bar must be True or False, got 'no'"),
        ({"precision": "amp_fp8"}, ValueError, r"precision 'amp_fp8' is not supported.*"
                                               r"TransformerEngine"),
        ({"precision": "fp64"}, ValueError, r"precision 'fp64' is not supported; accepted: 'fp32'"),
        ({"precision": "amp_fp16"}, ValueError,
         r"'amp_fp16' is not supported on the CPU.*To fix, pass precision='amp_bf16'"),
        ({"train_subset_num_batches": 0}, ValueError,
         r"train_subset_num_batches must be -1 \(every batch\) or a positive number.*got 0"),
        ({"eval_subset_num_batches": -2}, ValueError, r"eval_subset_num_batches .*got -2"),
        ({"timestamp": 5}, TypeError, r"timestamp must be an obsbus Timestamp .*got 5"),
    ],
    ids=["interval-0", "interval-sp", "stream", "bar-str", "fp8", "fp64", "fp16-cpu",
         "train-subset-0", "eval-subset", "timestamp"],
)
def test_bad_values_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        trainer(**kwargs)


class AutocastSeen(Callback):
    def __init__(self):
        self.forward, self.loss, self.eval, self.precision = [], [], [], []

    def after_forward(self, state, logger):
        self.forward.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        self.precision.append(precision_of(state.model, "cpu"))

    def after_loss(self, state, logger):
        self.loss.append(torch.is_autocast_enabled("cpu"))

    def eval_after_forward(self, state, logger):
        self.eval.append(torch.is_autocast_enabled("cpu"))


def test_amp_bf16_runs_forward_and_loss_under_cpu_autocast():
    seen = AutocastSeen()
    with trainer(precision="amp_bf16", callbacks=seen, max_duration="2ba",
                 eval_dataloader=regression_data(1), eval_interval="2ba") as t:
        t.fit()
        assert t.state.precision == "amp_bf16"
        assert t.state.loss.dtype == torch.float32  # mse_loss autocasts to float32
    assert seen.forward == [(True, torch.bfloat16)] * 2 and seen.loss == [True, True]
    assert seen.eval == [True]
    # What SpeedMonitor reads at after_forward for MFU: the autocast dtype.
    assert seen.precision == ["bf16", "bf16"]
    assert not torch.is_autocast_enabled("cpu")  # nothing leaks out of the step


def test_fp32_is_the_default_and_runs_without_autocast():
    seen = AutocastSeen()
    with trainer(callbacks=seen, max_duration="1ba") as t:
        t.fit()
        assert t.state.precision == "fp32"
    assert seen.forward[0][0] is False


def test_speed_monitor_sees_the_autocast_of_amp_bf16(monkeypatch):
    # The precision matters only for a GPU's peak (off a GPU SpeedMonitor drops the hook
    # that notes it), so the run's device is reported as one.
    from obsbus.callbacks import _mfu

    monkeypatch.setattr(_mfu, "device_info", lambda state: ("NVIDIA H100 80GB HBM3", 132))
    monitor = SpeedMonitor(window_size=1)
    with trainer(precision="amp_bf16", callbacks=[monitor], max_duration="1ba") as t:
        t.fit()
    assert monitor._mfu._detected == "bf16"


def test_train_subset_num_batches_ends_every_epoch_early():
    counter = EventCounter()
    lengths = []

    class Length(Callback):
        def epoch_start(self, state, logger):
            lengths.append(state.dataloader_len.value)

    with trainer(train_subset_num_batches=3, callbacks=[counter, Length()]) as t:
        t.fit()
        assert t.state.timestamp.batch.value == 6 and t.state.timestamp.epoch.value == 2
    assert lengths == [3, 3]


def test_eval_subset_num_batches_evaluates_that_many():
    batches = []

    class Count(Callback):
        def eval_end(self, state, logger):
            batches.append((state.eval_timestamp.batch.value, state.dataloader_len.value))

    with trainer(eval_subset_num_batches=2, eval_dataloader=regression_data(5, seed=1),
                 callbacks=Count()) as t:
        t.fit()
    assert batches == [(2, 2), (2, 2)]


def test_a_subset_of_a_loader_without_len_reads_that_many():
    def stream():
        yield from regression_data(10)

    class Stream:
        def __iter__(self):
            return stream()

    with Trainer(tiny_model(), Stream(), "1ep", loss_fn=F.mse_loss, device="cpu",
                 progress_bar=False, train_subset_num_batches=4) as t:
        t.fit()
        assert t.state.timestamp.batch.value == 4


def test_max_duration_may_be_given_to_fit_instead():
    with trainer(max_duration=None, progress_bar=False) as t:
        with pytest.raises(ValueError, match=r"no max_duration: pass Trainer\(.*fit\(duration="):
            t.fit()
        t.fit(duration="3ba")
        assert t.state.timestamp.batch.value == 3
        t.fit(duration="1ep")  # that much more, from where it is
        assert t.state.timestamp.batch.value == 7


@pytest.mark.parametrize("form", ["one", "list", "tuple"])
def test_callbacks_and_loggers_take_one_object_or_a_sequence(form):
    counter, mem = EventCounter(), InMemoryLogger()
    wrap = {"one": lambda x: x, "list": lambda x: [x], "tuple": lambda x: (x,)}[form]
    with trainer(callbacks=wrap(counter), loggers=wrap(mem), max_duration="2ba",
                 progress_bar=False) as t:
        t.fit()
    assert counter.counts["batch_end"] == 2
    assert len(mem.get_timeseries("loss/train/total")["batch"]) == 2
    with Run(callbacks=wrap(counter), loggers=wrap(mem)) as run:
        assert run.state.callbacks == [mem, counter] and run.state.loggers == [mem]


def test_state_callbacks_and_loggers_hold_what_the_run_uses():
    counter, mem = EventCounter(), InMemoryLogger()
    with trainer(callbacks=[counter], loggers=[mem]) as t:
        bar = t.state.loggers[-1]
        assert isinstance(bar, ProgressBarLogger)
        assert t.state.loggers == [mem, bar]
        # Composer's order: the destinations, then the callbacks.
        assert t.state.callbacks == [mem, bar, counter]
        assert t.state.loggers == list(t.logger.destinations)


def test_amp_fp16_scales_the_loss_with_a_grad_scaler(monkeypatch):
    """The GPU path, run on the CPU: torch's CPU autocast and GradScaler take float16 too."""
    import obsbus.trainer

    monkeypatch.setattr(obsbus.trainer, "check_precision_on", lambda precision, device: "amp_fp16")
    seen = AutocastSeen()
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    with Trainer(model, regression_data(4), "4ba", loss_fn=F.mse_loss, device="cpu",
                 progress_bar=False, callbacks=seen,
                 optimizers=torch.optim.SGD(model.parameters(), lr=0.1)) as t:
        t.fit()
        assert t.state.precision == "amp_fp16"
        assert isinstance(t._scaler, torch.amp.GradScaler)
        assert t._scaler.get_scale() > 1.0  # the loss was scaled for backward
        assert torch.isfinite(t.state.loss)  # state.loss is the unscaled loss
    assert seen.forward[0] == (True, torch.float16)
    assert seen.precision[0] == "fp16"
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_composers_gpu_device_name_means_cuda():
    """Composer's ``device="gpu"`` (its DeviceGPU) is CUDA here, checked like ``"cuda"``."""
    if torch.cuda.is_available():
        assert Run(device="gpu")._move_to.type == "cuda"
    else:
        with pytest.raises(ValueError, match="Run device 'gpu': this machine has no cuda device"):
            Run(device="gpu")
        with pytest.raises(ValueError, match="Trainer device 'gpu': this machine has no cuda"):
            Trainer(tiny_model(), regression_data(2), "1ba", loss_fn=F.mse_loss, device="gpu")


def test_a_sequence_of_dataloaders_for_eval_says_to_label_them():
    """Composer takes a list of evaluators; obsbus labels evaluations with a dict."""
    from torch.utils.data import DataLoader, TensorDataset

    loaders = [DataLoader(TensorDataset(torch.randn(4, 4), torch.randn(4, 2)), batch_size=2)] * 2
    with pytest.raises(TypeError, match=r"list of 2 DataLoaders.*eval_dataloader=\{'eval1': dl1"):
        Trainer(tiny_model(), regression_data(2), "1ba", loss_fn=F.mse_loss,
                eval_dataloader=loaders)
    batches, memory = regression_data(2), InMemoryLogger()  # a list of batches: one dataloader
    with Trainer(tiny_model(), regression_data(2), "1ep", loss_fn=F.mse_loss, loggers=[memory],
                 eval_dataloader=batches, progress_bar=False) as trainer:
        trainer.fit()
    assert "metrics/eval/loss" in memory.data


def test_composers_eval_interval_0_says_how_to_train_without_evaluating():
    with pytest.raises(ValueError, match=r"eval_interval=0\), leave eval_dataloader out"):
        Trainer(tiny_model(), regression_data(2), "1ba", loss_fn=F.mse_loss,
                eval_dataloader=regression_data(2), eval_interval=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"device_train_microbatch_size": 2}, r"device_train_microbatch_size=: .*grad_accum="),
        ({"save_interval": "1ep"}, r"save_interval=: obsbus's Trainer saves and loads no checkp"),
        ({"load_path": "ckpt.pt"}, r"load_path=: .*timestamp=Timestamp"),
        ({"algorithms": []}, r"algorithms=: obsbus runs no algorithms"),
        ({"max_duraton": "1ep"}, r"unexpected keyword argument 'max_duraton'\. Did you mean "
                                 r"'max_duration'\?"),
    ],
    ids=["microbatch", "save", "load", "algorithms", "typo"],
)
def test_composers_other_trainer_arguments_say_what_to_write_instead(kwargs, match):
    with pytest.raises(TypeError, match=match):
        Trainer(tiny_model(), regression_data(2), loss_fn=F.mse_loss, **kwargs)
