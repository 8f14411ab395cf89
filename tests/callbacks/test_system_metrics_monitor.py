"""SystemMetricsMonitor: keys and values, rate math, the thread's life, contained GPU failures."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import warnings
from collections import namedtuple
from types import SimpleNamespace

import psutil
import pytest

from obsbus import MissingExtraError, ObsbusWarning, Run
from obsbus.callbacks import _gpu_probes
from obsbus.callbacks._gpu_probes import AmdSmiProbe, NvmlProbe, import_quietly
from obsbus.callbacks._system_sampler import Notes, Sampler, host_probe
from obsbus.callbacks.system_metrics_monitor import (
    THREAD_NAME,
    IoCounters,
    SystemMetricsMonitor,
    across_ranks,
    io_rates,
)
from obsbus.loggers import InMemoryLogger
from tests._dist_utils import run_two_ranks

HOST_KEYS = {
    "system/cpu_percent",
    "system/process_cpu_percent",
    "system/memory_used_gb",
    "system/memory_percent",
    "system/process_rss_gb",
}
RATE_KEYS = {
    "system/disk_read_mb_per_s",
    "system/disk_write_mb_per_s",
    "system/net_sent_mb_per_s",
    "system/net_recv_mb_per_s",
}
GPU_KEYS = {
    "system/gpu/utilization_percent",
    "system/gpu/memory_used_gb",
    "system/gpu/memory_percent",
    "system/gpu/temperature_c",
    "system/gpu/power_w",
}
GPU_VALUES = {
    "utilization_percent": 40.0,
    "memory_used_gb": 12.5,
    "memory_percent": 25.0,
    "temperature_c": 55.0,
    "power_w": 300.0,
}


class FakeProbe:
    """A GPU probe that returns fixed values, or raises where told to."""

    name = "fake-gpu"

    def __init__(self, values=None, *, count=1, open_error=None, read_error=None,
                 mapping=lambda visible: visible):
        self.values = dict(GPU_VALUES if values is None else values)
        self.count, self.open_error, self.read_error, self.mapping = count, open_error, read_error, mapping
        self.opened = self.closed = self.reads = 0
        self.indices = []

    def open(self):
        self.opened += 1
        if self.open_error is not None:
            raise self.open_error
        return self.count

    def device_index(self, visible):
        return self.mapping(visible)

    def read(self, index):
        self.reads += 1
        self.indices.append(index)
        if self.read_error is not None:
            raise self.read_error
        return dict(self.values)

    def close(self):
        self.closed += 1


def sampler_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def wait_for_new_sample(monitor, seen, timeout=10.0):
    """Block until ``monitor`` took a sample after the ones already seen."""
    deadline = time.monotonic() + timeout
    target = seen.get(id(monitor), 0) + 1
    while monitor.samples_taken < target:
        assert time.monotonic() < deadline, "the sampling thread took no sample"
        time.sleep(0.002)
    seen[id(monitor)] = monitor.samples_taken


def train(monitors, batches=4, loggers=(), epochs=None):
    """A Run whose every batch waits for a fresh sample, so every window has one."""
    mem = InMemoryLogger()
    seen = {}
    duration = f"{epochs}ep" if epochs else f"{batches}ba"
    with Run(max_duration=duration, callbacks=monitors, loggers=[mem, *loggers]) as run:
        for _ in run.train([[i] for i in range(batches)]):
            for monitor in monitors:
                wait_for_new_sample(monitor, seen)
    return mem, run


def only_ours(caught):
    return [str(w.message) for w in caught if issubclass(w.category, ObsbusWarning)]


# ---------------------------------------------------------------------------
# Keys and plausible values on this (CPU) machine
# ---------------------------------------------------------------------------


def test_host_keys_with_plausible_values():
    monitor = SystemMetricsMonitor(log_interval="2ba", sample_interval_s=0.01, gpu=False)
    mem, _ = train([monitor], batches=4)
    logged = {key for key in mem.data if key.startswith("system/")}
    assert logged >= HOST_KEYS
    assert logged <= HOST_KEYS | RATE_KEYS  # nothing undocumented, no GPU keys
    for key in logged:
        assert mem.steps[key] == [2, 4], key
    values = mem.most_recent_values
    assert 0.0 <= values["system/cpu_percent"] <= 100.0
    assert 0.0 <= values["system/process_cpu_percent"] <= 100.0 * psutil.cpu_count() + 1.0
    total_gb = psutil.virtual_memory().total / 1e9
    assert 0.0 < values["system/memory_used_gb"] <= total_gb
    assert 0.0 < values["system/memory_percent"] <= 100.0
    assert 0.0 < values["system/process_rss_gb"] <= total_gb
    for key in RATE_KEYS & logged:
        assert values[key] >= 0.0, key
    assert all(isinstance(values[key], float) for key in logged)  # plain floats: no sync


def test_a_window_without_a_sample_logs_nothing():
    monitor = SystemMetricsMonitor(log_interval="1ba", sample_interval_s=3600.0, gpu=False)
    mem = InMemoryLogger()
    with Run(max_duration="3ba", callbacks=[monitor], loggers=[mem]) as run:
        for _ in run.train([[0], [1], [2]]):
            pass
    assert not [key for key in mem.data if key.startswith("system/")]


def test_epoch_interval():
    monitor = SystemMetricsMonitor(log_interval="1ep", sample_interval_s=0.01, gpu=False)
    mem, _ = train([monitor], batches=2, epochs=2)
    assert mem.steps["system/cpu_percent"] == [2, 4]


# ---------------------------------------------------------------------------
# Rates and means: pure math, exact
# ---------------------------------------------------------------------------


def test_io_rates_from_two_samples_exactly():
    before = IoCounters(100.0, disk_read_bytes=1_000_000, disk_write_bytes=0,
                        net_sent_bytes=10_000_000, net_recv_bytes=2_000_000)
    after = IoCounters(104.0, disk_read_bytes=9_000_000, disk_write_bytes=2_000_000,
                       net_sent_bytes=30_000_000, net_recv_bytes=2_000_000)
    assert io_rates(before, after) == {
        "system/disk_read_mb_per_s": 2.0,
        "system/disk_write_mb_per_s": 0.5,
        "system/net_sent_mb_per_s": 5.0,
        "system/net_recv_mb_per_s": 0.0,
    }


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (IoCounters(1.0, disk_read_bytes=5), IoCounters(1.0, disk_read_bytes=9), {}),
        (IoCounters(2.0, disk_read_bytes=5), IoCounters(1.0, disk_read_bytes=9), {}),
        (IoCounters(0.0, disk_read_bytes=9_000_000), IoCounters(1.0, disk_read_bytes=5), {}),
        (IoCounters(0.0, net_sent_bytes=None), IoCounters(1.0, net_sent_bytes=1_000_000), {}),
        (IoCounters(0.0), IoCounters(0.5), {}),
    ],
    ids=["no-time", "time-backwards", "counter-reset", "unknown-at-start", "no-counters"],
)
def test_io_rates_leave_out_what_they_cannot_know(before, after, expected):
    assert io_rates(before, after) == expected


def test_across_ranks_reduces_over_the_ranks_that_have_a_key():
    gathered = [{"a": 1.0, "gpu": 5.0}, {"a": 3.0}, {"a": 2.0, "gpu": 7.0}]
    assert across_ranks(gathered, per_rank=False) == {
        "a/min": 1.0, "a/max": 3.0, "gpu/min": 5.0, "gpu/max": 7.0,
    }
    assert across_ranks(gathered, per_rank=True) == {
        "a/rank0": 1.0, "gpu/rank0": 5.0, "a/rank1": 3.0, "a/rank2": 2.0, "gpu/rank2": 7.0,
    }


VM = namedtuple("VM", "total available percent")
Disk = namedtuple("Disk", "read_bytes write_bytes")
Nic = namedtuple("Nic", "bytes_sent bytes_recv")
Mem = namedtuple("Mem", "rss")


class FakePsutil:
    """psutil's surface that the monitor uses, scripted: every reading advances a step."""

    def __init__(self, disk_error=None):
        self.step = 0
        self.disk_error = disk_error
        outer = self

        class Process:
            def cpu_percent(self, interval=None):
                return 150.0 + 10 * outer.step

            def memory_info(self):
                return Mem(rss=2_000_000_000)

        self.Process = Process

    def cpu_percent(self, interval=None):
        return 10.0 * self.step

    def virtual_memory(self):
        return VM(total=16e9, available=12e9 - 1e9 * self.step, percent=25.0 + 6.25 * self.step)

    def disk_io_counters(self):
        if self.disk_error is not None:
            raise self.disk_error
        return Disk(read_bytes=3_000_000 * self.step, write_bytes=1_000_000 * self.step)

    def net_io_counters(self, pernic=False):
        return {"lo": Nic(10**12 * self.step, 10**12 * self.step),
                "eth0": Nic(1_000_000 * self.step, 500_000 * self.step),
                "ib0": Nic(1_000_000 * self.step, 0)}


