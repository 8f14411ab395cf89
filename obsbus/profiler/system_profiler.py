"""CPU, memory, disk and network counters in the profiler's trace, sampled on a thread."""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus._check import check_bool, check_seconds
from obsbus._host_probe import GB as GB  # the unit of the *_gb counters, as before
from obsbus._host_probe import MB as MB
from obsbus._host_probe import HostProbe, IoCounters, io_rates
from obsbus.callback import Callback
from obsbus.errors import ObsbusWarning
from obsbus.profiler.profiler_action import ProfilerAction

if TYPE_CHECKING:
    from obsbus.logger import Logger
    from obsbus.profiler.profiler import Profiler
    from obsbus.state import State

__all__ = ["SystemProfiler"]

THREAD_NAME = "obsbus-system-profiler"
_CATEGORIES = ("system",)
# Composer's counters are markers with the default actions: warm-up batches record too.
_RECORDING = (ProfilerAction.WARMUP, ProfilerAction.ACTIVE, ProfilerAction.ACTIVE_AND_SAVE)
_SAVE = ProfilerAction.ACTIVE_AND_SAVE
_MAX_PENDING = 10_000  # samples held between two batch ends (~80 min at 0.5 s)


class _Readings:
    """One sampling thread's readings: the asked-for sources, rates since the previous sample.

    Failures are appended to ``failures`` on the sampler thread and warned from the training
    one; a source that raised is left out after.
    """

    def __init__(self, psutil: Any, sources: frozenset[str], clock: Callable[[], float]) -> None:
        self.failures: list[str] = []
        gauges = {
            source: readings
            for source, readings in (
                ("cpu", ("cpu", "process_cpu")),
                ("memory", ("memory", "process_memory")),
            )
            if source in sources
        }
        self._probe = HostProbe(
            psutil,
            gauges,
            disk="disk" if "disk" in sources else None,
            net="net" if "net" in sources else None,
            on_failure=self._failed,
            clock=clock,
        )
        self._io: IoCounters | None = None

    def _failed(self, source: str, exc: BaseException) -> None:
        self.failures.append(f"psutil could not read {source} ({type(exc).__name__}: {exc})")

    def baseline(self) -> None:
        """Start the window: CPU percentages and byte rates count from now."""
        self._probe.prime()
        self._io = self._probe.counters()

    def read(self) -> dict[str, float]:
        """One sample: ``counter name -> value`` (units in the names)."""
        out = self._probe.gauges()
        if self._probe.reads_io:
            counters = self._probe.counters()
            if self._io is not None:
                out.update(io_rates(self._io, counters))
            self._io = counters
        return out


