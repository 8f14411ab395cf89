"""Metric units: the lookup rules, the merge, and every built-in monitor's declarations."""

from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from typing_extensions import override

from obsbus import Callback, Run, Trainer
from obsbus._units import collect_units, read_units, unit_of
from obsbus.callbacks import (
    LRMonitor,
    MemoryMonitor,
    OptimizerMonitor,
    RocmSmiMonitor,
    RuntimeEstimator,
    SpeedMonitor,
    SystemMetricsMonitor,
)
from obsbus.errors import ObsbusWarning
from obsbus.loggers import ConsoleLogger, InMemoryLogger

from ..helpers import regression_data, tiny_model


class Declares(Callback):
    def __init__(self, units):
        self.units = units

    @override
    def metric_units(self):
        return self.units


def test_exact_key_wins_then_the_longest_pattern_and_no_guess():
    units = {"a/*": "s", "a/b*": "ms", "a/b/c": "h", "a/[xy]": "%"}
    assert unit_of("a/b/c", units) == "h"
    assert unit_of("a/b/d", units) == "ms"
    assert unit_of("a/q", units) == "s"
    assert unit_of("a/x", units) == "%"  # a/[xy] is longer than a/*
    assert unit_of("loss/train/total", units) is None
    assert unit_of("a/b/c", {}) is None


def test_a_key_two_plugins_disagree_on_shows_no_unit_and_warns_once():
    with pytest.warns(ObsbusWarning, match=r"different units .*'time/x': d, h, s"):
        merged = collect_units([Declares({"time/x": "s", "n": "B"}), Declares({"time/x": "h"}),
                                Declares({"time/x": "d", "n": "B"})])  # fmt: skip
    assert merged == {"n": "B"}


@pytest.mark.parametrize(
    "bad",
    [["s"], {"k": 1}, {"": "s"}, {"k": ""}],
    ids=["list", "int-unit", "empty-key", "empty-unit"],
)
def test_a_bad_declaration_warns_and_counts_as_none(bad):
    with pytest.warns(ObsbusWarning, match=r"Declares.metric_units\(\) must return a dict"):
        assert collect_units([Declares(bad), Declares({"ok": "s"})]) == {"ok": "s"}


def test_a_raising_declaration_warns_and_the_run_goes_on(tmp_path):
    class Broken(Callback):
        @override
        def metric_units(self):
            raise RuntimeError("boom")

    def one_batch():
        with Run(max_duration="1ba", run_folder=tmp_path / "r", callbacks=[Broken()]) as run:
            for _ in run.train([[1]]):
                pass
        return run

    with pytest.warns(ObsbusWarning, match=r"Broken.metric_units\(\) raised RuntimeError: boom"):
        run = one_batch()
    assert run.state.timestamp.batch.value == 1
    assert read_units(tmp_path / "r") == {}


def test_read_units_of_a_run_made_before_units_is_empty(tmp_path):
    assert read_units(tmp_path) == {}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "units.json").write_text("not json")
    assert read_units(tmp_path) == {}


@pytest.mark.parametrize(
    ("time_unit", "label"),
    [("seconds", "s"), ("minutes", "min"), ("hours", "h"), ("days", "d")],
    ids=["seconds", "minutes", "hours", "days"],
)
def test_time_keys_carry_the_instances_time_unit(time_unit, label):
    speed = SpeedMonitor(time_unit=time_unit).metric_units()
    for key in ("time/train", "time/val", "time/eval", "time/total"):
        assert unit_of(key, speed) == label
    estimate = RuntimeEstimator(time_unit=time_unit).metric_units()
    assert unit_of("time/remaining_estimate", estimate) == label


def _run_all(tmp_path):
    mem = InMemoryLogger()
    callbacks = [
        SpeedMonitor(
            window_size=1,
            time_unit="minutes",
            flops_per_batch=lambda b: 1e6,
            gpu_flops_available=1e15,
        ),
        RuntimeEstimator(time_unit="seconds", skip_batches=0),
        MemoryMonitor(log_interval="1ba"),
        SystemMetricsMonitor(log_interval="2ba", sample_interval_s=0.01, gpu=False),
        OptimizerMonitor(log_interval="2ba", log_param_norm=True, log_num_zeros=True),
        LRMonitor(),
    ]
    with Trainer(tiny_model(), regression_data(4), "4ba", loss_fn=F.mse_loss, device="cpu",
                 run_folder=tmp_path / "r", callbacks=callbacks, loggers=[mem],
                 progress_bar=False) as trainer:  # fmt: skip
        trainer.fit()
    return mem, read_units(tmp_path / "r")