def test_a_window_reports_the_mean_of_its_samples_and_rates_over_it():
    fake, clock = FakePsutil(), [0.0]
    notes = Notes()
    sampler = Sampler(host_probe(fake, notes, clock=lambda: clock[0]), None, 3600.0, notes)
    sampler.begin()  # step 0 at t=0
    for step in (1, 2, 3):
        fake.step, clock[0] = step, float(step)
        sampler.sample()
    assert sampler.drain() == {
        "system/cpu_percent": 20.0,  # (10 + 20 + 30) / 3
        "system/memory_used_gb": 6.0,  # 16 - (11, 10, 9) GB
        "system/memory_percent": 37.5,
        "system/process_cpu_percent": 170.0,
        "system/process_rss_gb": 2.0,
        "system/disk_read_mb_per_s": 3.0,  # 9 MB over 3 s
        "system/disk_write_mb_per_s": 1.0,
        "system/net_sent_mb_per_s": 2.0,  # eth0 + ib0, loopback left out
        "system/net_recv_mb_per_s": 0.5,
    }
    assert sampler.drain() == {}  # nothing new since
    fake.step, clock[0] = 5, 5.0
    sampler.sample()
    window = sampler.drain()
    assert window["system/cpu_percent"] == 50.0
    assert window["system/disk_read_mb_per_s"] == 3.0  # 6 MB over 2 s, from the last window's end


