"""psutil readings of the host and this process, shared by SystemMetricsMonitor and SystemProfiler.

:class:`HostProbe` reads the gauges (CPU, memory) and the cumulative disk and
network byte counters; :func:`io_rates` turns two counter readings into
MB/s. A source that raises is handed to the caller's ``on_failure`` once and
left out after, so a container without disk counters or a ``/proc`` that
denies a read costs one report, not one per sample. Nothing here imports
psutil: the caller passes the module in (tests pass a fake).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GB", "MB", "RATE_KEYS", "HostProbe", "IoCounters", "io_rates", "is_loopback"]

GB = 1e9
MB = 1e6

#: The rate keys, in order, with the :class:`IoCounters` field each is computed from.
RATE_KEYS: tuple[tuple[str, str], ...] = (
    ("system/disk_read_mb_per_s", "disk_read_bytes"),
    ("system/disk_write_mb_per_s", "disk_write_bytes"),
    ("system/net_sent_mb_per_s", "net_sent_bytes"),
    ("system/net_recv_mb_per_s", "net_recv_bytes"),
)


@dataclass(frozen=True, slots=True)
class IoCounters:
    """Cumulative byte counters at ``time_s`` (monotonic seconds); ``None`` where unknown."""

    time_s: float
    disk_read_bytes: int | None = None
    disk_write_bytes: int | None = None
    net_sent_bytes: int | None = None
    net_recv_bytes: int | None = None


def io_rates(before: IoCounters, after: IoCounters) -> dict[str, float]:
    """The disk and network rates between two readings, in MB/s (1e6 bytes per second).

    A counter unknown at either end, or that went backwards (reset), gives no key.

    Example:
        >>> io_rates(IoCounters(10.0, disk_read_bytes=0, net_sent_bytes=5_000_000),
        ...          IoCounters(12.0, disk_read_bytes=3_000_000, net_sent_bytes=9_000_000))
        {'system/disk_read_mb_per_s': 1.5, 'system/net_sent_mb_per_s': 2.0}
    """
    seconds = after.time_s - before.time_s
    if seconds <= 0:
        return {}
    rates: dict[str, float] = {}
    for key, field in RATE_KEYS:
        start, end = getattr(before, field), getattr(after, field)
        if start is not None and end is not None and end >= start:
            rates[key] = (end - start) / MB / seconds
    return rates


def is_loopback(name: str) -> bool:
    """``lo`` (Linux), ``lo0`` (macOS), ``Loopback Pseudo-Interface 1`` (Windows).

    Example:
        >>> [is_loopback(n) for n in ("lo", "lo0", "Loopback Pseudo-Interface 1", "eth0", "lox")]
        [True, True, True, False, False]
    """
    prefix, rest = name[:2], name[2:]
    return name.lower().startswith("loopback") or (prefix == "lo" and (not rest or rest.isdigit()))


def _cpu(ps: Any, process: Any) -> dict[str, float]:
    return {"system/cpu_percent": float(ps.cpu_percent(None))}


def _process_cpu(ps: Any, process: Any) -> dict[str, float]:
    return {"system/process_cpu_percent": float(process.cpu_percent(None))}


def _memory(ps: Any, process: Any) -> dict[str, float]:
    vm = ps.virtual_memory()
    return {
        "system/memory_used_gb": (vm.total - vm.available) / GB,
        "system/memory_percent": float(vm.percent),
    }


def _process_memory(ps: Any, process: Any) -> dict[str, float]:
    return {"system/process_rss_gb": process.memory_info().rss / GB}


_READINGS: dict[str, Callable[[Any, Any], dict[str, float]]] = {
    "cpu": _cpu,
    "process_cpu": _process_cpu,
    "memory": _memory,
    "process_memory": _process_memory,
}
# These measure since their previous call on the same thread: prime() makes that call.
_CPU_READINGS = ("cpu", "process_cpu")


class HostProbe:
    """psutil readings; a source that raises is reported once and left out after.

    A *source* is a name the failures are reported under and a group of
    readings taken together: when one reading of a group raises, none of the
    group's keys is given, now or later. The readings are ``cpu``
    (``system/cpu_percent``), ``process_cpu`` (``system/process_cpu_percent``),
    ``memory`` (``system/memory_used_gb``, ``system/memory_percent``) and
    ``process_memory`` (``system/process_rss_gb``); the keys come out in the
    order of ``gauges``. ``disk`` and ``net`` name the sources of the byte
    counters (``None``: not read); interfaces that are loopback are left out
    of the network counters.

    Example:
        >>> import psutil
        >>> failures = []
        >>> probe = HostProbe(psutil, {"memory": ("memory",)}, disk=None, net=None,
        ...                   on_failure=lambda source, exc: failures.append(source))
        >>> sorted(probe.gauges())
        ['system/memory_percent', 'system/memory_used_gb']
        >>> probe.counters().disk_read_bytes is None, failures
        (True, [])
    """

    def __init__(
        self,
        psutil: Any,
        gauges: Mapping[str, Sequence[str]],
        *,
        disk: str | None,
        net: str | None,
        on_failure: Callable[[str, BaseException], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unknown = [name for group in gauges.values() for name in group if name not in _READINGS]
        if unknown:
            raise ValueError(
                f"Unknown host reading {unknown[0]!r}; accepted: {', '.join(_READINGS)}."
            )
        self._ps = psutil
        self._clock = clock
        self._process = psutil.Process()
        self._gauges = {source: tuple(readings) for source, readings in gauges.items()}
        self._disk, self._net = disk, net
        self._on_failure = on_failure
        self._off: set[str] = set()

    def _try(self, source: str | None, read: Callable[[], Any]) -> Any:
        if source is None or source in self._off:
            return None
        try:
            return read()
        except Exception as exc:
            self._off.add(source)
            self._on_failure(source, exc)
            return None

    @property
    def reads_io(self) -> bool:
        """Whether a byte-counter source is asked for and has not failed."""
        return any(s is not None and s not in self._off for s in (self._disk, self._net))

    def prime(self) -> None:
        """Start the CPU percentages: the first sample's counts from now."""
        for source, readings in self._gauges.items():
            cpu = [name for name in readings if name in _CPU_READINGS]
            if cpu:
                self._try(source, functools.partial(self._group, cpu))

    def _group(self, readings: Sequence[str]) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in readings:
            out.update(_READINGS[name](self._ps, self._process))
        return out

    def gauges(self) -> dict[str, float]:
        """One reading of every gauge source still on: ``key -> value``."""
        out: dict[str, float] = {}
        for source, readings in self._gauges.items():
            values = self._try(source, functools.partial(self._group, readings))
            if values is not None:
                out.update(values)
        return out

    def counters(self) -> IoCounters:
        """The byte counters now (``None`` for a source off, failed or absent)."""
        disk = self._try(self._disk, self._ps.disk_io_counters)  # None: no disks (a container)
        net = self._try(self._net, self._network)
        return IoCounters(
            self._clock(),
            None if disk is None else int(disk.read_bytes),
            None if disk is None else int(disk.write_bytes),
            None if net is None else net[0],
            None if net is None else net[1],
        )

    def _network(self) -> tuple[int, int] | None:
        counters = self._ps.net_io_counters(pernic=True)
        nics = [c for name, c in counters.items() if not is_loopback(name)]
        if not nics:
            return None
        return sum(c.bytes_sent for c in nics), sum(c.bytes_recv for c in nics)
