"""SpeedMonitor: exact throughput from a fake clock, window, FLOPs/MFU, time keys, two ranks."""

from __future__ import annotations

import math
import pickle
import time

import pytest
import torch
import torch.nn.functional as F

from obsbus import Event, ObsbusWarning, Run, Trainer
from obsbus.callbacks import _mfu, speed_monitor
from obsbus.callbacks._mfu import MfuLookup
from obsbus.callbacks._peak_flops import PARTS, find_part, peak_flops, precision_of
from obsbus.callbacks._throughput_ranks import step_times
from obsbus.callbacks.speed_monitor import SpeedMonitor
from obsbus.loggers import InMemoryLogger
from tests._dist_utils import run_two_ranks

from ..helpers import regression_data, tiny_model
from ..test_values import SyncsPerBatch, SyncSpy

HOUR = 3600.0


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(speed_monitor, "_clock", fake)
    return fake


class FlopsModel(torch.nn.Module):
    """A tiny model that knows its FLOPs: ``per_sample`` per sample of the batch."""

    def __init__(self, per_sample: float = 1e11) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)
        self.per_sample = per_sample

    def forward(self, x):
        return self.linear(x)

    def flops_per_batch(self, batch) -> float:
        return self.per_sample * batch[0].shape[0]


def batches(sizes, seq=0):
    """Tuple batches (no tokens), or dict batches with ``input_ids`` of ``seq`` tokens each."""
    if seq:
        return [{"input_ids": torch.zeros(n, seq, dtype=torch.long)} for n in sizes]
    return [(torch.zeros(n, 2),) for n in sizes]


def train(monitor, clock, sizes, durations, *, seq=0, model=None, forward=False, **kwargs):
    """Train ``len(sizes)`` batches under Run, batch i taking ``durations[i]`` seconds."""
    mem = InMemoryLogger()
    with Run(model=model, max_duration=f"{len(sizes)}ba", callbacks=[monitor], loggers=[mem],
             **kwargs) as run:
        for i, batch in enumerate(run.train(batches(sizes, seq))):
            if forward:
                run.forward(model, batch[0])
            clock.advance(durations[i])
    return mem


def series(mem, key):
    out = mem.get_timeseries(key)
    return dict(zip(out["step"], out[key], strict=True))


def logged_keys(mem):
    return set(mem.data)


# ---------------------------------------------------------------------------
# Throughput: exact values from a fake clock
# ---------------------------------------------------------------------------


def test_exact_rates_with_variable_batch_sizes(clock):
    # Batch 1 warms up (left out); window of 2: steps 3, 4, 5 cover (2,3), (3,4), (4,5).
    mem = train(SpeedMonitor(window_size=2), clock, sizes=[4, 8, 2, 6, 10],
                durations=[5.0, 0.5, 0.5, 1.5, 0.5], seq=3)
    assert series(mem, "throughput/batches_per_sec") == {3: 2.0, 4: 1.0, 5: 1.0}
    assert series(mem, "throughput/samples_per_sec") == {3: 10.0, 4: 4.0, 5: 8.0}
    assert series(mem, "throughput/tokens_per_sec") == {3: 30.0, 4: 12.0, 5: 24.0}
    # One process: the device keys equal the global ones.
    assert series(mem, "throughput/device/samples_per_sec") == {3: 10.0, 4: 4.0, 5: 8.0}
    assert series(mem, "throughput/device/batches_per_sec") == {3: 2.0, 4: 1.0, 5: 1.0}
    assert series(mem, "throughput/device/tokens_per_sec") == {3: 30.0, 4: 12.0, 5: 24.0}
    # time/train counts every batch, the warm-up one too.
    assert mem.most_recent_values["time/train"] == pytest.approx(8.0 / HOUR)
    assert mem.most_recent_values["time/val"] == 0.0
    assert mem.most_recent_values["time/total"] == pytest.approx(8.0 / HOUR)