def test_a_failing_psutil_source_is_warned_once_and_left_out(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", FakePsutil(disk_error=RuntimeError("no disks")))
    monitor = SystemMetricsMonitor(log_interval="1ba", sample_interval_s=0.01, gpu=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem, run = train([monitor], batches=3)
    assert only_ours(caught) == [
        "SystemMetricsMonitor: psutil could not read disk (RuntimeError: no disks); its keys "
        "are left out now."
    ]
    assert "system/cpu_percent" in mem.data and "system/net_sent_mb_per_s" in mem.data
    assert not [key for key in mem.data if "disk" in key]
    assert run.state.timestamp.batch == "3ba"


# ---------------------------------------------------------------------------
# The sampling thread's life
# ---------------------------------------------------------------------------


def test_the_thread_runs_during_fit_and_is_gone_after():
    monitor = SystemMetricsMonitor(sample_interval_s=0.01, gpu=False)
    alive = []
    with Run(max_duration="2ba", callbacks=[monitor]) as run:
        for _ in run.train([[0], [1]]):
            alive.append(len(sampler_threads()))
    assert alive == [1, 1]
    assert sampler_threads() == []


def test_the_thread_stops_on_exception():
    monitor = SystemMetricsMonitor(sample_interval_s=0.01, gpu=False)
    with pytest.raises(RuntimeError, match="boom"), \
            Run(max_duration="3ba", callbacks=[monitor]) as run:
        for _ in run.train([[0], [1], [2]]):
            raise RuntimeError("boom")
    assert run.state.exception is not None
    assert sampler_threads() == []


def test_the_thread_stops_at_close_without_fit_end():
    monitor = SystemMetricsMonitor(sample_interval_s=0.01, gpu=False)
    run = Run(callbacks=[monitor], handle_sigterm=False)
    monitor.fit_start(run.state, run.logger)
    assert len(sampler_threads()) == 1
    run.close()
    assert sampler_threads() == []
    run.close()  # twice is fine


def test_two_fits_restart_the_thread_and_leave_none():
    monitor = SystemMetricsMonitor(log_interval="1ba", sample_interval_s=0.01, gpu=False)
    mem = InMemoryLogger()
    run = Run(callbacks=[monitor], loggers=[mem])
    seen = {}
    for _ in range(2):
        with run.fitting():
            for _ in run.epoch([[0], [1]]):
                wait_for_new_sample(monitor, seen)
            assert len(sampler_threads()) == 1
        seen.clear()
        assert sampler_threads() == []
    run.close()
    assert mem.steps["system/cpu_percent"] == [1, 2, 3, 4]


def test_a_hung_gpu_call_does_not_hang_the_end_of_the_run():
    release = threading.Event()

    class HangingProbe(FakeProbe):
        def read(self, index):
            release.wait(10)
            return {}

    monitor = SystemMetricsMonitor(sample_interval_s=0.01, gpu=HangingProbe())
    monitor.join_timeout_s = 0.2
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Run(max_duration="1ba", callbacks=[monitor]) as run:
            for _ in run.train([[0]]):
                time.sleep(0.05)
    assert time.monotonic() - start < 5
    assert only_ours(caught) == [
        "SystemMetricsMonitor: the sampling thread did not stop within 0.2s (a GPU library call "
        "hanging?); it is a daemon thread and is left to end."
    ]
    release.set()
    deadline = time.monotonic() + 5
    while sampler_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sampler_threads() == []


# ---------------------------------------------------------------------------
# GPUs through a probe: values, and failures contained
# ---------------------------------------------------------------------------


def test_gpu_values_from_a_probe():
    probe = FakeProbe({**GPU_VALUES, "fan_percent": 30.0, "power_w": math.nan, "temperature_c": True})
    monitor = SystemMetricsMonitor(log_interval="2ba", sample_interval_s=0.01, gpu=probe)
    mem, _ = train([monitor], batches=4)
    gpu = {key: value for key, value in mem.most_recent_values.items() if "/gpu/" in key}
    assert gpu == {  # unknown fields, NaN and non-numbers are left out
        "system/gpu/utilization_percent": 40.0,
        "system/gpu/memory_used_gb": 12.5,
        "system/gpu/memory_percent": 25.0,
    }
    assert set(gpu) <= GPU_KEYS
    assert (probe.opened, probe.closed) == (1, 1)
    assert set(probe.indices) == {0}  # no CUDA here: LOCAL_RANK 0


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (FakeProbe(read_error=RuntimeError("driver gone")),
         "SystemMetricsMonitor: GPU metrics stopped: fake-gpu failed reading GPU 0: "
         "RuntimeError: driver gone. The other system metrics go on. To silence this, pass "
         "gpu=False."),
        (FakeProbe(open_error=OSError("libnvidia-ml.so.1: cannot open shared object file")),
         "SystemMetricsMonitor: GPU metrics are off: fake-gpu: OSError: libnvidia-ml.so.1: "
         "cannot open shared object file. The other system metrics go on. To silence this, "
         "pass gpu=False."),
        (FakeProbe(count=0),
         "SystemMetricsMonitor: GPU metrics are off: fake-gpu: GPU 0 wanted, 0 found. The other "
         "system metrics go on. To silence this, pass gpu=False."),
    ],
    ids=["read-raises", "open-raises", "no-gpu"],
)
def test_gpu_failures_warn_exactly_once_and_the_run_goes_on(probe, expected):
    monitor = SystemMetricsMonitor(log_interval="1ba", sample_interval_s=0.01, gpu=probe)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem, run = train([monitor], batches=4)
        mem2, _ = train([monitor], batches=2)  # a second fit doesn't try again
    assert only_ours(caught) == [expected]
    assert monitor.failures["gpu"] == 1
    assert run.state.timestamp.batch == "4ba"
    assert mem.steps["system/cpu_percent"] == [1, 2, 3, 4]
    assert mem2.steps["system/cpu_percent"] == [1, 2]
    assert not [key for key in (*mem.data, *mem2.data) if "/gpu/" in key]
    assert probe.opened == 1 and probe.closed == 1
    assert probe.reads <= 1


