"""obsbus._host_probe: the psutil readings SystemMetricsMonitor and SystemProfiler share."""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest

from obsbus._host_probe import HostProbe, IoCounters, io_rates, is_loopback


class FakePsutil:
    """psutil's surface the probe reads; ``broken`` names the calls that raise."""

    def __init__(self):
        self.calls: list[str] = []
        self.broken: set[str] = set()
        self.disk = SimpleNamespace(read_bytes=4_000_000, write_bytes=2_000_000)
        self.nics = {"lo": SimpleNamespace(bytes_sent=10**12, bytes_recv=10**12),
                     "lo0": SimpleNamespace(bytes_sent=10**12, bytes_recv=10**12),
                     "eth0": SimpleNamespace(bytes_sent=3_000_000, bytes_recv=1_000_000),
                     "ib0": SimpleNamespace(bytes_sent=1_000_000, bytes_recv=0)}  # fmt: skip
        outer = self

        class Process:
            def cpu_percent(self, interval):
                return outer._call("process_cpu", 150.0)

            def memory_info(self):
                return outer._call("memory_info", SimpleNamespace(rss=2_000_000_000))

        self.Process = Process

    def _call(self, name, value):
        self.calls.append(name)
        if name in self.broken:
            raise PermissionError(f"no {name}")
        return value

    def cpu_percent(self, interval):
        return self._call("cpu", 25.0)

    def virtual_memory(self):
        return self._call("virtual_memory",
                          SimpleNamespace(total=16e9, available=12e9, percent=25.0))  # fmt: skip

    def disk_io_counters(self):
        return self._call("disk", self.disk)

    def net_io_counters(self, pernic):
        assert pernic
        return self._call("net", self.nics)


ALL = {"cpu": ("cpu",), "memory": ("memory",), "process": ("process_cpu", "process_memory")}


def probe(ps, gauges=ALL, disk="disk", net="network", clock=lambda: 7.0):
    failures: list[tuple[str, str]] = []
    host = HostProbe(ps, gauges, disk=disk, net=net, clock=clock,
                     on_failure=lambda source, exc: failures.append((source, str(exc))))  # fmt: skip
    return host, failures


def test_gauges_in_the_order_of_the_sources_with_units():
    host, failures = probe(FakePsutil())
    values = host.gauges()
    assert list(values) == ["system/cpu_percent", "system/memory_used_gb",
                            "system/memory_percent", "system/process_cpu_percent",
                            "system/process_rss_gb"]  # fmt: skip
    assert values == {"system/cpu_percent": 25.0, "system/memory_used_gb": 4.0,
                      "system/memory_percent": 25.0, "system/process_cpu_percent": 150.0,
                      "system/process_rss_gb": 2.0}  # fmt: skip
    assert failures == []


def test_prime_reads_only_the_cpu_percentages():
    ps = FakePsutil()
    host, _ = probe(ps)
    host.prime()
    assert ps.calls == ["cpu", "process_cpu"]


def test_a_failing_reading_drops_its_whole_source_once_and_for_good():
    ps = FakePsutil()
    ps.broken.add("memory_info")
    host, failures = probe(ps)
    for _ in range(3):
        values = host.gauges()
        assert "system/process_rss_gb" not in values
        assert "system/process_cpu_percent" not in values  # same source: left out too
        assert values["system/cpu_percent"] == 25.0  # other sources go on
    assert failures == [("process", "no memory_info")]
    assert ps.calls.count("memory_info") == 1  # not asked again


def test_the_same_readings_grouped_otherwise_fail_otherwise():
    # SystemProfiler's grouping: CPU (machine and process) together, memory together.
    ps = FakePsutil()
    ps.broken.add("virtual_memory")
    gauges = {"cpu": ("cpu", "process_cpu"), "memory": ("memory", "process_memory")}
    host, failures = probe(ps, gauges=gauges, disk=None, net=None)
    assert host.gauges() == {"system/cpu_percent": 25.0, "system/process_cpu_percent": 150.0}
    assert failures == [("memory", "no virtual_memory")]


def test_counters_leave_out_loopback_and_what_is_not_asked_for():
    ps = FakePsutil()
    host, _ = probe(ps)
    assert host.counters() == IoCounters(7.0, 4_000_000, 2_000_000, 4_000_000, 1_000_000)
    host, _ = probe(ps, disk="disk", net=None)
    assert host.counters() == IoCounters(7.0, 4_000_000, 2_000_000, None, None)
    ps.nics = {"lo": ps.nics["lo"]}  # loopback only: no network counters, not zeros
    host, failures = probe(ps, disk=None)
    assert host.counters() == IoCounters(7.0)
    assert failures == []


def test_reads_io_until_every_counter_source_failed():
    ps = FakePsutil()
    assert probe(ps, disk=None, net=None)[0].reads_io is False
    ps.broken |= {"disk", "net"}
    host, failures = probe(ps)
    assert host.reads_io is True
    assert host.counters() == IoCounters(7.0)
    assert host.reads_io is False
    assert [source for source, _ in failures] == ["disk", "network"]


def test_unknown_reading_lists_the_known_ones():
    with pytest.raises(ValueError, match="Unknown host reading 'gpu'; accepted: cpu, process_cpu"):
        probe(FakePsutil(), gauges={"cpu": ("cpu", "gpu")})


def test_the_real_psutil():
    host, failures = probe(psutil, clock=lambda: 1.0)
    host.prime()
    values = host.gauges()
    assert 0.0 <= values["system/cpu_percent"] <= 100.0
    assert 0 < values["system/memory_used_gb"] <= psutil.virtual_memory().total / 1e9
    assert values["system/process_rss_gb"] > 0
    assert failures == []


def test_io_rates_skip_unknown_and_reset_counters_and_a_clock_that_did_not_move():
    before = IoCounters(10.0, 0, 5_000_000, 1_000_000, None)
    after = IoCounters(12.0, 3_000_000, 1_000_000, 9_000_000, 4)
    assert io_rates(before, after) == {"system/disk_read_mb_per_s": 1.5,
                                       "system/net_sent_mb_per_s": 4.0}  # fmt: skip
    assert io_rates(after, after) == {}


@pytest.mark.parametrize(
    ("name", "loopback"),
    [("lo", True), ("lo0", True), ("lo12", True), ("Loopback Pseudo-Interface 1", True),
     ("eth0", False), ("lox", False), ("wlo1", False), ("", False)],
)  # fmt: skip
def test_is_loopback(name, loopback):
    assert is_loopback(name) is loopback
