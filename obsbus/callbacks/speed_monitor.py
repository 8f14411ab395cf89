"""Log training throughput, FLOPs, MFU and wall-clock time, reduced across ranks at log steps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from typing_extensions import override

from obsbus import dist
from obsbus._check import check_int
from obsbus.callback import Callback
from obsbus.callbacks._flops_source import FlopsSource
from obsbus.callbacks._mfu import MfuLookup, check_peak
from obsbus.callbacks._peak_flops import PRECISIONS
from obsbus.callbacks._throughput import ThroughputWindow, rates
from obsbus.callbacks._throughput_ranks import reduce_window, step_times
from obsbus.callbacks._time_units import seconds_per_unit, unit_label
from obsbus.interval import LogInterval, at_interval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike

__all__ = ["SpeedMonitor"]

_clock = time.perf_counter
"""The clock every duration here is read from (tests replace it with a fake one)."""

HOUR = 3600.0
"""Seconds in an hour: ``time/*`` keys are in hours by default, as Composer logs them."""

_SUPPORTED = ", ".join(PRECISIONS)


class SpeedMonitor(Callback):
    """Logs throughput, FLOPs, MFU and wall-clock time of training (Composer's keys).

    Each batch is timed on the host clock from the previous ``batch_end`` (or
    ``fit_start``) to its own ``batch_end``, less any evaluation in between:
    dataloader waits, optimizer steps and checkpoints count, as in Composer,
    whose ``batch_wct`` spans the same interval. It does not read
    ``state.timestamp.batch_wct``, so the numbers mean the same under any loop
    (and a loop's clock that keeps running through evaluation can't leak in).
    Samples and tokens are this rank's ``state.batch_num_samples`` and
    ``state.batch_num_tokens`` of each batch, so variable batch sizes count as
    they are. Nothing here touches a tensor on a step that does not log.

    **Window.** Throughput is over the last ``window_size`` batches: their
    samples over their seconds. The first batch of each ``fit`` is left out
    (compilation and dataloader start-up), so, as in Composer, the first
    value is logged at batch ``window_size + 1`` and covers batches 2 to
    ``window_size + 1``. Until the window is full no ``throughput/*`` key is
    logged; the ``time/*`` keys are logged from the first log step. The
    window carries over from one ``fit`` to the next (time between fits is
    not counted).

    **Across ranks** (``torch.distributed`` initialized, world size > 1), each
    log step does one ``all_reduce`` of a ``[world_size, 6]`` float64 table:
    a global rate is the ranks' summed samples (tokens, FLOPs) over the
    slowest rank's window seconds, and ``throughput/device/*`` is that
    divided by the world size.
    Every rank must run the monitor with the same ``log_interval``. On a GPU
    backend the reduced values are logged as device tensors (no sync). Time
    spent waiting in that all_reduce counts in ``time/train`` but in no
    batch's seconds, so a fast rank does not inherit a straggler's time.

    Keys (``throughput/*`` once the window is full; ``tokens`` keys when
    tokens are counted, ``flops`` keys with a FLOPs function). Their units are
    declared (:meth:`metric_units`): the console and the report show
    ``batches/s``, ``samples/s``, ``tokens/s``, ``flops/s``, ``s`` for the
    step times, and the ``time/*`` keys' ``time_unit`` (``h`` by default);
    the MFU, the ratio and the rank have none:

    - ``throughput/batches_per_sec``: batches (optimizer steps) per second.
    - ``throughput/samples_per_sec``: samples per second, all ranks.
    - ``throughput/tokens_per_sec``: tokens per second, all ranks.
    - ``throughput/flops_per_sec``: FLOP/s, all ranks.
    - ``throughput/device/batches_per_sec``, ``throughput/device/samples_per_sec``,
      ``throughput/device/tokens_per_sec``, ``throughput/device/flops_per_sec``:
      the above divided by the world size (per device; Composer's definition).
    - ``throughput/device/mfu``: model FLOPs utilization, a fraction (0.45 is
      45%): ``throughput/device/flops_per_sec`` over the device's dense peak
      FLOP/s (``gpu_flops_available``, else the table in
      ``obsbus.callbacks._peak_flops``). Not logged when the peak is unknown
      (a CPU, or a GPU not in the table: one :class:`~obsbus.ObsbusWarning`)
      or when it would exceed 1 (a wrong peak or FLOPs count: one warning).
      With device tensors the check uses this rank's own MFU, and a global
      value above 1 is logged as NaN.
    - ``throughput/step_time_max``, ``throughput/step_time_min``: seconds per
      batch of the slowest and the fastest rank, each rank's mean since the
      previous log step. World size > 1 only.
    - ``throughput/step_time_max_over_min``: their ratio (>= 1); a straggler
      shows up as a ratio well above 1. Ranks that synchronize every step
      (DDP, FSDP) wait for each other inside the step, so their wall times
      even out and the ratio stays near 1 even with a slow rank there.
    - ``throughput/step_time_slowest_rank``: the rank with ``step_time_max``.
    - ``time/train``: time spent training in all fits so far, on this rank
      (evaluation excluded; the first batch included), in ``time_unit``
      (hours by default, as Composer).
    - ``time/val``: time spent evaluating (``eval_before_all`` to
      ``eval_after_all``, standalone evaluation included; ``eval_start`` to
      ``eval_end`` for a loop that fires only those), in ``time_unit``.
      Composer's key.
    - ``time/eval``: the same value under obsbus's earlier name, which the
      README's key table promised; kept for dashboards built on it. New
      dashboards should use ``time/val``.
    - ``time/total``: ``time/train + time/val``, in ``time_unit``.

    The ``time/*`` keys are also logged when an evaluation ends, so the last
    evaluation's time is recorded even when no log step follows (Composer
    logs them at ``batch_end`` only: one value per batch, and the time of an
    evaluation after the last batch is never logged).

    Args:
        window_size: batches in the throughput window (Composer's default 100).
        gpu_flops_available: peak FLOP/s of one device, e.g. ``989e12``;
            overrides the table.
        time_unit: the unit of the ``time/*`` keys: ``"seconds"``,
            ``"minutes"``, ``"hours"`` (default, as Composer) or ``"days"``.
        log_interval: ``"1ba"`` (default) or ``"1ep"``; a bare int counts batches.
        flops_per_batch: ``f(batch) -> number``: FLOPs this rank spends on
            ``batch`` (forward and backward). Default, in order:
            ``state.batch_num_flops`` (set by the Hugging Face and Lightning
            bridges, or by your loop), the model's ``flops_per_batch(batch)``
            method (also on ``model.module``), Hugging Face's
            ``model.floating_point_ops(batch)`` for a dict batch
            (:mod:`obsbus.callbacks._flops_source`). Return a Python number: a
            device tensor would mean a sync per step.
        precision: for the table: one of ``fp32``, ``tf32``, ``fp16``,
            ``bf16``, ``fp8``. Default: autocast's dtype at the first
            ``after_forward`` when autocast is on, else the parameters' dtype
            (see :func:`~obsbus.callbacks._peak_flops.precision_of`). On a run
            known to be off a GPU (no peak, so no MFU) it is not looked at, and
            ``after_forward`` is not dispatched at all.

    Example:
        >>> from obsbus import Run
        >>> from obsbus.loggers import InMemoryLogger
        >>> mem = InMemoryLogger()
        >>> with Run(max_duration="4ba", callbacks=[SpeedMonitor(window_size=2)],
        ...          loggers=[mem]) as run:
        ...     for batch in run.train([[1, 2], [3, 4, 5], [6], [7, 8]]):
        ...         pass
        >>> mem.get_timeseries("throughput/samples_per_sec")["step"]
        [3, 4]
        >>> mem.most_recent_values["time/total"] >= mem.most_recent_values["time/train"] > 0
        True
    """

    def __init__(
        self,
        window_size: int = 100,
        gpu_flops_available: float | None = None,
        time_unit: str = "hours",
        *,
        log_interval: TimeLike = "1ba",
        flops_per_batch: Callable[[Any], float] | None = None,
        precision: str | None = None,
    ) -> None:
        check_int("SpeedMonitor", "window_size", window_size, minimum=1)  # batches
        gpu_flops_available = check_peak(gpu_flops_available)
        self._divider = seconds_per_unit("SpeedMonitor", time_unit)
        self._time_label = unit_label("SpeedMonitor", time_unit)
        self.time_unit = time_unit
        if flops_per_batch is not None and not callable(flops_per_batch):
            raise TypeError(
                "SpeedMonitor flops_per_batch must be a function batch -> FLOPs or None, "
                f"got {flops_per_batch!r}."
            )
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(
                f"SpeedMonitor precision {precision!r} is not supported; accepted: "
                f"{_SUPPORTED}, or None to detect it."
            )
        self.window_size = window_size
        self.gpu_flops_available = gpu_flops_available
        self.flops_per_batch = flops_per_batch
        self.precision = precision
        self.log_interval = LogInterval(log_interval, "SpeedMonitor log_interval")
        self._served = self._loaded = False  # a run began; load_state_dict since
        self._window = ThroughputWindow(window_size)
        self._flops_source = FlopsSource(flops_per_batch)
        self._mark: float | None = None  # end of the previous batch, moved past any eval
        self._warm_up = False
        self._train_seconds = 0.0
        self._eval_seconds = 0.0
        self._eval_depth = 0
        self._eval_began = 0.0
        self._interval_seconds = 0.0
        self._interval_batches = 0
        self._mfu = MfuLookup(gpu_flops_available, precision)

    # ---------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        # A new run (one instance may serve several, one after another): nothing of the
        # last one's window or time carries over. A resumed run's time comes back through
        # load_state_dict, after init.
        self._window.reset()
        if self._served and not self._loaded:  # totals given by load_state_dict stay
            self._train_seconds = self._eval_seconds = 0.0
        self._served, self._loaded = True, False
        self._interval_seconds = 0.0
        self._interval_batches = 0
        self._mark = None
        self._mfu.reset(self.gpu_flops_available, self.precision)
        # after_forward only notes the precision, for the MFU's peak. When that is given,
        # or the run is on a known non-GPU device (no peak, so no MFU), the hook is
        # dropped for this run: the engine looks again after init (see Callback).
        self.__dict__.pop("after_forward", None)
        if not self._mfu.needs_precision(state):
            self.after_forward = super().after_forward  # type: ignore[method-assign]

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._mark = _clock()
        self._warm_up = True
        self._eval_depth = 0
        self._flops_source = FlopsSource(self.flops_per_batch)
        self._flops_source.bind(state.model)

    @override
    def after_forward(self, state: State, logger: Logger) -> None:
        self._mfu.after_forward(state)

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        now = _clock()
        mark, self._mark = self._mark, now
        if mark is not None:
            seconds = now - mark
            self._train_seconds += seconds
            if self._warm_up:
                self._warm_up = False
            else:
                flops = self._flops_source(state)
                self._window.add(seconds, state.batch_num_samples, state.batch_num_tokens, flops)
                self._interval_seconds += seconds
                self._interval_batches += 1
        if self.log_interval.at_batch_end(state):
            self._log(state, logger)

    @override
    @at_interval("log_interval")
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            self._log(state, logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._mark = None

    @override
    def eval_before_all(self, state: State, logger: Logger) -> None:
        self._eval_enter()

    @override
    def eval_standalone_start(self, state: State, logger: Logger) -> None:
        self._eval_enter()

    @override
    def eval_start(self, state: State, logger: Logger) -> None:
        self._eval_enter()

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        if self._eval_exit():
            logger.log_metrics(self._times())

    @override
    def eval_after_all(self, state: State, logger: Logger) -> None:
        if self._eval_exit():
            logger.log_metrics(self._times())

    @override
    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        if self._eval_exit():
            logger.log_metrics(self._times())

    @override
    def metric_units(self) -> dict[str, str]:
        time = self._time_label
        return {
            "throughput/*batches_per_sec": "batches/s",
            "throughput/*samples_per_sec": "samples/s",
            "throughput/*tokens_per_sec": "tokens/s",
            "throughput/*flops_per_sec": "flops/s",
            "throughput/step_time_max": "s",
            "throughput/step_time_min": "s",
            "time/train": time,
            "time/val": time,
            "time/eval": time,
            "time/total": time,
        }

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"train_seconds": self._train_seconds, "eval_seconds": self._eval_seconds}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loaded = True
        self._train_seconds = float(state.get("train_seconds", 0.0))
        # "total_eval_wct": the one entry of Composer's SpeedMonitor.state_dict (its train
        # time lives in the checkpoint's timestamp, which obsbus does not read here).
        self._eval_seconds = float(state.get("eval_seconds", state.get("total_eval_wct", 0.0)))

    # -------------------------------------------------------------- helpers
    def _eval_enter(self) -> None:
        if self._eval_depth == 0:
            self._eval_began = _clock()
        self._eval_depth += 1

    def _eval_exit(self) -> bool:
        """Leave one level of evaluation; at the outermost, book its time. Whether it was."""
        if self._eval_depth == 0:
            return False
        self._eval_depth -= 1
        if self._eval_depth:
            return False
        seconds = _clock() - self._eval_began
        self._eval_seconds += seconds
        if self._mark is not None:
            self._mark += seconds  # evaluation is not training time
        return True

    def _times(self) -> dict[str, float]:
        train, evaluation, unit = self._train_seconds, self._eval_seconds, self._divider
        return {
            "time/train": train / unit,
            "time/val": evaluation / unit,
            "time/eval": evaluation / unit,  # the earlier obsbus name (see the key list)
            "time/total": (train + evaluation) / unit,
        }

    def _log(self, state: State, logger: Logger) -> None:
        totals = self._window.totals()  # None until the window is full
        world = dist.get_world_size() if dist.is_initialized() else 1
        metrics: dict[str, Any] = {}
        summed: dict[str, Any] | None = None  # this rank's own on one process
        if world > 1:
            t = totals
            row: list[float] = [t.samples, t.tokens, t.flops or 0.0, t.seconds] if t else [0.0] * 4
            began = _clock()
            summed = reduce_window([*row, self._interval_seconds, self._interval_batches])
            # Waiting here for slower ranks is wall time, but no batch's: charged to the
            # next batch, it would make a fast rank look as slow as the straggler.
            waited = _clock() - began
            self._train_seconds += waited
            if self._mark is not None:
                self._mark += waited
            if self._interval_batches:
                metrics.update(step_times(summed))
        self._interval_seconds, self._interval_batches = 0.0, 0
        if totals is not None:
            found = rates(totals, summed)
            for name, rate in found.items():
                metrics[f"throughput/{name}_per_sec"] = rate
                metrics[f"throughput/device/{name}_per_sec"] = rate / world
            if "flops" in found and totals.flops is not None:
                own = totals.flops / totals.seconds
                self._mfu.add(metrics, found["flops"] / world, own, state)
        metrics.update(self._times())
        logger.log_metrics(metrics)
