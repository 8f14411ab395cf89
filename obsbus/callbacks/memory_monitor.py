"""Log the CUDA/ROCm caching allocator's memory statistics, or the host's, at an interval."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Mapping
from typing import Any

from typing_extensions import override

from obsbus import dist
from obsbus._check import check_int, check_mapping
from obsbus.callback import Callback
from obsbus.interval import LogInterval, at_interval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike

__all__ = ["MemoryMonitor", "cuda_memory_report"]

GB = 1e9
"""Bytes in a gigabyte: every ``*_mem`` key is in decimal GB (Composer's unit), not GiB."""

#: ``torch.cuda.memory_stats()`` key -> obsbus key (after ``memory/``), in logging order.
CUDA_KEYS: dict[str, str] = {
    "allocated_bytes.all.current": "current_allocated_mem",
    "active_bytes.all.current": "current_active_mem",
    "inactive_split_bytes.all.current": "current_inactive_mem",
    "reserved_bytes.all.current": "current_reserved_mem",
    "allocated_bytes.all.peak": "peak_allocated_mem",
    "active_bytes.all.peak": "peak_active_mem",
    "inactive_split_bytes.all.peak": "peak_inactive_mem",
    "reserved_bytes.all.peak": "peak_reserved_mem",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "num_ooms",
}
_REDUCTIONS = ("min", "avg", "max")


def cuda_memory_report(
    stats: Mapping[str, Any], keys: Mapping[str, str] | None = None
) -> dict[str, float | int]:
    """Turn a ``torch.cuda.memory_stats()`` dict into MemoryMonitor's metrics.

    Byte counts become GB (1e9 bytes), counts stay ints; keys missing from
    ``stats`` are left out (an uninitialized device gives ``{}``). ``keys``
    maps ``memory_stats()`` names to the names logged after ``memory/``
    (default :data:`CUDA_KEYS`); as in Composer, ``bytes`` in a logged name
    of a byte count becomes ``gigabytes`` (``{"allocated_bytes.all.current":
    "allocated_bytes"}`` logs ``memory/allocated_gigabytes``).

    Example:
        >>> cuda_memory_report({"allocated_bytes.all.current": 2_500_000_000,
        ...                     "num_alloc_retries": 3, "segment.all.current": 7})
        {'memory/current_allocated_mem': 2.5, 'memory/alloc_retries': 3}
    """
    report: dict[str, float | int] = {}
    for torch_key, name in (CUDA_KEYS if keys is None else keys).items():
        if torch_key in stats:
            value = stats[torch_key]
            if "bytes" in torch_key:
                report[f"memory/{name.replace('bytes', 'gigabytes')}"] = value / GB
            else:
                report[f"memory/{name}"] = int(value)
    return report


@functools.cache
def _process(pid: int) -> Any:
    """One psutil.Process per pid: building it costs ~36 µs (bench finding M3)."""
    import psutil

    return psutil.Process(pid)


_STATM: list[int | None] = [None]  # an open descriptor of /proc/self/statm (-1: none)


def _forget_statm() -> None:
    # A forked child has the parent's descriptor, of the parent's /proc/self: close it, and
    # open its own at the next reading.
    fd, _STATM[0] = _STATM[0], None
    _PEAK_BYTES[0] = 0  # the child's peak is its own (getrusage's counts from the fork)
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_statm)


def _rss_bytes() -> int:
    """This process's RSS in bytes.

    On Linux from ``/proc/self/statm`` through a descriptor kept open (one
    ``pread``, ~3 µs; a forked child opens its own), elsewhere from psutil
    (~28 µs; bench finding M3). No ``getpid`` per call: a system call
    costs tens of µs on some virtual machines when it follows a torch step.
    """
    fd = _STATM[0]
    if fd is None:
        fd = -1
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                fd = os.open("/proc/self/statm", os.O_RDONLY)
        _STATM[0] = fd
    if fd >= 0:
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE_SIZE
    rss: int = _process(os.getpid()).memory_info().rss
    return rss


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_PEAK_BYTES = [0]  # the highest host RSS this process has reported, in bytes


def host_memory_report() -> dict[str, float]:
    """This process's resident memory now and at its peak, in GB (/proc or psutil, getrusage).

    Both are bytes before the one division by :data:`GB`: ``ru_maxrss`` is
    KiB on Linux and bytes on macOS. The peak is never below the current
    value, nor below a peak reported before: the kernel's high-water mark
    trails the live counters (it is refreshed lazily, from per-CPU counts),
    so ``ru_maxrss`` alone can read a few hundred KiB under ``/proc``'s RSS
    taken a moment earlier. Where there is no ``getrusage`` (Windows) the
    peak is the highest value seen here.
    """
    current = _rss_bytes()
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = peak if sys.platform == "darwin" else peak * 1024
    except ImportError:  # pragma: no cover - Windows has no getrusage
        peak = 0
    peak = _PEAK_BYTES[0] = max(peak, current, _PEAK_BYTES[0])
    return {"memory/host_rss_mem": current / GB, "memory/host_peak_rss_mem": peak / GB}


