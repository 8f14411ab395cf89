"""SystemProfiler: psutil counters in the trace, only inside recorded windows, with units."""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from types import SimpleNamespace

import psutil
import pytest
import torch.nn.functional as F

from obsbus import Callback, ObsbusWarning, Run, Trainer
from obsbus.profiler.json_trace_handler import JSONTraceHandler
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.schedule import cyclic_schedule
from obsbus.profiler.system_profiler import THREAD_NAME, SystemProfiler, _Readings
from obsbus.profiler.trace_handler import TraceHandler

from ..helpers import regression_data, tiny_model
from ._trace_checks import check_trace, counters, span_range

INTERVAL = 0.01
CPU = {"system/cpu_percent", "system/process_cpu_percent"}
MEMORY = {"system/memory_used_gb", "system/memory_percent", "system/process_rss_gb"}
DISK = {"system/disk_read_mb_per_s", "system/disk_write_mb_per_s"}
NET = {"system/net_sent_mb_per_s", "system/net_recv_mb_per_s"}


def everything(**kwargs):
    return SystemProfiler(
        profile_cpu=True, profile_memory=True, profile_disk=True, profile_net=True,
        stats_thread_interval_seconds=INTERVAL, **kwargs,
    )  # fmt: skip


def sampler_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


class Phases(Callback):
    """The wall-clock span (ns) of every batch, with the profiler's action for it."""

    def __init__(self):
        self.batches = []  # (action, start_ns, end_ns)
        self._start = 0

    def before_dataloader(self, state, logger):
        self._start = time.time_ns()

    def batch_end(self, state, logger):
        self.batches.append((state.profiler.action, self._start, time.time_ns()))


class Counters(TraceHandler):
    def __init__(self):
        self.events = []  # (name, wall_ns, values, batch)

    def process_counter_event(self, name, categories, timestamp, wall_ns, values):
        assert categories == ("system",)
        self.events.append((name, wall_ns, dict(values), timestamp.batch.value))


def run_batches(system, schedule, handlers, batches, seconds=0.03, callbacks=(), folder=None):
    profiler = Profiler(schedule, handlers)
    with Run(max_duration=f"{batches}ba", callbacks=[system, *callbacks], profiler=profiler,
             run_name="r", run_folder=folder or "run") as run:  # fmt: skip
        for _ in run.train([[i] for i in range(batches)]):
            time.sleep(seconds)
    return run


def test_counters_land_only_inside_saved_windows_with_plausible_units(tmp_path):
    # Cycles of 5 batches: 2 skipped, 1 warm-up, 2 recorded (the second saves). Warm-up
    # batches are sampled, as Composer's counter markers record in them.
    handler, phases = JSONTraceHandler(merged_trace_filename=None), Phases()
    system = everything()
    schedule = cyclic_schedule(wait=2, warmup=1, active=2, repeat=0)
    run_batches(system, schedule, [handler], 10, callbacks=[phases], folder=tmp_path / "run")

    assert [p.name for p in handler.saved_traces] == ["ep1-ba5-rank0.json", "ep1-ba10-rank0.json"]
    quiet = [(s, e) for action, s, e in phases.batches if action == "skip"]
    warm = [(s, e) for action, s, e in phases.batches if action == "warmup"]
    assert len(quiet) == 4 and len(warm) == 2
    total_gb = psutil.virtual_memory().total / 1e9
    limits = {
        "system/cpu_percent": (0, 100),
        "system/process_cpu_percent": (0, 100 * os.cpu_count()),
        "system/memory_used_gb": (0, total_gb),
        "system/memory_percent": (0, 100),
        "system/process_rss_gb": (0.01, total_gb),  # a Python with torch holds >10 MB
    }
    in_warmup = 0
    for path in handler.saved_traces:
        events = check_trace(path)
        first, last = span_range(events)
        samples = counters(events, "system/")
        names = {e["name"] for e in samples}
        # Two 30 ms batches sampled every 10 ms: several samples of each counter.
        assert CPU | MEMORY <= names <= CPU | MEMORY | DISK | NET
        assert sum(e["name"] == "system/cpu_percent" for e in samples) >= 2
        for e in samples:
            assert first <= e["ts"] <= last, (e, first, last)
            assert not any(s <= e["ts"] * 1000 <= end for s, end in quiet), e
            in_warmup += any(s <= e["ts"] * 1000 <= end for s, end in warm)
            assert e["cat"] == "system" and list(e["args"]) == ["value"]
            value = e["args"]["value"]
            low, high = limits.get(e["name"], (0, math.inf))  # rates: >= 0
            assert low <= value <= high, e
    assert in_warmup > 0
    assert not sampler_threads()