def test_no_token_keys_without_tokens(clock):
    mem = train(SpeedMonitor(window_size=1), clock, sizes=[2, 2, 2], durations=[1.0] * 3)
    assert series(mem, "throughput/samples_per_sec") == {2: 2.0, 3: 2.0}
    assert not any("tokens" in key or "flops" in key for key in logged_keys(mem))
    assert not any("step_time" in key for key in logged_keys(mem))  # one process


def test_window_is_reported_once_full_and_slides(clock):
    # A slow batch 5 is in the windows of steps 5, 6, 7 and gone at step 8.
    mem = train(SpeedMonitor(window_size=3), clock, sizes=[2] * 8,
                durations=[1.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0])
    assert series(mem, "throughput/batches_per_sec") == {4: 1.0, 5: 0.6, 6: 0.6, 7: 0.6, 8: 1.0}
    # Before the window is full only the time keys are logged.
    assert list(series(mem, "time/train")) == list(range(1, 9))


def test_log_interval_picks_the_steps_not_the_window(clock):
    mem = train(SpeedMonitor(window_size=2, log_interval="2ba"), clock, sizes=[1, 2, 3, 4, 5, 6],
                durations=[1.0, 1.0, 0.5, 0.5, 2.0, 2.0])
    # Step 2: the window holds batch 2 only, not full. Step 4: (3, 4). Step 6: (5, 6).
    assert series(mem, "throughput/samples_per_sec") == {4: 7.0, 6: 2.75}
    assert list(series(mem, "time/train")) == [2, 4, 6]


def test_each_fit_warms_up_and_time_between_fits_is_not_training(clock):
    monitor, mem = SpeedMonitor(window_size=1), InMemoryLogger()
    run = Run(max_duration="2ba", callbacks=[monitor], loggers=[mem])
    with run.fitting():
        for _ in run.train(batches([2, 2])):
            clock.advance(1.0)
    clock.advance(100.0)  # between fits
    run.state.max_duration = "4ba"
    with run.fitting():
        for _ in run.train(batches([4, 4])):
            clock.advance(0.5)
    run.close()
    # Steps 1 and 3 open a fit: left out of the window, which carries over between fits
    # (at step 3 it still holds batch 2).
    assert series(mem, "throughput/samples_per_sec") == {2: 2.0, 3: 2.0, 4: 8.0}
    assert mem.most_recent_values["time/train"] == pytest.approx(3.0 / HOUR)


def composer_throughput(sizes, durations, window):
    """Composer's window, as ``SpeedMonitor.batch_end`` in Composer's
    ``composer/callbacks/speed_monitor.py`` keeps it: deques of ``window_size + 1`` batch-end
    readings of the cumulative sample count and wall clock, a rate logged once they are full."""
    from collections import deque

    samples, wct = deque(maxlen=window + 1), deque(maxlen=window + 1)
    total_samples, total_seconds, out = 0, 0.0, {}
    for step, (size, seconds) in enumerate(zip(sizes, durations, strict=True), start=1):
        total_samples += size
        total_seconds += seconds
        samples.append(total_samples)
        wct.append(total_seconds)
        if len(wct) == wct.maxlen:
            out[step] = (samples[-1] - samples[0]) / (wct[-1] - wct[0])
    return out


@pytest.mark.parametrize("window", [1, 3, 7, 12])
def test_throughput_count_steps_and_values_match_composers_window(clock, window):
    sizes = [3, 5, 2, 8, 4, 4, 6, 1, 7, 2, 5, 3]
    durations = [2.0, 0.5, 0.25, 1.0, 0.5, 0.75, 0.5, 0.25, 1.5, 0.5, 0.25, 1.0]
    mem = train(SpeedMonitor(window_size=window), clock, sizes=sizes, durations=durations)
    expected = composer_throughput(sizes, durations, window)
    assert len(expected) == max(len(sizes) - window, 0)
    if not expected:  # the window never filled: neither logs a rate
        assert not any(k.startswith("throughput/") for k in logged_keys(mem))
        return
    got = series(mem, "throughput/samples_per_sec")
    assert list(got) == list(expected)  # the same steps: from window_size + 1 on
    assert got == pytest.approx(expected)
    assert len(mem.get_timeseries("throughput/batches_per_sec")["step"]) == len(expected)


