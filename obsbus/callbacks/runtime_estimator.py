"""Estimate the wall-clock time a run has left, evaluation included."""

from __future__ import annotations

import math
import time
import warnings

from typing_extensions import override

from obsbus._check import check_int
from obsbus.callback import Callback
from obsbus.callbacks._averaging import RunningAverage
from obsbus.callbacks._time_units import seconds_per_unit, unit_label
from obsbus.errors import ObsbusWarning
from obsbus.interval import LogInterval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import Time, TimeLike, TimeUnit

__all__ = ["RuntimeEstimator", "training_fraction"]

_clock = time.perf_counter
"""The clock every duration here is read from (tests replace it with a fake one)."""

KEY = "time/remaining_estimate"
UNIT_KEY = "time/remaining_estimate_unit"


def training_fraction(state: State) -> float | None:
    """How much of ``max_duration`` is done, from 0 to 1; ``None`` when it can't be told.

    As :meth:`~obsbus.State.get_elapsed_duration`, except that a
    ``max_duration`` in epochs advances batch by batch: from the batches per
    epoch seen so far, or the dataloader's length during the first epoch
    (``None`` then, for a dataloader without one), as Composer does.

    Example:
        >>> from obsbus import Timestamp
        >>> state = State(run_name="r", max_duration="2ep")
        >>> state.timestamp = Timestamp(epoch=1, batch=13, batch_in_epoch=3)
        >>> training_fraction(state)  # 10 batches per epoch
        0.65
    """
    duration = state.max_duration
    if duration is None:
        return None
    ts = state.timestamp
    if ts._batch == 0:
        return 0.0
    if duration.unit is TimeUnit.EPOCH:
        if ts._epoch >= 1:
            per_epoch: float = (ts._batch - ts._batch_in_epoch) / ts._epoch
        elif state.dataloader_len is not None:
            per_epoch = state.dataloader_len.value
        else:
            return None
        total = duration.value * per_epoch
        return min(ts._batch / total, 1.0) if total else 1.0
    elapsed = state.get_elapsed_duration()
    return None if elapsed is None else float(elapsed.value)


class _Evals:
    """One eval dataloader's history: how many evals, their durations, progress at the last."""

    __slots__ = ("count", "first", "fraction", "later")

    def __init__(self) -> None:
        self.count = 0
        self.first = 0.0
        self.fraction: float | None = None
        self.later = RunningAverage(skip=0, reset_interval=0)

    def add(self, seconds: float, fraction: float | None) -> None:
        if self.count == 0:
            self.first = seconds
        else:
            self.later.add(seconds)
        self.count += 1
        if fraction is not None:
            self.fraction = fraction

    def remaining_seconds(self) -> float:
        """Evals left, assuming they come evenly in training progress, times seconds per eval."""
        if not self.fraction:
            return 0.0
        total = math.floor(self.count / self.fraction + 1e-9)
        mean = self.later.mean()
        return max(total - self.count, 0) * (self.first if mean is None else mean)


