"""Hugging Face Accelerate: ``accelerator.log(...)`` into obsbus destinations.

An Accelerate loop gets obsbus's events from :class:`~obsbus.Run` (the loop is
yours), with ``Run(backward=accelerator.backward)`` so ``run.backward(loss)``
runs Accelerate's backward (gradient scaling, DeepSpeed) between
``before_backward`` and ``after_backward``. :class:`ObsbusTracker` is the
other half: an Accelerate tracker, so what the loop logs with
``accelerator.log`` reaches the same destinations (FileLogger, TensorBoard,
MLflow, ...).

===================================  =====================================
Accelerate                           obsbus
===================================  =====================================
``Accelerator(log_with=[tracker])``  the tracker joins ``accelerator.trackers``
``init_trackers(config=...)``        ``logger.log_hyperparameters(config)``
``accelerator.log(values, step)``    ``logger.log_metrics(values, step)``
``accelerator.end_training()``       ``finish()``: closes only what it owns
``accelerator.backward(loss)``       ``Run(backward=accelerator.backward)``
===================================  =====================================

Accelerate has no hooks, so it gives no obsbus events by itself: every event
(``fit_start``, batch, forward, loss, backward, ``fit_end``, ``exception``)
comes from the :class:`~obsbus.Run` that drives the loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from obsbus._check import check_str
from obsbus.errors import MissingExtraError
from obsbus.logger import LoggerDestination
from obsbus.run import Run

if TYPE_CHECKING:
    # Accelerate ships no type information; to mypy the base is a plain class.
    _GeneralTracker = object
    _HAVE_ACCELERATE = True
else:
    try:
        from accelerate.tracking import GeneralTracker as _GeneralTracker

        _HAVE_ACCELERATE = True
    except ImportError:
        _GeneralTracker = object
        _HAVE_ACCELERATE = False

__all__ = ["ObsbusTracker"]


class ObsbusTracker(_GeneralTracker):
    """An Accelerate ``GeneralTracker`` that writes to obsbus destinations.

    Give it the :class:`~obsbus.Run` that drives the loop, and
    ``accelerator.log`` values go to that run's destinations, next to what
    its monitors log; ``step=None`` means the run's current batch. The run
    owns its destinations: :meth:`finish` leaves them open and ``with run:``
    closes them.

    Or give it ``loggers=`` (one destination or several) for a loop without a
    Run: the tracker then owns a Run of its own (no training events fire
    through it), ``step=None`` means the last step given (0 before any), and
    :meth:`finish` (``accelerator.end_training()``) closes the destinations,
    which flushes them.

    Numbers and tensors go to ``log_metrics`` (tensors unsynced); strings,
    which Accelerate allows but obsbus metrics are not, go to ``log_traces``.
    ``init_trackers(config=...)`` goes to ``log_hyperparameters``.

    Args:
        run: the Run whose destinations receive the values.
        loggers: destinations for a tracker without a Run (instead of ``run``).
        run_name: the name of the tracker's own Run (only with ``loggers``).

    Raises:
        MissingExtraError: Accelerate is not installed.

    Example:
        In a script, ``Accelerator(log_with=[tracker])`` makes these calls; here
        they are made directly, since an Accelerator sets process-wide state::

            accelerator = Accelerator(log_with=[ObsbusTracker(run)])
            accelerator.init_trackers("project", config={"lr": 0.1})
            accelerator.log({"train/loss": loss}, step=step)

        >>> from obsbus.loggers import InMemoryLogger
        >>> mem = InMemoryLogger()
        >>> tracker = ObsbusTracker(loggers=[mem])
        >>> tracker.store_init_configuration({"lr": 0.1})  # init_trackers(config=...)
        >>> tracker.log({"train/loss": 0.5}, step=3)  # accelerator.log(...)
        >>> tracker.finish()  # accelerator.end_training()
        >>> mem.get_timeseries("train/loss")["step"], mem.hyperparameters
        ([3], {'lr': 0.1})
    """

    name = "obsbus"
    requires_logging_directory = False

    def __init__(
        self,
        run: Run | None = None,
        *,
        loggers: LoggerDestination | Iterable[LoggerDestination] | None = None,
        run_name: str | None = None,
    ) -> None:
        if not _HAVE_ACCELERATE:
            raise MissingExtraError("accelerate", "ObsbusTracker")
        if run is not None and not isinstance(run, Run):
            raise TypeError(
                f"ObsbusTracker run must be an obsbus Run (or None, with loggers=), got {run!r}."
            )
        if (run is None) == (loggers is None):
            raise ValueError(
                "ObsbusTracker takes a Run or loggers=, exactly one of them, got "
                f"run={run!r} and loggers={loggers!r}. To fix, pass the Run that drives "
                "your loop, or the destinations to log to."
            )
        if run_name is not None and run is not None:
            raise ValueError(
                f"ObsbusTracker run_name is for a tracker given loggers=, got {run_name!r} "
                "with a Run (the Run has its own name)."
            )
        if run_name is not None:
            check_str("ObsbusTracker", "run_name", run_name)
        self._owns = run is None
        self._run = Run(loggers=loggers, run_name=run_name) if run is None else run
        self._last_step = 0
        super().__init__()

    @property
    def tracker(self) -> Run:
        """The obsbus Run the values go through (Accelerate's ``get_tracker("obsbus")``)."""
        return self._run

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """``init_trackers(config=values)``: the run's hyperparameters."""
        self._run.logger.log_hyperparameters(dict(values))

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """``accelerator.log(values, step)``: metrics at ``step``; ``kwargs`` are unused."""
        if self._owns:
            if step is None:
                step = self._last_step
            self._last_step = step
        metrics = {k: v for k, v in values.items() if not isinstance(v, str)}
        if metrics:
            self._run.logger.log_metrics(metrics, step)
        if len(metrics) < len(values):
            self._run.logger.log_traces({k: v for k, v in values.items() if isinstance(v, str)})

    def finish(self) -> None:
        """``accelerator.end_training()``: close the destinations if the tracker owns them."""
        if self._owns:
            self._run.close()
