"""CPU, memory, disk, network and GPU use, sampled on a background thread, logged at an interval."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import override

from obsbus import dist
from obsbus._check import check_bool, check_optional_int, check_seconds, type_as_value_error
from obsbus._host_probe import GB as GB  # the unit of the *_gb keys, as before
from obsbus._host_probe import MB as MB
from obsbus._host_probe import IoCounters, io_rates
from obsbus.callback import Callback
from obsbus.callbacks._gpu_probes import GpuProbe, installed_probes
from obsbus.callbacks._system_sampler import THREAD_NAME as THREAD_NAME  # the thread's name
from obsbus.callbacks._system_sampler import (
    GpuSource,
    Notes,
    Sampler,
    host_probe,
    visible_gpu,
)
from obsbus.errors import MissingExtraError
from obsbus.interval import LogInterval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike

__all__ = ["IoCounters", "SystemMetricsMonitor", "across_ranks", "io_rates"]


def across_ranks(gathered: Sequence[Mapping[str, float]], per_rank: bool) -> dict[str, float]:
    """The cross-rank keys from every rank's report: ``/min`` and ``/max``, or ``/rank{r}``.

    A key some rank lacks (no sample in its window, no GPU) is reduced over
    the ranks that have it.

    Example:
        >>> reports = [{"system/cpu_percent": 20.0}, {"system/cpu_percent": 60.0}]
        >>> across_ranks(reports, per_rank=False)
        {'system/cpu_percent/min': 20.0, 'system/cpu_percent/max': 60.0}
        >>> across_ranks(reports, per_rank=True)
        {'system/cpu_percent/rank0': 20.0, 'system/cpu_percent/rank1': 60.0}
    """
    out: dict[str, float] = {}
    if per_rank:
        for rank, report in enumerate(gathered):
            for key, value in report.items():
                out[f"{key}/rank{rank}"] = value
        return out
    keys = list(dict.fromkeys(key for report in gathered for key in report))
    for key in keys:
        values = [report[key] for report in gathered if key in report]
        out[f"{key}/min"] = min(values)
        out[f"{key}/max"] = max(values)
    return out


class SystemMetricsMonitor(Callback):
    """Logs CPU, host memory, disk, network and GPU use, sampled off the training thread.

    A daemon thread named ``obsbus-system-metrics`` starts at ``fit_start``
    and takes a sample every ``sample_interval_s`` seconds; it stops at
    ``fit_end``, at ``exception`` and at ``close`` (joined for at most
    ``join_timeout_s`` = 5 s, so a hung driver call can't hang the end of a
    run). At every ``log_interval`` the training thread logs the **mean of
    the samples taken since the previous log** (rates: bytes moved over that
    window); a window with no sample logs none of these keys, so keep
    ``sample_interval_s`` below the time between logs. Logging reads a few
    floats under a lock: no device sync, no I/O on the training thread.

    Keys (GB = 1e9 bytes, MB = 1e6 bytes, as everywhere in obsbus; the units
    are declared, so the console and the report show ``%``, ``GB``,
    ``MB/s``, ``degC`` and ``W`` after the values):

    - ``system/cpu_percent``: whole-machine CPU busy, percent (0-100, all cores).
    - ``system/process_cpu_percent``: this process, percent of one core
      (0 to 100 x cores).
    - ``system/memory_used_gb``: host memory in use (total - available), GB.
    - ``system/memory_percent``: the same, percent of total.
    - ``system/process_rss_gb``: this process's resident memory, GB.
    - ``system/disk_read_mb_per_s``, ``system/disk_write_mb_per_s``: every
      disk of the machine, MB/s.
    - ``system/net_sent_mb_per_s``, ``system/net_recv_mb_per_s``: every
      network interface but loopback, MB/s.
    - ``system/gpu/utilization_percent``: percent of time a kernel ran on this
      rank's GPU (0-100).
    - ``system/gpu/memory_used_gb``: device memory in use on it by every
      process, GB; ``system/gpu/memory_percent``: the same, percent of total.
    - ``system/gpu/temperature_c``: degrees Celsius (AMD: edge, else hotspot).
    - ``system/gpu/power_w``: watts drawn by the board.

    A key whose source is missing (no GPU, a container without disk
    counters, a field the GPU does not support) is left out, never logged as 0.

    **Ranks.** The keys above are this rank's own, under the same names on
    one process and on many. When the job has more than one rank, every rank
    also logs, from one ``all_gather_object`` per log step, ``{key}/min`` and
    ``{key}/max`` over the ranks, or with ``per_rank=True`` every rank's
    values as ``{key}/rank{r}``. That collective needs every rank to run the
    monitor with the same ``log_interval``.

    **GPUs.** "This rank's GPU" is the one ``state.device`` names
    (``cuda:N``), else ``torch.cuda.current_device()`` once CUDA is in use,
    else ``LOCAL_RANK``; it is mapped through ``CUDA_VISIBLE_DEVICES`` (AMD:
    ``HIP_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``) to the library's
    numbering, or given as ``gpu_index``. The libraries are nvidia-ml-py
    (``pynvml``) and amdsmi, tried in that order (``pip install 'obsbus[gpu]'``).
    Both fail in odd ways where their GPU or driver is missing, so every call
    into them is contained: the first failure is warned once (an
    :class:`~obsbus.ObsbusWarning`), GPU metrics stop for this monitor, and
    everything else goes on. Warnings are raised on the training thread, at
    the next log, ``fit_end`` or ``close``.

    Args:
        log_interval: ``"10ba"`` or ``"1ep"``; a bare int counts batches.
        sample_interval_s: seconds between samples (> 0).
        per_rank: log every rank's values instead of min/max (more than one rank).
        gpu: ``None`` (default): GPU metrics when nvidia-ml-py or amdsmi is
            installed and works; ``True``: the same, but a missing library is a
            :class:`~obsbus.MissingExtraError` now; ``False``: none; or a probe
            object (``name``, ``open()``, ``device_index()``, ``read()``,
            ``close()``; see ``obsbus/callbacks/_gpu_probes.py``) for other
            hardware or tests.
        gpu_index: this rank's GPU in the library's numbering (default: found
            as above).

    Example:
        >>> import time
        >>> from obsbus import Run
        >>> from obsbus.loggers import InMemoryLogger
        >>> mem = InMemoryLogger()
        >>> monitor = SystemMetricsMonitor(log_interval="2ba", sample_interval_s=0.01, gpu=False)
        >>> with Run(max_duration="4ba", callbacks=[monitor], loggers=[mem]) as run:
        ...     for batch in run.train([[1], [2], [3], [4]]):
        ...         time.sleep(0.1)
        >>> 0 <= mem.most_recent_values["system/cpu_percent"] <= 100
        True
        >>> mem.most_recent_values["system/memory_used_gb"] > 0
        True
        >>> SystemMetricsMonitor(sample_interval_s=0)
        Traceback (most recent call last):
        ...
        ValueError: SystemMetricsMonitor sample_interval_s must be a finite number of seconds > 0,
        got 0.
    """

    #: Seconds ``fit_end``/``close`` wait for the sampling thread to stop.
    join_timeout_s = 5.0

    def __init__(
        self,
        log_interval: TimeLike = "10ba",
        *,
        sample_interval_s: float = 1.0,
        per_rank: bool = False,
        gpu: bool | GpuProbe | None = None,
        gpu_index: int | None = None,
    ) -> None:
        self.log_interval = LogInterval(log_interval, "SystemMetricsMonitor log_interval")
        with type_as_value_error():  # a wrong type here has always been a ValueError
            interval = check_seconds("SystemMetricsMonitor", "sample_interval_s", sample_interval_s)
            gpu_index = check_optional_int("SystemMetricsMonitor", "gpu_index", gpu_index)
        per_rank = check_bool("SystemMetricsMonitor", "per_rank", per_rank)
        import psutil  # a core dependency; imported here so `import obsbus` stays light

        self.sample_interval_s = interval
        self.per_rank = per_rank
        self.gpu_index = gpu_index
        self._psutil = psutil
        self._gpu_candidates = self._load_gpu(gpu)
        self._gpu_off = False
        self._notes = Notes()
        #: How often each kind of failure happened (``gpu``, ``psutil-disk``, ``thread``, ...).
        self.failures = self._notes.counts
        self._sampler: Sampler | None = None

    @staticmethod
    def _load_gpu(gpu: Any) -> list[tuple[str, GpuProbe | None, str | None]]:
        if gpu is False:
            return []
        if gpu is None or gpu is True:
            found = installed_probes()
            if not found and gpu is True:
                raise MissingExtraError("gpu", "SystemMetricsMonitor(gpu=True)")
            loaded: list[tuple[str, GpuProbe | None, str | None]] = []
            for name, load in found:
                try:
                    loaded.append((name, load(), None))
                except Exception as exc:  # import_quietly's message, or anything odder
                    loaded.append((name, None, str(exc)))
            return loaded
        if all(callable(getattr(gpu, m, None)) for m in ("open", "device_index", "read", "close")):
            return [(str(getattr(gpu, "name", type(gpu).__name__)), gpu, None)]
        raise TypeError(
            "SystemMetricsMonitor gpu must be None (GPU metrics when a GPU library is installed), "
            "True (require one), False (none) or a probe object with open(), device_index(), "
            f"read() and close(); got {gpu!r}."
        )

    @property
    def samples_taken(self) -> int:
        """Samples the current (or last) sampling thread has taken."""
        return 0 if self._sampler is None else self._sampler.samples_taken

    def _start(self, state: State) -> None:
        self._stop()
        gpu = None
        if self._gpu_candidates and not self._gpu_off:
            gpu = GpuSource(
                self._gpu_candidates,
                visible_gpu(state),
                self.gpu_index,
                self._notes,
                self._turn_gpu_off,
            )
        sampler = Sampler(
            host_probe(self._psutil, self._notes), gpu, self.sample_interval_s, self._notes
        )
        try:
            sampler.thread.start()
        except RuntimeError as exc:  # can't start new thread
            self._notes(
                "thread",
                f"could not start the sampling thread ({exc!r}); no system metrics are logged.",
            )
            return
        self._sampler = sampler

    def _turn_gpu_off(self) -> None:
        self._gpu_off = True

    def _stop(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None and not sampler.stop(self.join_timeout_s):
            self._notes(
                "join",
                f"the sampling thread did not stop within {self.join_timeout_s:g}s "
                "(a GPU library call hanging?); it is a daemon thread and is left to end.",
            )
        self._notes.emit()

    def _log(self, logger: Logger) -> None:
        local = self._sampler.drain() if self._sampler is not None else {}
        self._notes.emit()
        # Every rank takes part at every log step, with or without samples: it's a collective.
        gathered = dist.all_gather_object(local)
        metrics = dict(local)
        if len(gathered) > 1:
            metrics.update(across_ranks(gathered, self.per_rank))
        if metrics:
            logger.log_metrics(metrics)

    @override
    def metric_units(self) -> dict[str, str]:
        units = {
            "system/*_percent": "%",
            "system/*_gb": "GB",
            "system/*_mb_per_s": "MB/s",
            "system/gpu/temperature_c": "degC",
            "system/gpu/power_w": "W",
        }
        return {**units, **{f"{key}/*": unit for key, unit in units.items()}}  # /min, /rank3

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._start(state)

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self._sampler is None:  # a loop that fires no fit_start
            self._start(state)
        if self.log_interval.at_batch_end(state):
            self._log(logger)

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            self._log(logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._stop()

    @override
    def exception(self, state: State, logger: Logger) -> None:
        self._stop()

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._stop()