def _is_oom(exc: BaseException | None, oom: type[BaseException]) -> bool:
    """Whether ``exc`` is, or was raised from, an out-of-memory error."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, oom):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class MemoryMonitor(Callback):
    """Logs device memory from the caching allocator, or host memory on CPU, every interval.

    On CUDA and ROCm (``torch.cuda`` on both) it reads
    ``torch.cuda.memory_stats()``: a host-side query of the allocator's
    counters (taken under its mutex) that launches nothing and waits for no
    stream, so it does not sync the device. It is still only called at log
    steps. On a run that is not on a GPU it logs the process's resident
    memory (psutil) instead of zeros.

    Keys (``*_mem`` in GB = 1e9 bytes, as Composer; divide by 1.073741824 for GiB):

    - ``memory/current_allocated_mem``: GB held by tensors now.
    - ``memory/current_active_mem``: GB in active blocks now.
    - ``memory/current_inactive_mem``: GB in inactive, non-releasable split blocks.
    - ``memory/current_reserved_mem``: GB the allocator holds from the driver.
    - ``memory/peak_allocated_mem``, ``memory/peak_active_mem``,
      ``memory/peak_inactive_mem``, ``memory/peak_reserved_mem``: GB, the
      peaks of the four above since process start (or since the previous
      log with ``reset_peaks=True``).
    - ``memory/alloc_retries``: count of cudaMalloc failures that flushed the
      cache and retried, since process start.
    - ``memory/num_ooms``: count of out-of-memory errors, since process start.
    - ``memory/host_rss_mem``: GB, this process's resident set now. Logged
      when the run is not on a GPU (or with ``host_memory=True``).
    - ``memory/host_peak_rss_mem``: GB, this process's peak resident set since
      it started (``getrusage``; never reset). Logged with ``host_rss_mem``,
      and never below it (see :func:`host_memory_report`).

    Units are declared (:meth:`metric_units`): ``GB`` for every byte key
    (the ``_min``/``_avg``/``_max`` ones too, and the names ``memory_keys``
    gives byte counts); the counts have none.

    With ``reduce_across_ranks=True`` every key above also gets
    ``{key}_min``, ``{key}_avg`` and ``{key}_max`` over the ranks (Composer's
    names, e.g. ``memory/peak_allocated_mem_max``), from one all_reduce of a
    ``[world_size, n_keys]`` table per log step; with Composer's
    ``dist_aggregate_batch_interval=N``, at the log steps whose batch is a
    multiple of ``N`` only. Every rank must then run the
    monitor with the same interval, on the same kind of device. On a GPU
    backend those values are logged as device tensors (no sync here).

    When a run ends with ``torch.cuda.OutOfMemoryError`` (or an error raised
    from one), this rank's keys are logged once more at ``exception`` (no
    reduction), so the last picture reaches the destinations before they
    flush.

    Args:
        log_interval: ``"10ba"`` or ``"1ep"``; a bare int counts batches.
        reduce_across_ranks: also log min/avg/max over ranks. Off by default
            (as Composer): it puts a collective in every log step.
        reset_peaks: reset the allocator's peak counters after each log, so
            ``peak_*`` is the peak since the previous log. Off by default: it
            changes what ``torch.cuda.max_memory_allocated()`` returns to the
            rest of the program, so by default peaks run from process start.
        host_memory: log the ``host_*`` keys: ``None`` (default) when the run
            is not on a GPU, ``True`` always, ``False`` never.
        memory_keys: Composer's argument: ``torch.cuda.memory_stats()`` names
            to log, mapped to the names they are logged under (after
            ``memory/``); default the keys above.
        dist_aggregate_batch_interval: Composer's argument: also log the
            min/avg/max over ranks every that many batches (``None``: as
            ``reduce_across_ranks`` says). Give it or ``reduce_across_ranks``.

    Example:
        >>> from obsbus import Run
        >>> from obsbus.loggers import InMemoryLogger
        >>> mem = InMemoryLogger()
        >>> with Run(max_duration="2ba", callbacks=[MemoryMonitor()], loggers=[mem]) as run:
        ...     for batch in run.train([[1, 2], [3, 4]]):
        ...         pass
        >>> mem.most_recent_values["memory/host_rss_mem"] > 0
        True
        >>> "memory/current_allocated_mem" in mem.most_recent_values  # CPU run
        False
    """

    def __init__(
        self,
        log_interval: TimeLike = "1ba",
        *,
        reduce_across_ranks: bool = False,
        reset_peaks: bool = False,
        host_memory: bool | None = None,
        memory_keys: Mapping[str, str] | None = None,
        dist_aggregate_batch_interval: int | None = None,
    ) -> None:
        if isinstance(log_interval, Mapping):  # MemoryMonitor({...}): Composer's first argument
            raise TypeError(
                f"MemoryMonitor log_interval must be a time such as '1ba', got {log_interval!r}. "
                "Composer's first argument is memory_keys; obsbus's is log_interval. To fix, "
                "write MemoryMonitor(memory_keys={...})."
            )
        self.log_interval = LogInterval(log_interval, "MemoryMonitor log_interval")
        keys = check_mapping(
            "MemoryMonitor",
            "memory_keys",
            memory_keys,
            values=lambda v: isinstance(v, str) and bool(v),
            accepted_values="non-empty str",
        )
        self.memory_keys = keys or None
        self.dist_aggregate_batch_interval = (
            None
            if dist_aggregate_batch_interval is None
            else check_int(
                "MemoryMonitor",
                "dist_aggregate_batch_interval",
                dist_aggregate_batch_interval,
                minimum=1,
            )
        )
        if self.dist_aggregate_batch_interval is not None and reduce_across_ranks is True:
            raise ValueError(
                "MemoryMonitor: reduce_across_ranks=True (every log step) and "
                f"dist_aggregate_batch_interval={dist_aggregate_batch_interval!r} (every that "
                "many batches) both set when to reduce. To fix, give one."
            )
        for name, value in (
            ("reduce_across_ranks", reduce_across_ranks),
            ("reset_peaks", reset_peaks),
        ):
            if not isinstance(value, bool):
                raise TypeError(f"MemoryMonitor {name} must be True or False, got {value!r}.")
        if host_memory is not None and not isinstance(host_memory, bool):
            raise TypeError(
                f"MemoryMonitor host_memory must be None, True or False, got {host_memory!r}."
            )
        self.reduce_across_ranks = reduce_across_ranks
        self.reset_peaks = reset_peaks
        self.host_memory = host_memory
        self._cuda: bool | None = None  # decided at fit_start (or the first log)
        self._cuda_index: int | None = None

    @override
    def metric_units(self) -> dict[str, str]:
        names = [n for t, n in (self.memory_keys or CUDA_KEYS).items() if "bytes" in t]
        keys = [f"memory/{n.replace('bytes', 'gigabytes')}" for n in names]
        keys += ["memory/host_rss_mem", "memory/host_peak_rss_mem"]
        suffixes = ("", *(f"_{name}" for name in _REDUCTIONS))
        return {f"{key}{suffix}": "GB" for key in keys for suffix in suffixes}

    def _find_device(self, state: State) -> None:
        torch = sys.modules.get("torch")
        self._cuda, self._cuda_index = False, None
        if torch is None:
            return
        device = state.device
        parameters = getattr(state.model, "parameters", None)
        if device is None and callable(parameters):
            first = next(iter(parameters()), None)
            device = getattr(first, "device", None)
        if device is None:
            self._cuda = bool(torch.cuda.is_initialized())
            return
        device = torch.device(device)
        self._cuda = device.type == "cuda"
        self._cuda_index = device.index

    def _report(self, state: State) -> dict[str, Any]:
        if self._cuda is None:
            self._find_device(state)
        report: dict[str, Any] = {}
        if self._cuda:
            import torch

            stats = torch.cuda.memory_stats(self._cuda_index)
            report.update(cuda_memory_report(stats, self.memory_keys))
        if self.host_memory or (self.host_memory is None and not self._cuda):
            report.update(host_memory_report())
        return report

    def _reduces(self, state: State) -> bool:
        every = self.dist_aggregate_batch_interval
        if every is None:
            return self.reduce_across_ranks
        return state.timestamp._batch % every == 0

    def _log(self, state: State, logger: Logger) -> None:
        report = self._report(state)
        metrics: dict[str, Any] = dict(report)
        if report and self._reduces(state):
            table = dist.gather_rows([float(v) for v in report.values()])
            stats = (table.amin(0), table.mean(0), table.amax(0))
            columns: list[Any] = [
                s.tolist() if s.device.type == "cpu" else list(s.unbind()) for s in stats
            ]
            for i, key in enumerate(report):
                for name, column in zip(_REDUCTIONS, columns, strict=True):
                    metrics[f"{key}_{name}"] = column[i]
        if metrics:
            logger.log_metrics(metrics)
        if self.reset_peaks and self._cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(self._cuda_index)

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._find_device(state)

    @override
    @at_interval("log_interval")
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_batch_end(state):
            self._log(state, logger)

    @override
    @at_interval("log_interval")
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            self._log(state, logger)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        torch = sys.modules.get("torch")
        if torch is None or not _is_oom(state.exception, torch.cuda.OutOfMemoryError):
            return
        report = self._report(state)
        if report:
            logger.log_metrics(report)
