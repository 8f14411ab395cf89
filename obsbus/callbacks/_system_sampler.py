"""SystemMetricsMonitor's sampling: the daemon thread, this rank's GPU, failures noted. Not API.

:class:`Sampler` takes a sample every interval off the training thread
(host readings through :class:`~obsbus._host_probe.HostProbe`, GPU readings
through :class:`GpuSource`) and sums it into the current window;
:class:`Notes` collects what failed there, to be warned once per kind from
the training thread.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from obsbus import dist
from obsbus._check import is_number
from obsbus._host_probe import HostProbe, IoCounters, io_rates
from obsbus.callbacks._gpu_probes import FIELDS, GpuProbe, Note, describe
from obsbus.errors import ObsbusWarning
from obsbus.state import State

__all__ = ["THREAD_NAME", "GpuSource", "Notes", "Sampler", "host_probe", "visible_gpu"]

THREAD_NAME = "obsbus-system-metrics"


class Notes:
    """Failures seen on the sampling thread, warned once per kind from the training thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self.counts: Counter[str] = Counter()

    def __call__(self, kind: str, message: str) -> None:
        with self._lock:
            self.counts[kind] += 1
            if self.counts[kind] == 1:
                self._pending.append(message)

    def emit(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for message in pending:
            warnings.warn(f"SystemMetricsMonitor: {message}", ObsbusWarning, stacklevel=4)


def host_probe(psutil: Any, note: Note, clock: Callable[[], float] = time.monotonic) -> HostProbe:
    """The monitor's host readings: CPU, memory and this process (CPU and RSS) as three sources."""

    def on_failure(source: str, exc: BaseException) -> None:
        note(
            f"psutil-{source}",
            f"psutil could not read {source} ({describe(exc)}); its keys are left out now.",
        )

    gauges = {"cpu": ("cpu",), "memory": ("memory",), "process": ("process_cpu", "process_memory")}
    return HostProbe(psutil, gauges, disk="disk", net="network", on_failure=on_failure, clock=clock)


class Sampler:
    """The daemon thread: a sample every ``interval`` s, summed into the current window."""

    def __init__(self, host: HostProbe, gpu: GpuSource | None, interval: float, note: Note) -> None:
        self._host, self._gpu, self._interval, self._note = host, gpu, interval, note
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._window = 0
        self._start_io: IoCounters | None = None
        self._end_io: IoCounters | None = None
        self.samples_taken = 0
        self.thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    def _run(self) -> None:
        try:
            self.begin()
            while not self._stop.wait(self._interval):
                self.sample()
        except Exception as exc:
            self._note("thread", f"the sampling thread failed ({describe(exc)}) and stopped.")
        finally:
            if self._gpu is not None:
                self._gpu.close()

    def begin(self) -> None:
        """Open the GPU library, prime the CPU counters, read the first byte counters."""
        if self._gpu is not None:
            self._gpu.open()
        self._host.prime()
        start = self._host.counters()
        with self._lock:
            self._start_io = start

    def sample(self) -> None:
        """Take one sample into the current window."""
        values = self._host.gauges()
        if self._gpu is not None:
            for field, value in self._gpu.read().items():
                values[f"system/gpu/{field}"] = value
        io = self._host.counters()
        with self._lock:
            for key, value in values.items():
                self._sums[key] = self._sums.get(key, 0.0) + value
                self._counts[key] = self._counts.get(key, 0) + 1
            self._end_io = io
            self._window += 1
            self.samples_taken += 1

    def drain(self) -> dict[str, float]:
        """The window's means and rates; empty when no sample was taken since the last drain."""
        with self._lock:
            if not self._window:
                return {}
            out = {key: total / self._counts[key] for key, total in self._sums.items()}
            if self._start_io is not None and self._end_io is not None:
                out.update(io_rates(self._start_io, self._end_io))
            self._start_io = self._end_io
            self._sums, self._counts, self._window = {}, {}, 0
            return out

    def stop(self, timeout: float) -> bool:
        self._stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)
        return not self.thread.is_alive()


def visible_gpu(state: State) -> int:
    """The ``cuda:N`` index this process trains on (LOCAL_RANK when it can't tell)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return dist.get_local_rank()
    if state.device is not None:
        try:
            device = torch.device(state.device)
        except (TypeError, RuntimeError, ValueError):
            device = None
        if device is not None and device.type == "cuda" and device.index is not None:
            return int(device.index)
    if torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    return dist.get_local_rank()


class GpuSource:
    """This rank's GPU through the first probe that opens; any failure turns GPU metrics off."""

    def __init__(
        self,
        candidates: Sequence[tuple[str, GpuProbe | None, str | None]],
        visible: int,
        index: int | None,
        note: Note,
        turn_off: Callable[[], None],
    ) -> None:
        self._candidates = candidates
        self._visible = visible
        self._index = index
        self._note = note
        self._turn_off = turn_off
        self.probe: GpuProbe | None = None
        self.index = 0

    def open(self) -> None:
        reasons = []
        for name, probe, why in self._candidates:
            if probe is None:
                reasons.append(f"{name}: {why}")
                continue
            try:
                count = probe.open()
                index = self._index
                if index is None:
                    index = probe.device_index(self._visible)
                    if index is None:
                        index = self._visible
                        self._note(
                            "gpu-map",
                            f"could not map cuda:{self._visible} through the "
                            f"visibility variables to {name}'s numbering; reporting its GPU "
                            f"{index}. To fix, pass gpu_index=<that number>.",
                        )
                if index < count:
                    self.probe, self.index = probe, index
                    return
                reasons.append(f"{name}: GPU {index} wanted, {count} found")
            except Exception as exc:
                reasons.append(f"{name}: {describe(exc)}")
            close_quietly(probe)
        if reasons:
            self._note(
                "gpu",
                "GPU metrics are off: " + "; ".join(reasons) + ". The other system "
                "metrics go on. To silence this, pass gpu=False.",
            )
        self._turn_off()

    def read(self) -> dict[str, float]:
        probe = self.probe
        if probe is None:
            return {}
        try:
            values = probe.read(self.index)
            return {
                field: float(value)
                for field, value in values.items()
                if field in FIELDS and is_number(value) and math.isfinite(value)
            }
        except Exception as exc:
            self._note(
                "gpu",
                f"GPU metrics stopped: {probe.name} failed reading GPU "
                f"{self.index}: {describe(exc)}. The other system metrics go on. To silence "
                "this, pass gpu=False.",
            )
            self.close()
            self._turn_off()
            return {}

    def close(self) -> None:
        probe, self.probe = self.probe, None
        close_quietly(probe)


def close_quietly(probe: GpuProbe | None) -> None:
    if probe is not None:
        # Closing a library that failed to open or read: nothing more to say.
        with contextlib.suppress(Exception):
            probe.close()