@pytest.mark.parametrize(("unit", "seconds"), [("seconds", 1.0), ("minutes", 60.0),
                                               ("hours", 3600.0), ("days", 86400.0)])
def test_time_unit_as_composers(clock, unit, seconds):
    """Composer's ``SpeedMonitor(time_unit=...)``: the ``time/*`` keys in that unit."""
    mem = train(SpeedMonitor(window_size=1, time_unit=unit), clock, sizes=[1, 1, 1],
                durations=[2.0, 2.0, 2.0])
    assert mem.most_recent_values["time/train"] == pytest.approx(6.0 / seconds)
    assert mem.most_recent_values["time/total"] == pytest.approx(6.0 / seconds)
    assert SpeedMonitor(1, None, unit).time_unit == unit  # Composer's positional order


def test_eval_time_is_composers_time_val_key(clock):
    """Composer logs eval time as ``time/val`` (its SpeedMonitor key table); obsbus's earlier
    ``time/eval``, which the README promised, carries the same value alongside."""
    mem = train(SpeedMonitor(window_size=1), clock, sizes=[1, 1], durations=[1.0, 1.0])
    assert {"time/train", "time/val", "time/total"} <= logged_keys(mem)
    assert mem.get_timeseries("time/eval")["time/eval"] == mem.get_timeseries("time/val")["time/val"]


def test_epoch_log_interval(clock):
    monitor, mem = SpeedMonitor(window_size=2, log_interval="1ep"), InMemoryLogger()
    with Run(max_duration="2ep", callbacks=[monitor], loggers=[mem]) as run:
        for _ in run.train(batches([2, 4, 6])):
            clock.advance(1.0)
    # Epoch 1 ends at step 3 with batches (2, 3) in the window; epoch 2 at step 6 with (5, 6).
    assert series(mem, "throughput/samples_per_sec") == {3: 5.0, 6: 5.0}


# ---------------------------------------------------------------------------
# FLOPs and MFU
# ---------------------------------------------------------------------------


def test_flops_and_mfu_from_the_models_flops_per_batch(clock):
    mem = train(SpeedMonitor(window_size=2, gpu_flops_available=1e12), clock, sizes=[4] * 4,
                durations=[1.0] * 4, model=FlopsModel(per_sample=1e11))
    # 4e11 FLOPs per batch, one batch per second.
    assert series(mem, "throughput/flops_per_sec") == {3: 4e11, 4: 4e11}
    assert series(mem, "throughput/device/flops_per_sec") == {3: 4e11, 4: 4e11}
    assert series(mem, "throughput/device/mfu") == pytest.approx({3: 0.4, 4: 0.4})


def test_flops_function_argument_wins_and_wrapped_models_are_found(clock):
    class Wrapped:  # DDP/FSDP style: the user's model is .module
        module = FlopsModel(per_sample=1e11)

    mem = train(SpeedMonitor(window_size=1, gpu_flops_available=1e12), clock, sizes=[4] * 2,
                durations=[2.0] * 2, model=Wrapped())
    assert series(mem, "throughput/device/mfu") == pytest.approx({2: 0.2})

    monitor = SpeedMonitor(window_size=1, gpu_flops_available=1e12,
                           flops_per_batch=lambda batch: 5e11)
    mem = train(monitor, clock, sizes=[4] * 2, durations=[1.0] * 2, model=Wrapped())
    assert series(mem, "throughput/device/mfu") == pytest.approx({2: 0.5})