class SystemProfiler(Callback):
    """Adds CPU, memory, disk and network counters to the profiler's trace, while it records.

    Add it next to a :class:`~obsbus.profiler.Profiler`:
    ``Trainer(..., callbacks=[SystemProfiler()], profiler=Profiler(...))``.
    A daemon thread named ``obsbus-system-profiler`` (psutil) takes a sample
    every ``stats_thread_interval_seconds`` while the profiler's action is
    ``warmup``, ``active`` or ``active_and_save`` (when Composer's markers
    record), and sleeps on an event otherwise: no samples, and no cost, in
    ``skip`` batches. Samples wait in
    a bounded queue; the training thread hands them to the trace handlers
    (``process_counter_event``, a ``C`` event in a Chrome trace) at each
    ``batch_end``, before the trace handlers save (they are added to the
    run after your callbacks), and at ``exception``. Each counter's time is
    the time the sample was taken, and only samples taken inside the window
    are emitted. Nothing on the training thread waits for the thread or for
    psutil. The thread starts at ``fit_start`` (or the first recorded batch)
    and stops at ``close`` (joined for at most ``join_timeout_s`` = 5 s).

    Counters (one ``C`` event each, ``args={"value": v}``, category
    ``system``; the names and units are :class:`~obsbus.callbacks.SystemMetricsMonitor`'s
    keys; GB = 1e9 bytes, MB = 1e6 bytes):

    - ``profile_cpu``: ``system/cpu_percent`` (the whole machine, 0-100) and
      ``system/process_cpu_percent`` (this process, percent of one core:
      0 to 100 x cores), both over the time since the previous sample.
    - ``profile_memory``: ``system/memory_used_gb`` (total - available),
      ``system/memory_percent`` and ``system/process_rss_gb`` (this process).
    - ``profile_disk``: ``system/disk_read_mb_per_s`` and
      ``system/disk_write_mb_per_s``, every disk of the machine, MB/s since
      the previous sample (the first sample of a window counts from the
      window's start).
    - ``profile_net``: ``system/net_sent_mb_per_s`` and
      ``system/net_recv_mb_per_s``, every interface but loopback, MB/s.

    A source psutil can't read (no disk counters in a container) is left out,
    never recorded as 0; one that raises is warned once (an
    :class:`~obsbus.ObsbusWarning`, from the training thread) and left out.
    On a run without a profiler it warns once and does nothing.

    The arguments are those of Composer's ``SystemProfiler``, with the same
    defaults. As in Composer, ``Profiler(sys_prof_cpu=..., sys_prof_memory=...,
    sys_prof_disk=..., sys_prof_net=..., sys_prof_stats_thread_interval_seconds=...)``
    builds one (with CPU counters unless all four are ``False``); one given in
    ``callbacks`` replaces the Profiler's, so a run has one sampling thread.

    Args:
        profile_cpu: record the CPU counters.
        profile_memory: record the memory counters.
        profile_disk: record the disk rates.
        profile_net: record the network rates.
        stats_thread_interval_seconds: seconds between samples (> 0).

    Example:
        >>> import time
        >>> from obsbus import Run
        >>> from obsbus.profiler import Profiler, ProfilerAction, TraceHandler
        >>> class Counters(TraceHandler):
        ...     def __init__(self):
        ...         self.names = set()
        ...     def process_counter_event(self, name, categories, timestamp, wall_ns, values):
        ...         self.names.add(name)
        >>> counters = Counters()
        >>> profiler = Profiler(lambda state: ProfilerAction.ACTIVE, [counters])
        >>> system = SystemProfiler(profile_memory=True, stats_thread_interval_seconds=0.01)
        >>> with Run(max_duration="3ba", callbacks=[system], profiler=profiler) as run:
        ...     for batch in run.train([[1], [2], [3]]):
        ...         time.sleep(0.1)
        >>> sorted(counters.names)  # doctest: +NORMALIZE_WHITESPACE
        ['system/cpu_percent', 'system/memory_percent', 'system/memory_used_gb',
         'system/process_cpu_percent', 'system/process_rss_gb']
        >>> SystemProfiler(stats_thread_interval_seconds=0)
        Traceback (most recent call last):
        ...
        ValueError: SystemProfiler stats_thread_interval_seconds must be a finite number ... got 0.
    """

    #: Seconds ``close`` waits for the sampling thread to stop.
    join_timeout_s = 5.0

    def __init__(
        self,
        profile_cpu: bool = True,
        profile_memory: bool = False,
        profile_disk: bool = False,
        profile_net: bool = False,
        stats_thread_interval_seconds: float = 0.5,
    ) -> None:
        flags = {"cpu": profile_cpu, "memory": profile_memory, "disk": profile_disk}
        flags["net"] = profile_net
        for name, value in flags.items():
            check_bool("SystemProfiler", f"profile_{name}", value)
        if not any(flags.values()):
            raise ValueError(
                "SystemProfiler records nothing: profile_cpu, profile_memory, profile_disk and "
                "profile_net are all False. To fix, set at least one to True."
            )
        interval = stats_thread_interval_seconds
        check_seconds("SystemProfiler", "stats_thread_interval_seconds", interval)
        import psutil  # a core dependency; imported here so `import obsbus` stays light

        self.profile_cpu, self.profile_memory = profile_cpu, profile_memory
        self.profile_disk, self.profile_net = profile_disk, profile_net
        self.stats_thread_interval_seconds = float(interval)
        self._psutil: Any = psutil
        self._sources = frozenset(name for name, on in flags.items() if on)
        self._clock: Callable[[], float] = time.monotonic
        self._profiler: Profiler | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._active = threading.Event()  # set while a window records: the thread samples
        self._window = 0  # the open window's number; 0: none open
        self._window_start_ns = 0
        self._windows = 0
        # (window, wall_ns, values), appended by the thread, emptied by the training thread.
        self._samples: deque[tuple[int, int, dict[str, float]]] = deque(maxlen=_MAX_PENDING)
        self._readings: _Readings | None = None
        self._warned: set[str] = set()
        #: Samples the sampling thread has taken (all windows, all fits).
        self.samples_taken = 0
        #: Built by ``Profiler(sys_prof_*=...)``: it gives way to one in ``callbacks``.
        self._built_by_profiler = False

    # ---------------------------------------------------------------- thread
    def _run(self, readings: _Readings) -> None:
        stop, active, interval = self._stop, self._active, self.stats_thread_interval_seconds
        try:
            while True:
                active.wait()
                if stop.is_set():
                    return
                window = self._window
                readings.baseline()
                while not stop.wait(interval):
                    if not active.is_set() or self._window != window:
                        break  # the window ended (or another began): start over
                    values = readings.read()
                    self._samples.append((window, time.time_ns(), values))
                    self.samples_taken += 1
        except Exception as exc:
            readings.failures.append(f"the sampling thread failed ({exc!r}) and stopped")

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop, self._active = threading.Event(), threading.Event()
        self._readings = _Readings(self._psutil, self._sources, self._clock)
        thread = threading.Thread(
            target=self._run, args=(self._readings,), name=THREAD_NAME, daemon=True
        )
        thread.start()
        self._thread = thread

    # ---------------------------------------------------------------- windows
    def _open(self) -> None:
        if not self._window:
            if self._thread is None:  # a loop that fires no fit_start
                self._start()
            self._windows += 1
            self._window, self._window_start_ns = self._windows, time.time_ns()
            self._active.set()

    def _close_window(self) -> None:
        self._active.clear()
        self._window = 0

    def _emit(self, state: State) -> None:
        """Hand the window's samples taken until now to the trace handlers."""
        profiler, window = self._profiler, self._window
        now, start = time.time_ns(), self._window_start_ns
        samples = self._samples
        while samples and samples[0][1] <= now:
            taken, wall_ns, values = samples.popleft()
            if profiler is None or taken != window or wall_ns < start:
                continue  # an earlier window's last sample, or one that raced its end
            timestamp = state.timestamp
            for name, value in values.items():
                for handler in profiler.trace_handlers:
                    handler.process_counter_event(
                        name, _CATEGORIES, timestamp, wall_ns, {"value": value}
                    )
        self._report()

    def _report(self) -> None:
        readings = self._readings
        for message in [] if readings is None else list(readings.failures):
            if message not in self._warned:
                self._warned.add(message)
                warnings.warn(f"SystemProfiler: {message}.", ObsbusWarning, stacklevel=3)

    # ---------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        self._profiler = profiler = state.profiler
        if profiler is not None:
            # Callbacks come before the Profiler's own in the engine: a user's inits first.
            if not self._built_by_profiler:
                profiler._user_system_profiler = self
            elif profiler._user_system_profiler not in (None, self):
                self._profiler = None  # the one in callbacks records instead
                profiler._warn_sys_prof_unused()
        if profiler is None:
            warnings.warn(
                "SystemProfiler does nothing: the run has no profiler. To fix, pass "
                "profiler=Profiler(schedule, trace_handlers) to the Trainer or Run.",
                ObsbusWarning,
                stacklevel=2,
            )

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        if self._profiler is not None:
            self._start()

    @override
    def before_dataloader(self, state: State, logger: Logger) -> None:
        profiler = self._profiler
        if profiler is None:
            return
        if profiler.action in _RECORDING:
            self._open()
        elif self._window:
            self._close_window()

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self._window:
            self._emit(state)
            if self._profiler is not None and self._profiler.action is _SAVE:
                self._close_window()

    @override
    def exception(self, state: State, logger: Logger) -> None:
        if self._window:
            self._emit(state)  # the trace handlers save what was recorded before the crash
            self._close_window()

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        # A window still open was never saved; its samples would land in the next one.
        self._close_window()
        self._samples.clear()

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._close_window()
        thread, self._thread = self._thread, None
        self._stop.set()
        self._active.set()  # wake the thread so it sees the stop
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.join_timeout_s)
            if thread.is_alive():
                warnings.warn(
                    f"SystemProfiler: the sampling thread did not stop within "
                    f"{self.join_timeout_s:g}s (a psutil call hanging?); it is a daemon thread "
                    "and is left to end.",
                    ObsbusWarning,
                    stacklevel=2,
                )
        self._samples.clear()
        self._report()
