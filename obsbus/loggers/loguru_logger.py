"""Write metric lines to the rank-aware loguru log at an interval."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import override

from obsbus._check import check_bool
from obsbus._units import PluginUnits, with_unit
from obsbus.interval import LogInterval, at_interval
from obsbus.log import _level, get_logger
from obsbus.logger import Logger
from obsbus.loggers._pending import Pending
from obsbus.loggers._text_destination import TextDestination
from obsbus.loggers.console_logger import epoch_progress, format_value
from obsbus.naming import epoch_number
from obsbus.state import State
from obsbus.time import TimeLike, TimeUnit
from obsbus.values import to_host

__all__ = ["LoguruLogger"]


class LoguruLogger(TextDestination):
    """Logs the latest metrics every ``log_interval`` to loguru, on every rank.

    Set the log up with :func:`obsbus.log.setup_logging` and each rank's
    metrics land in its own files (``logs/{module}/rank-{rank}/info.log``) with
    the rank on every line; without it, lines go wherever loguru writes.
    Metrics logged between lines are held as they are (tensors stay on the
    device, unsynced) and turned into numbers together, with one
    :func:`~obsbus.values.to_host` call, when a line is due. One line per
    interval, keys sorted by name, each value with the unit its plug-in
    declares (:meth:`~obsbus.Callback.metric_units`; none where none is)::

        [epoch=1][batch=10/100] loss/train/total=0.2500 lr=3.000e-04 time/train=0.003056 h

    Epochs count from 1, as on the console and in the JSON Lines
    (:func:`~obsbus.naming.epoch_number`). Eval metrics are written at
    ``eval_end`` (``[epoch=1][eval=eval] after batch 100 metrics/eval/loss=...``,
    ``eval=`` naming the dataloader's label), hyperparameters once, at the
    first ``fit_start`` (or when logged during a fit). What is still held is
    written at ``fit_end``, on the ``exception`` event and at ``close``. Each
    metric record carries ``extra["metrics"]`` (the numbers) and
    ``extra["step"]``, for a sink that wants structured data (loguru's
    ``serialize=True``).

    Args:
        log_interval: ``"10ba"`` or ``"1ep"``; a bare int counts epochs, as in
            :class:`~obsbus.loggers.ConsoleLogger`.
        level: the level of the lines. ``"INFO"`` puts them in ``info.log`` and
            on stderr; ``"DEBUG"`` keeps them off the console (and in
            ``debug.log`` only) when a ``ConsoleLogger`` prints them already.
        log_traces: also log traces.

    Example:
        >>> import tempfile
        >>> from obsbus import Run
        >>> from obsbus.log import reset_logging, setup_logging
        >>> folder = tempfile.mkdtemp()
        >>> _ = setup_logging(folder, stderr=False)
        >>> with Run(max_duration="2ba", loggers=[LoguruLogger(log_interval="2ba")]) as run:
        ...     for batch in run.train([[1, 2], [3, 4]]):
        ...         run.state.loss = 0.25
        >>> reset_logging()
        >>> print(open(f"{folder}/logs/train/rank-0/info.log").read().split(" - ")[-1].strip())
        [epoch=1][batch=2/2] loss/train/total=0.2500
        >>> import shutil; shutil.rmtree(folder)
    """

    def __init__(
        self,
        log_interval: TimeLike = "1ba",
        level: str = "INFO",
        log_traces: bool = False,
    ) -> None:
        interval = LogInterval(log_interval, "LoguruLogger log_interval", TimeUnit.EPOCH)
        self.log_interval = interval
        self.level = _level(level, "LoguruLogger level")[0]
        self.log_traces_enabled = check_bool("LoguruLogger", "log_traces", log_traces)
        super().__init__()
        self._pending = Pending()  # from any thread
        self._step: int | None = None
        self._units = PluginUnits()

    def _emit(self, text: str, **extra: Any) -> None:
        get_logger().bind(**extra).log(self.level, text)

    def _write(self, prefix: str, held: Mapping[str, Any]) -> None:
        values = to_host(held)  # every value due, in one transfer
        units = self._units
        units.refresh(self._state.callbacks if self._state is not None else ())
        pairs = " ".join(
            f"{key}={with_unit(format_value(values[key]), units.of(key))}" for key in sorted(values)
        )
        self._emit(f"{prefix} {pairs}".lstrip(), metrics=values, step=self._step)

    def _write_pending(self, prefix: str) -> None:
        held = self._pending.take()
        if held:
            self._write(prefix, held)

    @override
    def _write_hparams(self, hparams: Mapping[str, Any]) -> None:
        pairs = " ".join(f"{key}={value}" for key, value in hparams.items())
        self._emit(f"Hyperparameters: {pairs}", hyperparameters=dict(hparams))

    def _prefix(self) -> str:
        return "" if self._state is None else epoch_progress(self._state)

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self._pending.update(metrics)
        self._step = step

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self.log_traces_enabled and traces:
            pairs = " ".join(f"{key}={value}" for key, value in traces.items())
            self._emit(f"Traces: {pairs}", traces=dict(traces))

    @override
    @at_interval("log_interval")
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_batch_end(state):
            self._write_pending(self._prefix())

    @override
    @at_interval("log_interval")
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            self._write_pending(f"[epoch={epoch_number(state.timestamp)}][end]")

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        label = state.dataloader_label or "eval"
        prefix = f"metrics/{label}/"
        due = self._pending.take_prefixed(prefix)
        if due:
            ts = state.timestamp  # state.dataloader_len is the eval one's here
            self._write(f"[epoch={epoch_number(ts)}][eval={label}] after batch {ts._batch}", due)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._write_pending(f"[fit end][batch={state.timestamp.batch.value}]")
        super().fit_end(state, logger)

    @override
    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        self._write_pending("[eval]")

    @override
    def exception(self, state: State, logger: Logger) -> None:
        self._write_pending("[exception]")

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._write_pending("[close]")
