"""Log training throughput, FLOPs, MFU and wall-clock time, reduced across ranks at log steps."""

from __future__ import annotations

import math
import numbers
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import override

from obsbus import dist
from obsbus.callback import Callback
from obsbus.callbacks._flops_source import FlopsSource
from obsbus.callbacks._peak_flops import PRECISIONS, peak_flops, precision_of
from obsbus.callbacks._time_units import seconds_per_unit
from obsbus.errors import ObsbusWarning
from obsbus.interval import LogInterval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike
from obsbus.values import is_tensor, to_host

__all__ = ["SpeedMonitor"]

_clock = time.perf_counter
"""The clock every duration here is read from (tests replace it with a fake one)."""

HOUR = 3600.0
"""Seconds in an hour: ``time/*`` keys are in hours by default, as Composer logs them."""

_SUPPORTED = ", ".join(PRECISIONS)


def _check_peak(value: object) -> float | None:
    """``gpu_flops_available`` as a float, or a TypeError/ValueError that says what is accepted."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            "SpeedMonitor gpu_flops_available must be a number of FLOP/s per device "
            f"(e.g. 989e12) or None, got {value!r}."
        )
    peak = float(value)
    if not math.isfinite(peak) or peak < 1e9:
        raise ValueError(
            "SpeedMonitor gpu_flops_available must be the peak FLOP/s of one device, "
            f"e.g. 989e12 for an H100 in bf16; got {value!r}. To fix, give FLOP/s, not "
            "TFLOP/s (989e12, not 989)."
        )
    return peak


def _device_type(state: State) -> str:
    device = state.device
    return str(getattr(device, "type", device or "cuda")).split(":")[0]


def _device_info(state: State) -> tuple[str, int] | None:
    """``(name, multiprocessor count)`` of the run's GPU, or ``None`` off a GPU (host queries)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    device = state.device
    parameters = getattr(state.model, "parameters", None)
    if device is None and callable(parameters):
        device = getattr(next(iter(parameters()), None), "device", None)
    if device is None or not torch.cuda.is_available():
        return None
    device = torch.device(device)
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(
        device.index if device.index is not None else torch.cuda.current_device()
    )
    return str(props.name), int(props.multi_processor_count)