def test_gpu_index_given_and_mapped():
    given = FakeProbe(count=4)
    train([SystemMetricsMonitor(sample_interval_s=0.01, gpu=given, gpu_index=3)], batches=1)
    assert set(given.indices) == {3}

    mapped = FakeProbe(count=8, mapping=lambda visible: visible + 5)
    train([SystemMetricsMonitor(sample_interval_s=0.01, gpu=mapped)], batches=1)
    assert set(mapped.indices) == {5}


def test_an_unmappable_gpu_warns_and_uses_the_visible_index():
    probe = FakeProbe(count=2, mapping=lambda visible: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train([SystemMetricsMonitor(sample_interval_s=0.01, gpu=probe)], batches=1)
    assert only_ours(caught) == [
        "SystemMetricsMonitor: could not map cuda:0 through the visibility variables to "
        "fake-gpu's numbering; reporting its GPU 0. To fix, pass gpu_index=<that number>."
    ]
    assert set(probe.indices) == {0}


# ---------------------------------------------------------------------------
# The real libraries' probes, on fake modules with their API
# ---------------------------------------------------------------------------


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def fake_nvml(power_error=None):
    calls = []

    def record(name, result):
        def call(*args):
            calls.append(name)
            if name == "power" and power_error is not None:
                raise power_error
            return result
        return call

    module = SimpleNamespace(
        NVMLError=NVMLError, NVML_ERROR_NOT_SUPPORTED=3, NVML_ERROR_FUNCTION_NOT_FOUND=13,
        NVML_TEMPERATURE_GPU=0, calls=calls,
        nvmlInit=record("init", None), nvmlShutdown=record("shutdown", None),
        nvmlDeviceGetCount=record("count", 2),
        nvmlDeviceGetHandleByIndex=record("handle", "h"),
        nvmlDeviceGetUtilizationRates=record("util", SimpleNamespace(gpu=87, memory=40)),
        nvmlDeviceGetMemoryInfo=record("mem", SimpleNamespace(used=30_000_000_000,
                                                              total=80_000_000_000)),
        nvmlDeviceGetTemperature=record("temp", 64),
        nvmlDeviceGetPowerUsage=record("power", 412_500),  # milliwatts
    )
    return module


def test_nvml_probe_units():
    nvml = fake_nvml()
    probe = NvmlProbe(nvml)
    assert probe.open() == 2
    assert probe.read(1) == {
        "utilization_percent": 87.0,
        "memory_used_gb": 30.0,
        "memory_percent": 37.5,
        "temperature_c": 64.0,
        "power_w": 412.5,
    }
    probe.read(1)
    assert nvml.calls.count("handle") == 1  # handles are kept
    probe.close()
    probe.close()
    assert nvml.calls.count("shutdown") == 1


def test_nvml_probe_drops_an_unsupported_field_and_keeps_the_others():
    nvml = fake_nvml(power_error=NVMLError(3))
    probe = NvmlProbe(nvml)
    probe.open()
    assert "power_w" not in probe.read(0)
    assert set(probe.read(0)) == {"utilization_percent", "memory_used_gb", "memory_percent",
                                  "temperature_c"}
    assert nvml.calls.count("power") == 1  # not asked again


def test_nvml_probe_raises_other_errors():
    probe = NvmlProbe(fake_nvml(power_error=NVMLError(15)))  # GPU is lost
    probe.open()
    with pytest.raises(NVMLError):
        probe.read(0)


def test_nvml_probe_maps_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert NvmlProbe(fake_nvml()).device_index(1) == 3


class AmdSmiLibraryException(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code

    def get_error_code(self):
        return self.code


def fake_amdsmi(power=None):
    kinds = SimpleNamespace(EDGE="edge", HOTSPOT="hotspot")

    def temp(handle, kind, metric):
        if kind == "edge":
            raise AmdSmiLibraryException(2)  # MI300: no edge sensor
        return 71

    return SimpleNamespace(
        AmdSmiLibraryException=AmdSmiLibraryException,
        amdsmi_wrapper=SimpleNamespace(AMDSMI_STATUS_NOT_SUPPORTED=2,
                                       AMDSMI_STATUS_NOT_YET_IMPLEMENTED=3),
        AmdSmiInitFlags=SimpleNamespace(INIT_AMD_GPUS=2),
        AmdSmiMemoryType=SimpleNamespace(VRAM="vram"),
        AmdSmiTemperatureType=kinds,
        AmdSmiTemperatureMetric=SimpleNamespace(CURRENT="current"),
        amdsmi_init=lambda flags: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["h0", "h1"],
        amdsmi_get_gpu_activity=lambda h: {"gfx_activity": 93, "umc_activity": "N/A"},
        amdsmi_get_gpu_memory_usage=lambda h, kind: 48_000_000_000,
        amdsmi_get_gpu_memory_total=lambda h, kind: 192_000_000_000,
        amdsmi_get_temp_metric=temp,
        amdsmi_get_power_info=lambda h: power or {"current_socket_power": "N/A",
                                                  "average_socket_power": 550, "socket_power": 0},
    )


def test_amdsmi_probe_units_and_fallbacks():
    probe = AmdSmiProbe(fake_amdsmi())
    assert probe.open() == 2
    assert probe.read(1) == {
        "utilization_percent": 93.0,
        "memory_used_gb": 48.0,
        "memory_percent": 25.0,
        "temperature_c": 71.0,  # hotspot: no edge sensor
        "power_w": 550.0,  # average, current is N/A
    }
    probe.close()


def test_amdsmi_probe_leaves_out_a_power_it_does_not_have():
    probe = AmdSmiProbe(fake_amdsmi(power={"current_socket_power": "N/A",
                                           "average_socket_power": 0xFFFF}))
    probe.open()
    assert "power_w" not in probe.read(0)


def test_amdsmi_probe_maps_hip_then_rocr(monkeypatch):
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "4,6")
    assert AmdSmiProbe(fake_amdsmi()).device_index(0) == 6


def test_import_quietly_contains_a_library_that_prints_and_raises(tmp_path, monkeypatch, capsys):
    # What `import amdsmi` does without libamd_smi.so.
    (tmp_path / "obsbus_fake_amdsmi.py").write_text(
        "print('Unable to find libamd_smi.so library')\n"
        "_libraries = {}\n"
        "_libraries['libamd_smi.so']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module, why = import_quietly("obsbus_fake_amdsmi")
    assert module is None
    assert why == ("import obsbus_fake_amdsmi failed: KeyError('libamd_smi.so') (it printed: "
                   "'Unable to find libamd_smi.so library')")
    assert capsys.readouterr() == ("", "")


def test_gpu_true_without_a_library_names_the_extra(monkeypatch):
    # Make both libraries absent whatever this machine has installed.
    monkeypatch.setattr(_gpu_probes, "_installed", lambda name: False)
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[gpu\]'"):
        SystemMetricsMonitor(gpu=True)
    SystemMetricsMonitor(gpu=None)  # the default just goes without


# ---------------------------------------------------------------------------
# Bad arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sample_interval_s": 0}, ValueError,
         r"SystemMetricsMonitor sample_interval_s must be a finite number of seconds > 0, got 0\."),
        ({"sample_interval_s": -1.0}, ValueError, r"sample_interval_s must be .* got -1.0"),
        ({"sample_interval_s": math.nan}, ValueError, r"sample_interval_s must be .* got nan"),
        ({"sample_interval_s": "1"}, ValueError, r"sample_interval_s must be .* got '1'"),
        ({"sample_interval_s": True}, ValueError, r"sample_interval_s must be .* got True"),
        ({"log_interval": "5sp"}, ValueError,
         r"SystemMetricsMonitor log_interval '5sp' is not supported: use a positive number of "
         r"batches or epochs"),
        ({"per_rank": "yes"}, TypeError,
         r"SystemMetricsMonitor per_rank must be True or False, got 'yes'"),
        ({"gpu": "nvidia"}, TypeError,
         r"SystemMetricsMonitor gpu must be None \(GPU metrics when a GPU library is installed\), "
         r"True \(require one\), False \(none\) or a probe object with open\(\), device_index\(\), "
         r"read\(\) and close\(\); got 'nvidia'"),
        ({"gpu_index": -1}, ValueError,
         r"SystemMetricsMonitor gpu_index must be a whole number >= 0 or None, got -1"),
        ({"gpu_index": "0"}, ValueError, r"gpu_index must be a whole number >= 0 or None, got '0'"),
    ],
    ids=["interval-zero", "interval-negative", "interval-nan", "interval-str", "interval-bool",
         "log-interval-unit", "per-rank", "gpu", "gpu-index-negative", "gpu-index-str"],
)
def test_bad_args(kwargs, error, match):
    with pytest.raises(error, match=match):
        SystemMetricsMonitor(**kwargs)