def test_unknown_device_warns_once_and_logs_no_mfu(clock):
    with pytest.warns(ObsbusWarning, match="not on a GPU") as caught:
        mem = train(SpeedMonitor(window_size=1), clock, sizes=[4] * 5, durations=[1.0] * 5,
                    model=FlopsModel())
    assert sum(issubclass(w.category, ObsbusWarning) for w in caught) == 1
    assert "gpu_flops_available" in str(caught[0].message)
    assert "throughput/device/mfu" not in logged_keys(mem)
    assert series(mem, "throughput/flops_per_sec") == {n: 4e11 for n in (2, 3, 4, 5)}


def test_unknown_gpu_name_warns_and_names_it(clock, monkeypatch):
    monkeypatch.setattr(_mfu, "device_info", lambda state: ("NVIDIA GeForce RTX 4090", 128))
    with pytest.warns(ObsbusWarning, match="'NVIDIA GeForce RTX 4090' at fp32 is not in the peak"):
        mem = train(SpeedMonitor(window_size=1), clock, sizes=[4] * 3, durations=[1.0] * 3,
                    model=FlopsModel())
    assert "throughput/device/mfu" not in logged_keys(mem)


@pytest.mark.parametrize(
    ("precision", "autocast", "peak"),
    [(None, False, 67e12), (None, True, 989.5e12), ("fp8", False, 1979e12), ("tf32", True, 494.5e12)],
    ids=["fp32-params", "autocast-bf16", "explicit-fp8", "explicit-wins-over-autocast"],
)
def test_mfu_from_the_table(clock, monkeypatch, precision, autocast, peak):
    monkeypatch.setattr(_mfu, "device_info", lambda state: ("NVIDIA H100 80GB HBM3", 132))
    model = FlopsModel(per_sample=1e12)
    monitor = SpeedMonitor(window_size=1, precision=precision)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        mem = train(monitor, clock, sizes=[4] * 2, durations=[1.0] * 2, model=model, forward=True)
    assert series(mem, "throughput/device/mfu") == pytest.approx({2: 4e12 / peak})


def test_after_forward_is_dropped_only_where_the_precision_cannot_matter(monkeypatch):
    # A CPU run has no peak, so no MFU: after_forward (which notes the precision) is not
    # dispatched. On a GPU, or with the device unknown, it is; the same monitor reused
    # on a GPU run gets it back, and it still pickles.
    def dispatched(monitor, **kwargs):
        with Run(max_duration="1ba", callbacks=[monitor], **kwargs) as run:
            handled = run.engine.handles[Event.AFTER_FORWARD]
            for _ in run.train([[1]]):
                pass
        return handled

    monitor = SpeedMonitor()
    assert not dispatched(monitor, model=tiny_model())  # the device is known: the CPU
    assert not dispatched(SpeedMonitor(), device="cpu")
    assert not dispatched(SpeedMonitor(precision="bf16"))  # nothing to detect
    assert not dispatched(SpeedMonitor(gpu_flops_available=1e12))
    assert dispatched(SpeedMonitor())  # no model, no device: not known
    monkeypatch.setattr(_mfu, "device_info", lambda state: ("NVIDIA H100 80GB HBM3", 132))
    assert dispatched(monitor, model=tiny_model())  # reused on a "GPU": back
    assert pickle.loads(pickle.dumps(monitor)).window_size == monitor.window_size


def test_mfu_above_one_is_not_logged(clock):
    with pytest.warns(ObsbusWarning, match=r"MFU is 400 \(40000%\), above 100%") as caught:
        mem = train(SpeedMonitor(window_size=1, gpu_flops_available=1e9), clock, sizes=[4] * 4,
                    durations=[1.0] * 4, model=FlopsModel(per_sample=1e11))
    assert sum(issubclass(w.category, ObsbusWarning) for w in caught) == 1
    assert "throughput/device/mfu" not in logged_keys(mem)
    assert series(mem, "throughput/flops_per_sec") == {2: 4e11, 3: 4e11, 4: 4e11}