def test_skip_takes_no_samples():
    system = everything()
    seen = []

    class Alive(Callback):
        def batch_end(self, state, logger):
            seen.append(len(sampler_threads()))

    run_batches(system, lambda state: ProfilerAction.SKIP, [Counters()], 4, callbacks=[Alive()])
    assert seen == [1, 1, 1, 1]  # the thread is up, waiting
    assert system.samples_taken == 0
    assert not sampler_threads()


def test_counter_time_is_the_sample_time_and_batch_the_emitting_one():
    handler = Counters()
    phases = Phases()
    system = SystemProfiler(stats_thread_interval_seconds=INTERVAL)
    run_batches(system, lambda state: ProfilerAction.ACTIVE, [handler], 2, seconds=0.05,
                callbacks=[phases])  # fmt: skip
    assert {name for name, *_ in handler.events} == CPU
    start, end = phases.batches[0][1], phases.batches[-1][2]
    stamps = [wall for _, wall, _, _ in handler.events]
    assert all(start <= wall <= end for wall in stamps)
    assert len(set(stamps)) > 2  # the times samples were taken, not the 2 batch ends
    assert {batch for *_, batch in handler.events} <= {1, 2}  # batches done at emission


def test_thread_runs_across_two_fits_and_stops_at_close():
    system = SystemProfiler(stats_thread_interval_seconds=INTERVAL)
    profiler = Profiler(lambda state: ProfilerAction.ACTIVE, [Counters()])
    trainer = Trainer(tiny_model(), regression_data(3), "1ep", loss_fn=F.mse_loss, device="cpu",
                      callbacks=[system], profiler=profiler)  # fmt: skip
    trainer.fit()
    assert len(sampler_threads()) == 1
    trainer.fit(duration="2ba")
    assert len(sampler_threads()) == 1
    trainer.close()
    trainer.close()
    assert not sampler_threads()