# ---------------------------------------------------------------------------
# Two ranks: min/max, or every rank's values
# ---------------------------------------------------------------------------


class RankProbe(FakeProbe):
    """A node of two GPUs; rank r's is 10 + 40 r percent busy (module level: runs in workers)."""

    def __init__(self, rank):
        super().__init__({"utilization_percent": 10.0 + 40.0 * rank, "power_w": 100.0 + rank},
                         count=2)


def _two_rank_run(rank):
    os.environ["OBSBUS_RUN_NAME"] = "two-ranks"
    reduced_probe = RankProbe(rank)
    reduced = SystemMetricsMonitor(log_interval="2ba", sample_interval_s=0.01, gpu=reduced_probe)
    per_rank = SystemMetricsMonitor(log_interval="2ba", sample_interval_s=0.01, per_rank=True,
                                    gpu=RankProbe(rank))
    mem, _ = train([reduced, per_rank], batches=4)
    logged = {key: (mem.steps[key], mem.most_recent_values[key]) for key in mem.data}
    return logged, set(reduced_probe.indices)


@pytest.mark.dist
def test_two_ranks_min_max_and_per_rank_keys(tmp_path):
    outcomes = run_two_ranks(_two_rank_run, tmp_path)
    assert [gpus for _, gpus in outcomes] == [{0}, {1}]  # each rank reads its LOCAL_RANK's GPU
    results = [logged for logged, _ in outcomes]
    for rank, logged in enumerate(results):
        # Both monitors log the plain keys: this rank's own value.
        assert logged["system/gpu/utilization_percent"] == ([2, 2, 4, 4], 10.0 + 40.0 * rank)
        assert logged["system/gpu/utilization_percent/min"] == ([2, 4], 10.0)
        assert logged["system/gpu/utilization_percent/max"] == ([2, 4], 50.0)
        assert logged["system/gpu/utilization_percent/rank0"] == ([2, 4], 10.0)
        assert logged["system/gpu/utilization_percent/rank1"] == ([2, 4], 50.0)
        assert logged["system/gpu/power_w/rank1"][1] == 101.0
        for key in HOST_KEYS:
            low, high = logged[f"{key}/min"][1], logged[f"{key}/max"][1]
            assert low <= high, key
            assert {logged[f"{key}/rank0"][0][-1], logged[f"{key}/rank1"][0][-1]} == {4}
    # Both ranks log the same cross-rank values.
    assert {k: v for k, v in results[0].items() if k.endswith(("/min", "/max", "/rank0", "/rank1"))} \
        == {k: v for k, v in results[1].items() if k.endswith(("/min", "/max", "/rank0", "/rank1"))}