def test_mfu_and_step_times_as_device_tensors():
    # The GPU-backend path: reduced values stay tensors; the MFU check uses this rank's own.
    mfu = MfuLookup(gpu_flops_available=1e12, precision=None)
    metrics: dict = {}
    mfu.add(metrics, torch.tensor(1.5e12, dtype=torch.float64), 5e11, state=None)
    assert math.isnan(metrics["throughput/device/mfu"].item())  # global > 1: NaN, not 150%
    metrics = {}
    mfu.add(metrics, torch.tensor(5e11, dtype=torch.float64), 5e11, state=None)
    assert metrics["throughput/device/mfu"].item() == 0.5
    metrics = {}
    with pytest.warns(ObsbusWarning, match="above 100%"):
        mfu.add(metrics, torch.tensor(5e11, dtype=torch.float64), 2e12, state=None)
    assert metrics == {}
    reduced = {"step_max": torch.tensor(0.3), "step_min": torch.tensor(0.1),
               "slowest_rank": torch.tensor(1)}
    steps = step_times(reduced)
    assert steps["throughput/step_time_max_over_min"].item() == pytest.approx(3.0)
    assert steps["throughput/step_time_slowest_rank"].item() == 1


def test_flops_function_must_return_a_number(clock):
    monitor = SpeedMonitor(window_size=1, flops_per_batch=lambda batch: torch.tensor(1.0))
    with pytest.raises(TypeError, match=r"flops_per_batch gave tensor.*must be a Python number"):
        train(monitor, clock, sizes=[4] * 3, durations=[1.0] * 3)


# ---------------------------------------------------------------------------
# Time keys: training vs evaluation
# ---------------------------------------------------------------------------


def test_eval_time_is_not_training_time(clock):
    def evaluate(run):
        for _ in run.eval(batches([3, 3])):
            clock.advance(5.0)

    mem = train(SpeedMonitor(window_size=2), clock, sizes=[2] * 4, durations=[1.0] * 4,
                eval_interval="2ba", eval_fn=evaluate)
    # Batch 3 follows the eval after batch 2: 1 s, not 11 s.
    assert series(mem, "throughput/batches_per_sec") == {3: 1.0, 4: 1.0}
    final = mem.most_recent_values
    assert final["time/train"] == pytest.approx(4.0 / HOUR)
    assert final["time/val"] == pytest.approx(20.0 / HOUR)
    assert final["time/total"] == pytest.approx(24.0 / HOUR)
    # Logged again when each eval ends: the last eval's time is not lost.
    evals = mem.get_timeseries("time/val")
    assert evals["time/val"][-1] == pytest.approx(20.0 / HOUR) and evals["step"][-1] == 4


def test_standalone_eval_accumulates(clock):
    monitor, mem = SpeedMonitor(), InMemoryLogger()
    run = Run(max_duration="1ba", callbacks=[monitor], loggers=[mem])
    with run.fitting():
        for _ in run.train(batches([2])):
            clock.advance(2.0)
    for _ in run.eval(batches([2, 2])):
        clock.advance(1.5)
    run.close()
    assert mem.most_recent_values["time/val"] == pytest.approx(3.0 / HOUR)
    assert mem.most_recent_values["time/train"] == pytest.approx(2.0 / HOUR)


def test_totals_survive_state_dict(clock):
    monitor = SpeedMonitor(window_size=1)
    train(monitor, clock, sizes=[2] * 2, durations=[1.5] * 2)
    resumed = SpeedMonitor(window_size=1)
    resumed.load_state_dict(pickle.loads(pickle.dumps(monitor.state_dict())))
    mem = train(resumed, clock, sizes=[2] * 2, durations=[1.0] * 2)
    assert mem.most_recent_values["time/train"] == pytest.approx(5.0 / HOUR)