def test_without_a_profiler_it_warns_once_and_does_nothing():
    system = SystemProfiler(stats_thread_interval_seconds=INTERVAL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Run(max_duration="3ba", callbacks=[system]) as run:
            for _ in run.train([[1], [2], [3]]):
                assert not sampler_threads()
    mine = [str(w.message) for w in caught if issubclass(w.category, ObsbusWarning)]
    assert mine == [
        "SystemProfiler does nothing: the run has no profiler. To fix, pass "
        "profiler=Profiler(schedule, trace_handlers) to the Trainer or Run."
    ]
    assert system.samples_taken == 0


def test_a_crash_saves_the_counters_recorded_before_it(tmp_path):
    handler = JSONTraceHandler(merged_trace_filename=None)
    system = SystemProfiler(stats_thread_interval_seconds=INTERVAL)
    profiler = Profiler(lambda state: ProfilerAction.ACTIVE, [handler])
    with pytest.raises(RuntimeError, match="boom"):  # noqa: SIM117
        with Run(max_duration="5ba", callbacks=[system], profiler=profiler,
                 run_folder=tmp_path / "run") as run:  # fmt: skip
            for (i,) in run.train([[i] for i in range(5)]):
                time.sleep(0.03)
                if i == 2:
                    raise RuntimeError("boom")
    events = check_trace(handler.saved_traces[-1])
    first, last = span_range(events)
    samples = counters(events, "system/")
    assert {e["name"] for e in samples} == CPU
    assert all(first <= e["ts"] <= last for e in samples)
    assert not sampler_threads()


# ------------------------------------------------------------------ units, with a fake psutil
class FakePsutil:
    """psutil's surface that SystemProfiler reads, with counters a test moves."""

    def __init__(self):
        self.disk = SimpleNamespace(read_bytes=0, write_bytes=0)
        self.nics = {"lo": SimpleNamespace(bytes_sent=0, bytes_recv=0),
                     "eth0": SimpleNamespace(bytes_sent=0, bytes_recv=0),
                     "eth1": SimpleNamespace(bytes_sent=0, bytes_recv=0)}  # fmt: skip
        self.gate = None  # a threading.Event that cpu_percent waits on, once set
        self.broken = set()

    def Process(self):  # psutil.Process
        return SimpleNamespace(cpu_percent=lambda interval: 150.0,
                               memory_info=lambda: SimpleNamespace(rss=2_000_000_000))  # fmt: skip

    def cpu_percent(self, interval):
        if self.gate is not None:
            self.gate.wait()
        return 25.0

    def virtual_memory(self):
        if "memory" in self.broken:
            raise PermissionError("no /proc/meminfo")
        return SimpleNamespace(total=16_000_000_000, available=12_000_000_000, percent=25.0)

    def disk_io_counters(self):
        return self.disk

    def net_io_counters(self, pernic):
        assert pernic
        return self.nics


def test_rates_are_mb_per_second_between_samples_and_skip_loopback_and_resets():
    ps, now = FakePsutil(), [100.0]
    readings = _Readings(ps, frozenset({"cpu", "memory", "disk", "net"}), lambda: now[0])
    readings.baseline()
    now[0] += 2.0
    ps.disk.read_bytes, ps.disk.write_bytes = 3_000_000, 1_000_000
    ps.nics["lo"].bytes_sent = 10**12  # loopback: left out
    ps.nics["eth0"].bytes_sent, ps.nics["eth1"].bytes_sent = 1_000_000, 3_000_000
    ps.nics["eth0"].bytes_recv = 500_000
    assert readings.read() == {
        "system/cpu_percent": 25.0,
        "system/process_cpu_percent": 150.0,
        "system/memory_used_gb": 4.0,
        "system/memory_percent": 25.0,
        "system/process_rss_gb": 2.0,
        "system/disk_read_mb_per_s": 1.5,
        "system/disk_write_mb_per_s": 0.5,
        "system/net_sent_mb_per_s": 2.0,
        "system/net_recv_mb_per_s": 0.25,
    }
    now[0] += 0.5  # the next rate counts from the previous sample, not from the start
    ps.disk.read_bytes += 1_000_000
    ps.disk.write_bytes = 0  # a counter that went backwards (reset): no rate, not a negative one
    rates = readings.read()
    assert rates["system/disk_read_mb_per_s"] == 2.0
    assert "system/disk_write_mb_per_s" not in rates
    assert rates["system/net_sent_mb_per_s"] == 0.0


def test_a_source_that_fails_is_warned_once_and_the_others_go_on():
    ps = FakePsutil()
    ps.broken.add("memory")
    handler = Counters()
    system = SystemProfiler(profile_memory=True, stats_thread_interval_seconds=INTERVAL)
    system._psutil = ps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_batches(system, lambda state: ProfilerAction.ACTIVE, [handler], 3)
    mine = [str(w.message) for w in caught if issubclass(w.category, ObsbusWarning)]
    assert mine == [
        "SystemProfiler: psutil could not read memory (PermissionError: no /proc/meminfo)."
    ]
    assert {name for name, *_ in handler.events} == CPU
    assert {values["value"] for name, _, values, _ in handler.events} == {25.0, 150.0}


def test_a_hung_psutil_blocks_neither_the_steps_nor_close():
    ps = FakePsutil()
    ps.gate = threading.Event()
    system = SystemProfiler(stats_thread_interval_seconds=INTERVAL)
    system._psutil = ps
    system.join_timeout_s = 0.2
    steps = []

    class Clock(Callback):
        def before_dataloader(self, state, logger):
            self.t0 = time.perf_counter()

        def batch_end(self, state, logger):
            steps.append(time.perf_counter() - self.t0)

    try:
        with pytest.warns(ObsbusWarning, match=r"did not stop within 0.2s"):
            run_batches(system, lambda state: ProfilerAction.ACTIVE, [Counters()], 3,
                        callbacks=[Clock()])  # fmt: skip
        assert len(steps) == 3 and max(steps) < 0.5  # 30 ms of sleep, no wait for the thread
        assert system.samples_taken == 0
    finally:
        ps.gate.set()  # let the thread end
    deadline = time.monotonic() + 5
    while sampler_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not sampler_threads()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"stats_thread_interval_seconds": 0}, ValueError, r"seconds > 0, got 0\."),
        ({"stats_thread_interval_seconds": -0.5}, ValueError, r"seconds > 0, got -0\.5\."),
        ({"stats_thread_interval_seconds": math.nan}, ValueError, r"got nan\."),
        ({"stats_thread_interval_seconds": "0.5"}, TypeError, r"seconds > 0, got '0\.5'\."),
        ({"stats_thread_interval_seconds": True}, TypeError, r"got True\."),
        ({"profile_memory": "yes"}, TypeError, r"profile_memory must be True or False, got 'yes'"),
        ({"profile_cpu": False}, ValueError, r"records nothing.*set at least one to True"),
    ],
    ids=["zero", "negative", "nan", "string", "bool", "flag", "nothing"],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        SystemProfiler(**kwargs)