def _reduce(row: Sequence[float]) -> dict[str, Any]:
    """One all_reduce of every rank's row ``[samples, tokens, flops, window s, interval s,
    interval batches]``: sums, the slowest window, and the slowest and fastest step time.

    The ``[world_size, 6]`` float64 table comes from :func:`obsbus.dist.gather_rows`. On a
    GPU backend the results stay on the device (tensors: no sync here); on gloo they are
    numbers.
    """
    import torch

    table = dist.gather_rows(row)
    timed = table[:, 5] > 0
    step = table[:, 4] / table[:, 5].clamp(min=1.0)
    slowest = torch.where(timed, step, -math.inf)
    out = {
        "samples": table[:, 0].sum(),
        "tokens": table[:, 1].sum(),
        "flops": table[:, 2].sum(),
        "seconds": table[:, 3].amax(),
        "step_max": slowest.amax(),
        "step_min": torch.where(timed, step, math.inf).amin(),
        "slowest_rank": slowest.argmax(),
    }
    return to_host(out) if table.device.type == "cpu" else out


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
    tokens are counted, ``flops`` keys with a FLOPs function):

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
            (see :func:`~obsbus.callbacks._peak_flops.precision_of`).

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
        if isinstance(window_size, bool) or not isinstance(window_size, int):
            raise TypeError(
                f"SpeedMonitor window_size must be an int (batches), got {window_size!r}."
            )
        if window_size < 1:
            raise ValueError(f"SpeedMonitor window_size must be >= 1 batch, got {window_size!r}.")
        gpu_flops_available = _check_peak(gpu_flops_available)
        self._divider = seconds_per_unit("SpeedMonitor", time_unit)
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
        # (seconds, samples, tokens, flops or None) of each batch in the window.
        # The window as parallel deques, so each sum is one C-level call (bench finding M4).
        self._seconds: deque[float] = deque(maxlen=window_size)
        self._samples: deque[int] = deque(maxlen=window_size)
        self._tokens: deque[int] = deque(maxlen=window_size)
        self._flops: deque[float] = deque(maxlen=window_size)
        self._flops_missing: deque[bool] = deque(maxlen=window_size)
        self._flops_source = FlopsSource(flops_per_batch)
        self._mark: float | None = None  # end of the previous batch, moved past any eval
        self._warm_up = False
        self._train_seconds = 0.0
        self._eval_seconds = 0.0
        self._eval_depth = 0
        self._eval_began = 0.0
        self._interval_seconds = 0.0
        self._interval_batches = 0
        self._detect = precision is None and gpu_flops_available is None
        self._detected: str | None = None
        self._peak: float | None = gpu_flops_available
        self._peak_resolved = gpu_flops_available is not None
        self._warned_mfu = False

    # ---------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        # A new run (one instance may serve several, one after another): nothing of the
        # last one's window or time carries over. A resumed run's time comes back through
        # load_state_dict, after init.
        for window in (self._seconds, self._samples, self._tokens, self._flops):
            window.clear()
        self._flops_missing.clear()
        if self._served and not self._loaded:  # totals given by load_state_dict stay
            self._train_seconds = self._eval_seconds = 0.0
        self._served, self._loaded = True, False
        self._interval_seconds = 0.0
        self._interval_batches = 0
        self._mark = None
        self._detect = self.precision is None and self.gpu_flops_available is None
        self._detected = None
        self._peak = self.gpu_flops_available
        self._peak_resolved = self.gpu_flops_available is not None
        self._warned_mfu = False

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._mark = _clock()
        self._warm_up = True
        self._eval_depth = 0
        self._flops_source = FlopsSource(self.flops_per_batch)
        self._flops_source.bind(state.model)

    @override
    def after_forward(self, state: State, logger: Logger) -> None:
        if self._detect:
            self._detect = False
            self._detected = precision_of(state.model, _device_type(state))

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
                self._seconds.append(seconds)
                self._samples.append(state.batch_num_samples)
                self._tokens.append(state.batch_num_tokens)
                self._flops.append(flops or 0.0)
                self._flops_missing.append(flops is None)
                self._interval_seconds += seconds
                self._interval_batches += 1
        if self.log_interval.at_batch_end(state):
            self._log(state, logger)

    @override
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
        batches = len(self._seconds)
        full = batches == self.window_size
        seconds = math.fsum(self._seconds) if full else 0.0
        samples = sum(self._samples) if full else 0
        tokens = sum(self._tokens) if full else 0
        has_flops = full and not any(self._flops_missing)
        flops = math.fsum(self._flops) if has_flops else 0.0
        world = dist.get_world_size() if dist.is_initialized() else 1
        metrics: dict[str, Any] = {}
        if world > 1:
            row = [samples, tokens, flops, seconds, self._interval_seconds, self._interval_batches]
            began = _clock()
            reduced = _reduce(row)
            # Waiting here for slower ranks is wall time, but no batch's: charged to the
            # next batch, it would make a fast rank look as slow as the straggler.
            waited = _clock() - began
            self._train_seconds += waited
            if self._mark is not None:
                self._mark += waited
            if self._interval_batches:
                metrics.update(self._step_times(reduced))
        else:
            reduced = {"samples": samples, "tokens": tokens, "flops": flops, "seconds": seconds}
        self._interval_seconds, self._interval_batches = 0.0, 0
        if full and seconds > 0:  # the slowest rank's seconds are at least this rank's
            elapsed = reduced["seconds"]
            rates = {"batches": batches / elapsed, "samples": reduced["samples"] / elapsed}
            if tokens:
                rates["tokens"] = reduced["tokens"] / elapsed
            if has_flops:
                rates["flops"] = reduced["flops"] / elapsed
            for name, rate in rates.items():
                metrics[f"throughput/{name}_per_sec"] = rate
                metrics[f"throughput/device/{name}_per_sec"] = rate / world
            if has_flops:
                self._add_mfu(metrics, rates["flops"] / world, flops / seconds, state)
        metrics.update(self._times())
        logger.log_metrics(metrics)

    @staticmethod
    def _step_times(reduced: dict[str, Any]) -> dict[str, Any]:
        longest, shortest = reduced["step_max"], reduced["step_min"]
        if not is_tensor(shortest) and not shortest > 0:
            return {}  # a clock that did not move
        return {
            "throughput/step_time_max": longest,
            "throughput/step_time_min": shortest,
            "throughput/step_time_max_over_min": longest / shortest,
            "throughput/step_time_slowest_rank": reduced["slowest_rank"],
        }

    def _add_mfu(
        self, metrics: dict[str, Any], device_flops: Any, own_flops: float, state: State
    ) -> None:
        peak = self._peak_flops(state)
        if peak is None:
            return
        mfu = device_flops / peak
        check = own_flops / peak if is_tensor(mfu) else mfu
        if check > 1.0:
            if not self._warned_mfu:
                self._warned_mfu = True
                warnings.warn(
                    f"SpeedMonitor: the computed MFU is {check:.3g} ({check:.0%}), above 100%, "
                    f"so throughput/device/mfu is not logged: the peak ({peak:.4g} FLOP/s per "
                    "device) or the FLOPs per batch is wrong. To fix, check flops_per_batch "
                    "(FLOPs of this rank's batch) and pass gpu_flops_available or precision.",
                    ObsbusWarning,
                    stacklevel=2,
                )
            return
        if is_tensor(mfu):
            import torch

            mfu = torch.where(mfu <= 1.0, mfu, math.nan)
        metrics["throughput/device/mfu"] = mfu

    def _peak_flops(self, state: State) -> float | None:
        """The device's peak FLOP/s: the override, else the table; found once, warned once."""
        if self._peak_resolved:
            return self._peak
        self._peak_resolved = True
        info = _device_info(state)
        if info is None:
            reason = f"the run is not on a GPU (device {state.device!r})"
        else:
            name, multiprocessors = info
            precision = (
                self.precision or self._detected or precision_of(state.model, "cuda") or "fp32"
            )
            self._peak = peak_flops(name, precision, multiprocessors)
            reason = f"{name!r} at {precision} is not in the peak-FLOPs table"
        if self._peak is None:
            warnings.warn(
                f"SpeedMonitor: {reason}, so throughput/device/mfu is not logged (the table "
                "covers A100, H100, H200, B200, MI250X, MI300X, MI325X and MI355X). To fix, "
                "pass gpu_flops_available=<peak FLOP/s of one device>.",
                ObsbusWarning,
                stacklevel=2,
            )
        return self._peak