EXPECTED = {  # every key the short CPU run logs -> the unit shown (None: none)
    "throughput/batches_per_sec": "batches/s",
    "throughput/device/batches_per_sec": "batches/s",
    "throughput/samples_per_sec": "samples/s",
    "throughput/device/samples_per_sec": "samples/s",
    "throughput/flops_per_sec": "flops/s",
    "throughput/device/flops_per_sec": "flops/s",
    "throughput/device/mfu": None,  # a fraction
    "time/train": "min",
    "time/val": "min",
    "time/eval": "min",
    "time/total": "min",
    "time/remaining_estimate": "s",
    "memory/host_rss_mem": "GB",
    "memory/host_peak_rss_mem": "GB",
    "system/cpu_percent": "%",
    "system/process_cpu_percent": "%",
    "system/memory_used_gb": "GB",
    "system/memory_percent": "%",
    "system/process_rss_gb": "GB",
    "system/disk_read_mb_per_s": "MB/s",
    "system/disk_write_mb_per_s": "MB/s",
    "system/net_sent_mb_per_s": "MB/s",
    "system/net_recv_mb_per_s": "MB/s",
    "l2_norm/grad/global": None,
    "l2_norm/param/global": None,
    "num_zeros/grad/global": None,
    "lr-AdamW/group0": None,
    "loss/train/total": None,
}


def test_every_key_of_the_built_in_monitors_gets_its_true_unit(tmp_path):
    mem, units = _run_all(tmp_path)
    logged = set(mem.most_recent_values)
    assert {"time/train", "memory/host_rss_mem", "l2_norm/grad/global"} <= logged
    unknown = logged - set(EXPECTED)
    assert not unknown, f"add these keys to EXPECTED: {sorted(unknown)}"
    assert {key: unit_of(key, units) for key in logged} == {k: EXPECTED[k] for k in logged}


def test_reduced_and_renamed_keys_keep_their_units():
    memory = MemoryMonitor(memory_keys={"allocated_bytes.all.current": "allocated_bytes",
                                        "num_ooms": "ooms"}).metric_units()  # fmt: skip
    assert unit_of("memory/allocated_gigabytes", memory) == "GB"
    assert unit_of("memory/allocated_gigabytes_max", memory) == "GB"
    assert unit_of("memory/ooms", memory) is None
    default = MemoryMonitor().metric_units()
    assert unit_of("memory/peak_reserved_mem_avg", default) == "GB"
    assert unit_of("memory/num_ooms", default) is None
    system = SystemMetricsMonitor().metric_units()
    assert unit_of("system/gpu/temperature_c/max", system) == "degC"
    assert unit_of("system/cpu_percent/rank3", system) == "%"
    assert unit_of("system/gpu/power_w", system) == "W"
    rocm = RocmSmiMonitor().metric_units()
    assert unit_of("memory/rocm/max_used_vram_gb", rocm) == "GB"
    assert unit_of("utilization/rocm/gpu_use_pct", rocm) == "%"
    assert unit_of("memory/rocm/max_rank", rocm) is None


def test_console_shows_a_users_declared_unit_and_none_for_a_clash(tmp_path):
    class Latency(Declares):
        @override
        def batch_end(self, state, logger):
            logger.log_metrics({"latency/p99": 12.5, "clash": 1.0})

    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Run(max_duration="1ba", run_folder=tmp_path / "r",
                 callbacks=[Latency({"latency/*": "ms", "clash": "s"}), Declares({"clash": "h"})],
                 loggers=[ConsoleLogger(stream=out)]) as run:  # fmt: skip
            for _ in run.train([[torch.zeros(1)]]):
                pass
    assert "\t Train latency/p99: 12.5000 ms\n" in out.getvalue()
    assert "\t Train clash: 1.0000\n" in out.getvalue()
    clashes = [w for w in caught if "different units" in str(w.message)]
    assert len(clashes) == 1  # the run record warns; the console does not again