class RuntimeEstimator(Callback):
    """Logs an estimate of the wall-clock time left until ``max_duration``, eval included.

    Composer's estimate: training time left = seconds per unit of progress
    x progress left, where seconds per unit of progress is the time spent
    training since warm-up ended over the progress made since (the fraction
    of ``max_duration``; see :func:`training_fraction`), plus, for each eval
    dataloader, seconds per eval x evals left. Concretely, each batch's
    seconds (from the previous ``batch_end``, or ``fit_start``, to its own
    ``batch_end``, minus any evaluation in between: dataloader waits and
    checkpoints count as training) go into a
    :class:`~obsbus.callbacks._averaging.RunningAverage` weighted by the
    progress the batch made. The first ``skip_batches`` batches are left out
    (compilation, allocator and dataloader warm-up). With ``reset_interval``
    the average restarts every that many batches, to follow a run whose speed
    changes; by default (0) it covers the whole run since warm-up, as
    Composer's does.

    Evaluation inside fit (``eval_before_all`` ... ``eval_after_all``) is
    timed per dataloader label from ``eval_start`` to ``eval_end``. Seconds
    per eval is the mean of every eval but the first (it often downloads or
    warms up), or the first while there is only one. Evals left assumes evals
    come evenly in progress, as Composer does: with ``n`` evals by progress
    ``f``, ``floor(n / f) - n`` are left. Standalone evaluation is ignored.

    Nothing is logged until a batch after warm-up ends, nor when the progress
    can't be told (``max_duration`` in epochs, a dataloader without a
    length, during the first epoch). Without a ``max_duration`` there is
    nothing to estimate: that is reported once (an
    :class:`~obsbus.ObsbusWarning`) and nothing is logged. When
    ``max_duration`` changes (``fit(duration=...)``), the average restarts,
    since progress is then measured against a new total. All arithmetic is
    on Python floats from the host clock: no device work, no sync.

    Keys:

    - ``time/remaining_estimate``: the estimated wall-clock time until
      ``max_duration`` is reached, in ``time_unit`` (hours by default, as
      Composer), a float; its unit (``h``, ``s``...) is declared, so the
      console and the report show it.
    - ``time/remaining_estimate_unit``: a hyperparameter, logged at ``init``:
      ``time_unit`` (``"hours"``, ...), as Composer logs it.

    Args:
        skip_batches: batches left out of the average at the start (default
            1, as Composer; Primus's ``log_avg_skip_iterations`` is 2).
        time_unit: the unit of the estimate: ``"seconds"``, ``"minutes"``,
            ``"hours"`` or ``"days"``.
        reset_interval: restart the average every that many batches (Primus's
            ``log_avg_reset_interval``); 0 never restarts.
        log_interval: ``"1ba"`` (default: every batch, as Composer) or
            ``"1ep"``; a bare int counts batches.

    Example:
        >>> from obsbus import Run
        >>> from obsbus.loggers import InMemoryLogger
        >>> mem = InMemoryLogger()
        >>> with Run(max_duration="4ba", callbacks=[RuntimeEstimator(time_unit="seconds")],
        ...          loggers=[mem]) as run:
        ...     for batch in run.train([[1], [2], [3], [4]]):
        ...         pass
        >>> series = mem.get_timeseries("time/remaining_estimate")
        >>> series["step"], series["time/remaining_estimate"][-1]
        ([2, 3, 4], 0.0)
    """

    def __init__(
        self,
        skip_batches: int = 1,
        time_unit: str = "hours",
        *,
        reset_interval: int = 0,
        log_interval: TimeLike = "1ba",
    ) -> None:
        for name, value in (("skip_batches", skip_batches), ("reset_interval", reset_interval)):
            check_int("RuntimeEstimator", name, value, minimum=0)
        seconds = seconds_per_unit("RuntimeEstimator", time_unit)
        self.skip_batches = skip_batches
        self.time_unit = time_unit
        self.reset_interval = reset_interval
        self.log_interval = LogInterval(log_interval, "RuntimeEstimator log_interval")
        self._seconds_per_unit = seconds
        self._unit_label = unit_label("RuntimeEstimator", time_unit)
        # Warm-up is counted in batches here, not in RunningAverage's values: a batch whose
        # progress can't be told adds no value but is still warm-up.
        self._rate = RunningAverage(skip=0, reset_interval=reset_interval)
        self._batches = 0
        self._duration: Time | None = None  # the max_duration the average is measured against
        self._mark: float | None = None  # end of the previous batch, moved past any eval
        self._fraction: float | None = None  # progress at the previous batch_end
        self._evals: dict[str, _Evals] = {}
        self._evals_start: float | None = None
        self._eval_start: float | None = None
        self._eval_seconds: list[tuple[str, float]] = []
        self._estimate: float | None = None
        self._warned = False

    def _check_duration(self, state: State) -> bool:
        """Whether there is a ``max_duration``; restart the average when it changed."""
        duration = state.max_duration
        if duration is None:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    "RuntimeEstimator: the run has no max_duration, so there is no remaining "
                    f"time to estimate and {KEY!r} is not logged. To fix, give the run a "
                    "max_duration, e.g. Run(max_duration='1000ba') or '3ep'.",
                    ObsbusWarning,
                    stacklevel=4,
                )
            return False
        if duration != self._duration:  # also when the unit differs: Time == is then False
            if self._duration is not None:
                self._rate.reset()
            self._duration = duration
            self._fraction = None
        return True

    @override
    def init(self, state: State, logger: Logger) -> None:
        logger.log_hyperparameters({UNIT_KEY: self.time_unit})

    @override
    def metric_units(self) -> dict[str, str]:
        return {KEY: self._unit_label}

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._mark = _clock()
        self._fraction = training_fraction(state) if self._check_duration(state) else None

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        now = _clock()
        seconds = now - (now if self._mark is None else self._mark)
        self._mark = now
        self._batches += 1
        if not self._check_duration(state):
            return
        fraction = training_fraction(state)
        previous, self._fraction = self._fraction, fraction
        if fraction is None:
            return
        if previous is not None and fraction > previous and self._batches > self.skip_batches:
            progress = fraction - previous
            self._rate.add(seconds / progress, weight=progress)
        rate = self._rate.mean()
        if rate is None:
            return
        remaining = rate * (1.0 - fraction)
        remaining += sum(evals.remaining_seconds() for evals in self._evals.values())
        self._estimate = remaining / self._seconds_per_unit
        if self.log_interval.at_batch_end(state):
            logger.log_metrics({KEY: self._estimate})

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self._estimate is not None and self.log_interval.at_epoch_end(state):
            logger.log_metrics({KEY: self._estimate})

    @override
    def eval_before_all(self, state: State, logger: Logger) -> None:
        self._evals_start = _clock()
        self._eval_seconds = []

    @override
    def eval_start(self, state: State, logger: Logger) -> None:
        if self._evals_start is not None:  # inside fit; standalone eval is not timed
            self._eval_start = _clock()

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        if self._eval_start is not None:
            label = state.dataloader_label or "eval"
            self._eval_seconds.append((label, _clock() - self._eval_start))
            self._eval_start = None

    @override
    def eval_after_all(self, state: State, logger: Logger) -> None:
        if self._evals_start is None:
            return
        now = _clock()
        if self._mark is not None:
            self._mark += now - self._evals_start  # eval time is not training time
        self._evals_start = None
        # Read here, not at eval_end: the train dataloader's length is back in the state.
        fraction = training_fraction(state) if state.max_duration is not None else None
        for label, seconds in self._eval_seconds:
            self._evals.setdefault(label, _Evals()).add(seconds, fraction)
        self._eval_seconds = []