def test_one_instance_serves_runs_one_after_another_from_scratch(clock):
    """A second run starts with an empty window and zero time, as a new instance would."""
    monitor = SpeedMonitor(window_size=2)
    train(monitor, clock, sizes=[2] * 3, durations=[1.0] * 3)
    second = train(monitor, clock, sizes=[4] * 3, durations=[2.0] * 3)
    fresh = train(SpeedMonitor(window_size=2), clock, sizes=[4] * 3, durations=[2.0] * 3)
    for key in ("throughput/samples_per_sec", "time/train"):
        assert series(second, key) == series(fresh, key), key
    assert list(series(second, "throughput/samples_per_sec")) == [3]  # the window filled again


def test_composers_state_dict_entry_restores_eval_time(clock):
    """Composer's ``SpeedMonitor.state_dict()`` is ``{'total_eval_wct': seconds}``."""
    resumed = SpeedMonitor(window_size=1)
    resumed.load_state_dict({"total_eval_wct": 36.0})
    mem = train(resumed, clock, sizes=[2] * 2, durations=[1.0] * 2)
    assert mem.most_recent_values["time/val"] == pytest.approx(36.0 / HOUR)


# ---------------------------------------------------------------------------
# Real loops, real clock
# ---------------------------------------------------------------------------


def test_under_trainer_with_eval():
    mem = InMemoryLogger()
    model = tiny_model()
    with Trainer(model, regression_data(4), "2ep", loss_fn=F.mse_loss,
                 optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
                 eval_dataloader=regression_data(2, seed=1), callbacks=[SpeedMonitor(window_size=2)],
                 loggers=[mem], device="cpu") as trainer:
        trainer.fit()
    final = mem.most_recent_values
    assert final["throughput/samples_per_sec"] > 0 and final["throughput/batches_per_sec"] > 0
    assert final["time/val"] > 0 and final["time/train"] > 0
    assert final["time/total"] == pytest.approx(final["time/train"] + final["time/val"])
    assert mem.get_timeseries("throughput/samples_per_sec")["step"] == [3, 4, 5, 6, 7, 8]


def test_training_steps_that_do_not_log_never_sync():
    spy = SyncSpy()
    recorder = SyncsPerBatch(spy)
    model = FlopsModel(per_sample=1.0)
    mem = InMemoryLogger()
    trainer = Trainer(model, [(x[:, :2], y) for x, y in regression_data(8)], "1ep",
                      loss_fn=F.mse_loss, optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
                      callbacks=[SpeedMonitor(window_size=2, gpu_flops_available=1e12,
                                              log_interval="4ba"), recorder],
                      loggers=[mem], device="cpu")
    with spy:
        trainer.fit()
    trainer.close()
    assert set(recorder.per_batch) == set(range(1, 9))
    for batch, calls in recorder.per_batch.items():
        if batch % 4:
            assert calls == [], f"batch {batch} synced: {calls}"
    assert mem.get_timeseries("throughput/device/mfu")["step"] == [4, 8]


