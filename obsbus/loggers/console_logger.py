"""Print metrics to the console at an interval."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from typing_extensions import override

from obsbus._check import check_bool
from obsbus.interval import LogInterval
from obsbus.logger import Logger, LoggerDestination
from obsbus.state import State
from obsbus.time import TimeLike, TimeUnit
from obsbus.values import from_numpy, to_host

__all__ = ["ConsoleLogger", "format_value"]

_STREAMS = ("stdout", "stderr")


def format_value(value: Any) -> str:
    """A number as a person reads it: ``0.1235``, ``1.235e-05``, ``12,345.68``.

    numpy values read as the Python numbers they stand for.

    Example:
        >>> [format_value(v) for v in (0.123456, 1.23456e-5, 12345.678, 7)]
        ['0.1235', '1.235e-05', '12,345.68', '7']
        >>> import numpy as np
        >>> [format_value(v) for v in (np.float32(0.5), np.int64(12345), np.bool_(True))]
        ['0.5000', '12,345', 'True']
    """
    value = from_numpy(value)  # values from to_host are Python already; a direct caller's
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e3:
        return f"{value:.4f}"
    if 1e3 <= magnitude < 1e9:
        return f"{value:,.2f}"
    return f"{value:.3e}"


class ConsoleLogger(LoggerDestination):
    """Prints the latest metrics every ``log_interval``, on local rank 0.

    Metrics logged between prints are held (as tensors, unsynced) and turned
    into numbers together when a line is due. Eval metrics print at
    ``eval_end``; hyperparameters print once, at the first ``fit_start``.
    What is still held at ``fit_end`` is printed then.

    Args:
        log_interval: ``"10ba"`` or ``"1ep"``; a bare int counts epochs, as in
            Composer.
        stream: ``"stdout"``, ``"stderr"`` or a text stream.
        log_traces: also print traces.

    Example:
        >>> from obsbus import Run
        >>> console = ConsoleLogger(log_interval="2ba", stream="stdout")
        >>> with Run(max_duration="2ba", loggers=[console]) as run:
        ...     for batch in run.train([[1, 2], [3, 4]]):
        ...         run.state.loss = 0.25
        [epoch=1][batch=2/2]:
            loss/train/total: 0.2500
    """

    def __init__(
        self,
        log_interval: TimeLike = "1ba",
        stream: str | TextIO = "stderr",
        log_traces: bool = False,
    ) -> None:
        interval = LogInterval(log_interval, "ConsoleLogger log_interval", TimeUnit.EPOCH)
        if isinstance(stream, str) and stream not in _STREAMS:
            raise ValueError(
                f"ConsoleLogger stream {stream!r} is not supported: use 'stdout', 'stderr' or "
                "a text stream object."
            )
        if not isinstance(stream, str) and not callable(getattr(stream, "write", None)):
            # None or a number would fail only at the first line printed, mid-run.
            raise TypeError(
                f"ConsoleLogger stream must be 'stdout', 'stderr' or a text stream (an object "
                f"with write()), got {stream!r}."
            )
        self.log_interval = interval
        self.stream = stream
        self.log_traces_enabled = check_bool("ConsoleLogger", "log_traces", log_traces)
        self._state: State | None = None
        self._pending: dict[str, Any] = {}
        self._hparams: dict[str, Any] = {}
        self._hparams_printed = False
        self._fitting = False

    def _enabled(self) -> bool:
        return self._state is None or self._state.local_rank == 0

    def _write(self, text: str) -> None:
        if not self._enabled():
            return
        stream = getattr(sys, self.stream) if isinstance(self.stream, str) else self.stream
        stream.write(text + "\n")
        stream.flush()

    @override
    def init(self, state: State, logger: Logger) -> None:
        self._state = state

    @override
    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        self._hparams.update(hyperparameters)
        if self._fitting:
            self._print_hparams()

    def _print_hparams(self) -> None:
        if not self._hparams or self._hparams_printed:
            return
        self._hparams_printed = True
        lines = [f"    {k}: {v}" for k, v in self._hparams.items()]
        self._write("Hyperparameters:\n" + "\n".join(lines))

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self._pending.update(metrics)

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self.log_traces_enabled:
            self._write("Traces:\n" + "\n".join(f"    {k}: {v}" for k, v in traces.items()))

    def _prefix(self) -> str:
        if self._state is None:
            return ""
        ts = self._state.timestamp
        total = self._state.dataloader_len
        batch = (
            f"{ts.batch_in_epoch.value}/{total.value}"
            if total is not None
            else str(ts.batch_in_epoch.value)
        )
        return f"[epoch={ts.epoch.value + 1}][batch={batch}]"

    def _print_pending(self, prefix: str) -> None:
        if not self._pending:
            return
        values = to_host(self._pending)
        self._pending = {}
        self._write(
            f"{prefix}:\n" + "\n".join(f"    {k}: {format_value(v)}" for k, v in values.items())
        )

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._fitting = True
        self._print_hparams()

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_batch_end(state):
            self._print_pending(self._prefix())

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            ts = state.timestamp
            self._print_pending(f"[epoch={ts.epoch.value}][end]")

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        label = state.dataloader_label or "eval"
        eval_keys = {k: v for k, v in self._pending.items() if k.startswith(f"metrics/{label}/")}
        if eval_keys:
            for key in eval_keys:
                del self._pending[key]
            values = to_host(eval_keys)
            self._write(
                f"[eval {label}] after {state.timestamp.batch}:\n"
                + "\n".join(f"    {k}: {format_value(v)}" for k, v in values.items())
            )

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._print_pending(f"[fit end][batch={state.timestamp.batch.value}]")
        self._fitting = False

    @override
    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        self._print_pending("[eval]")