# ---------------------------------------------------------------------------
# Construction errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"window_size": 0}, ValueError, r"SpeedMonitor window_size must be a whole number >= 1, got 0"),
        ({"window_size": 2.5}, TypeError, r"window_size must be a whole number >= 1, got 2.5"),
        ({"window_size": True}, TypeError, "window_size must be a whole number >= 1, got True"),
        ({"gpu_flops_available": "312e12"}, TypeError, "must be a number of FLOP/s per device"),
        ({"gpu_flops_available": 312}, ValueError, r"got 312. To fix, give FLOP/s, not TFLOP/s"),
        ({"gpu_flops_available": -1e12}, ValueError, "must be the peak FLOP/s of one device"),
        ({"gpu_flops_available": float("inf")}, ValueError, "got inf"),
        ({"precision": "bfloat16"}, ValueError,
         "precision 'bfloat16' is not supported; accepted: fp32, tf32, fp16, bf16, fp8"),
        ({"flops_per_batch": 3}, TypeError, "flops_per_batch must be a function"),
        ({"log_interval": "5sp"}, ValueError, "SpeedMonitor log_interval '5sp' is not supported"),
        ({"time_unit": "h"}, ValueError,
         "SpeedMonitor time_unit must be one of 'seconds', 'minutes'.*got 'h'\\.$"),
        ({"time_unit": 60}, TypeError, "SpeedMonitor time_unit must be one of 'seconds'.*got 60\\."),
    ],
    ids=["window-0", "window-float", "window-bool", "peak-str", "peak-tflops", "peak-negative",
         "peak-inf", "precision", "flops-fn", "interval", "unit", "unit-int"],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        SpeedMonitor(**kwargs)


# ---------------------------------------------------------------------------
# The peak-FLOPs table
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "precision", "units", "tflops"),
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 108, 312.0),
        ("NVIDIA A100-PCIE-40GB", "tf32", 108, 156.0),
        ("NVIDIA A100 80GB PCIe", "fp32", 108, 19.5),
        ("NVIDIA H100 80GB HBM3", "bf16", 132, 989.5),
        ("NVIDIA H100 80GB HBM3", "fp8", 132, 1979.0),
        ("NVIDIA H100 PCIe", "bf16", 114, 756.5),
        ("NVIDIA H100 NVL", "fp16", 132, 835.5),
        ("NVIDIA H200", "bf16", 132, 989.5),
        ("NVIDIA H200 NVL", "fp8", 132, 1670.5),
        ("NVIDIA B200", "bf16", 148, 2250.0),
        ("NVIDIA B200", "fp8", 148, 4500.0),
        ("AMD Instinct MI250X", "bf16", 110, 191.5),  # one GCD of two
        ("AMD Instinct MI250X/MI250", "tf32", 110, 47.85),  # no TF32: the FP32 matrix rate
        ("AMD Instinct MI300X", "bf16", 304, 1307.4),
        ("AMD Instinct MI300X", "fp8", 38, 2614.9 / 8),  # a CPX partition: one XCD of eight
        ("AMD Instinct MI325X", "fp16", 304, 1307.4),
        ("AMD Instinct MI355X", "bf16", 256, 2516.6),
        ("AMD Instinct MI355X", "fp8", 256, 5033.2),
        ("NVIDIA A100-SXM4-40GB", "bf16", 14, 312.0 * 14 / 108),  # a MIG 1g slice
        ("NVIDIA H100 80GB HBM3", "bf16", 200, 989.5),  # more units than the part: no scaling up
    ],
)
def test_peak_flops_table(name, precision, units, tflops):
    assert peak_flops(name, precision, units) == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        ("NVIDIA RTX A1000 Laptop GPU", "bf16"),  # "A100" inside "A1000"
        ("NVIDIA A10", "bf16"),
        ("NVIDIA GH200 480GB", "bf16"),  # not "H200"
        ("NVIDIA GB200", "bf16"),  # not "B200"
        ("AMD Instinct MI350X", "bf16"),
        ("NVIDIA A100-SXM4-80GB", "fp8"),  # no FP8 on Ampere
        ("AMD Instinct MI250X", "fp8"),
        ("", "bf16"),
    ],
)
def test_peak_flops_unknown(name, precision):
    assert peak_flops(name, precision) is None


def test_table_is_dense_and_sane():
    for part in PARTS:
        assert find_part(part.name) is part, part.name  # the part's own name finds it
        peaks = part.tflops
        assert set(peaks) <= {"fp32", "tf32", "fp16", "bf16", "fp8"}
        assert peaks["bf16"] == peaks["fp16"] and peaks["fp32"] < peaks["bf16"]
        if "fp8" in peaks:
            assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=0.01)
        assert part.source.startswith("https://")
    with pytest.raises(ValueError, match="Unknown precision 'int8'; accepted: fp32, tf32"):
        peak_flops("NVIDIA H100", "int8")


def test_precision_of():
    model = torch.nn.Linear(2, 2)
    assert precision_of(model, "cpu") == "fp32"
    assert precision_of(model.half(), "cpu") == "fp16"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert precision_of(torch.nn.Linear(2, 2), "cpu") == "bf16"
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # float32 matmuls may use TF32
    try:
        assert precision_of(torch.nn.Linear(2, 2), "cuda") == "tf32"
    finally:
        torch.set_float32_matmul_precision(saved)
    assert precision_of(None, "cpu") is None


# ---------------------------------------------------------------------------
# Two real ranks
# ---------------------------------------------------------------------------

FAKE_SIZES = {0: [8, 8, 6, 4], 1: [4, 2, 2, 2]}


def _two_rank_speed(rank: int) -> dict:
    """Runs in each rank: a fake-clock run (exact values), then a real-clock one, rank 1 slow."""
    from obsbus.callbacks import speed_monitor as sm

    out = {}
    fake = FakeClock()
    sm._clock = fake
    mem = InMemoryLogger()
    with Run(max_duration="4ba", callbacks=[SpeedMonitor(window_size=2)], loggers=[mem]) as run:
        for _ in run.train(batches(FAKE_SIZES[rank])):
            fake.advance(0.5)
    out["fake"] = {key: series(mem, key) for key in mem.data}

    sm._clock = time.perf_counter
    mem = InMemoryLogger()
    with Run(max_duration="6ba", callbacks=[SpeedMonitor(window_size=2, log_interval="3ba")],
             loggers=[mem]) as run:
        for _ in run.train(batches([2] * 6)):
            if rank == 1:
                time.sleep(0.05)
    out["real"] = {key: series(mem, key) for key in mem.data}
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_two_ranks(_two_rank_speed, tmp_path_factory.mktemp("speed"), timeout=60.0)


@pytest.mark.dist
def test_two_ranks_sum_samples_over_the_slowest_window(two_ranks):
    def own_rate(sizes, step):  # a rank's own samples/s over the window ending at step
        return sum(sizes[step - 2 : step]) / 1.0

    expected = {step: own_rate(FAKE_SIZES[0], step) + own_rate(FAKE_SIZES[1], step)
                for step in (3, 4)}
    assert expected == {3: 18.0, 4: 14.0}
    for out in two_ranks:
        fake = out["fake"]
        assert fake["throughput/samples_per_sec"] == expected
        assert fake["throughput/device/samples_per_sec"] == {s: v / 2 for s, v in expected.items()}
        assert fake["throughput/batches_per_sec"] == {3: 2.0, 4: 2.0}
        assert fake["throughput/device/batches_per_sec"] == {3: 1.0, 4: 1.0}
        assert fake["throughput/step_time_max_over_min"] == {s: 1.0 for s in range(2, 5)}
        assert fake["throughput/step_time_max"] == {s: 0.5 for s in range(2, 5)}


@pytest.mark.dist
def test_two_ranks_straggler_shows_in_step_times(two_ranks):
    for out in two_ranks:
        real = out["real"]
        # Both log steps: the second one proves the fast rank's wait in the first
        # all_reduce was not charged to its next batches.
        assert set(real["throughput/step_time_max_over_min"]) == {3, 6}
        for step in (3, 6):
            assert real["throughput/step_time_max_over_min"][step] > 1.5
            assert real["throughput/step_time_slowest_rank"][step] == 1
            assert real["throughput/step_time_max"][step] >= 0.045
        # 8 samples over the slowest rank's window (>= 2 x 0.05 s), not the fast rank's.
        assert real["throughput/samples_per_sec"][6] <= 8 / 0.1 * 1.001
