"""Print metrics to the console at an interval."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from typing_extensions import override

from obsbus._check import check_bool, check_stream, is_number
from obsbus._units import PluginUnits, with_unit
from obsbus.interval import LogInterval, at_interval
from obsbus.logger import Logger
from obsbus.loggers._pending import Pending
from obsbus.loggers._text_destination import TextDestination
from obsbus.naming import epoch_number
from obsbus.state import State
from obsbus.time import TimeLike, TimeUnit
from obsbus.values import from_numpy, to_host

__all__ = ["ConsoleLogger", "epoch_progress", "format_value"]


def format_value(value: Any) -> str:
    """A number as a person reads it, with at least 4 significant digits.

    The one number format of every text destination (console, loguru lines,
    progress bar, the text log). Floats: fixed point from 0.001 to 1e9 (4
    decimals below 1, more below 0.1 so that 4 significant digits show,
    ``0.003056``; 4 decimals up to 1000, then thousands separators and 2
    decimals, ``12,345.68``), scientific with 4 significant digits outside
    (``1.235e-05``). Ints are counts: as they are, with thousands separators
    from 10,000. numpy values read as the Python numbers they stand for.

    Example:
        >>> [format_value(v) for v in (0.123456, 11 / 3600, 1.23456e-5, 12345.678, 7)]
        ['0.1235', '0.003056', '1.235e-05', '12,345.68', '7']
        >>> import numpy as np
        >>> [format_value(v) for v in (np.float32(0.5), np.int64(12345), np.bool_(True))]
        ['0.5000', '12,345', 'True']
    """
    value = from_numpy(value)  # values from to_host are Python already; a direct caller's
    if not is_number(value):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e3:
        decimals = 4 if magnitude == 0 else max(4, 3 - math.floor(math.log10(magnitude)))
        return f"{value:.{decimals}f}"
    if 1e3 <= magnitude < 1e9:
        return f"{value:,.2f}"
    return f"{value:.3e}"


def epoch_progress(state: State) -> str:
    """``[epoch=E][batch=B/N]``: the epoch counted from 1 (:func:`~obsbus.naming.epoch_number`)
    and the batch within it; at an epoch's end, its last batch.
    """
    ts, total = state.timestamp, state.dataloader_len
    batch = ts._batch_in_epoch
    if batch == 0 and ts._epoch != 0:  # at epoch_end the count has moved to the next epoch
        batch = int(total.value) if total is not None else batch
    shown = f"{batch}/{int(total.value)}" if total is not None else str(batch)
    return f"[epoch={epoch_number(ts)}][batch={shown}]"


class ConsoleLogger(TextDestination):
    """Prints the latest metrics every ``log_interval``, on local rank 0, in Composer's format.

    Metrics logged between prints are held (as tensors, unsynced) and turned
    into numbers together when a block is due. A block is a progress header
    and one line per metric, prefixed ``Train`` or ``Eval`` as Composer's::

        [epoch=1][batch=2/4]:
        \t Train loss/train/total: 0.2500
        [Eval batch=2/2] Eval on eval data:
        \t Eval metrics/eval/loss: 0.1250

    **What a line shows.** Each value with its unit, as the plug-in that
    logged it declares it (``Train time/train: 0.003056 h``; see
    :meth:`~obsbus.Callback.metric_units`); a key with no declared unit
    (a loss, a ratio) shows none. Keys are printed sorted by name, so a key
    keeps its place from block to block whatever order it was logged in.
    Numbers have one format, with at least 4 significant digits
    (:func:`format_value`).

    The header is ``[epoch=E][batch=B/N]`` when ``max_duration`` is in epochs
    (or unknown), else ``[batch=B/T]``, ``[sample=...]``, ``[token=...]``:
    progress in the unit of ``max_duration``, as Composer prints it. Epochs
    count from 1, as the JSON Lines ``epoch`` column and the ``{epoch}`` of
    trace file names (:func:`~obsbus.naming.epoch_number`). Train
    blocks print at ``batch_end`` (a ``ba`` interval) or ``epoch_end`` (``ep``),
    and once at ``fit_end`` for what is still held. An eval block prints at
    each ``eval_end`` with what was logged during that evaluation; train
    values held at the time stay held for the next train block (Composer drops
    them). Hyperparameters print once, at the first ``fit_start``.

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
        [batch=2/2]:
        \t Train loss/train/total: 0.2500
    """

    def __init__(
        self,
        log_interval: TimeLike = "1ba",
        stream: str | TextIO = "stderr",
        log_traces: bool = False,
    ) -> None:
        interval = LogInterval(log_interval, "ConsoleLogger log_interval", TimeUnit.EPOCH)
        self.log_interval = interval
        self.stream = check_stream("ConsoleLogger", "stream", stream)
        self.log_traces_enabled = check_bool("ConsoleLogger", "log_traces", log_traces)
        super().__init__()
        self._pending = Pending()  # from any thread
        self._held_for_train: dict[str, Any] | None = None  # train values held during an eval
        self._units = PluginUnits()

    def _enabled(self) -> bool:
        return self._state is None or self._state.local_rank == 0

    def _write(self, text: str) -> None:
        if not self._enabled():
            return
        stream = getattr(sys, self.stream) if isinstance(self.stream, str) else self.stream
        stream.write(text + "\n")
        stream.flush()

    @override
    def _write_hparams(self, hparams: Mapping[str, Any]) -> None:
        lines = [f"    {k}: {v}" for k, v in hparams.items()]
        self._write("Hyperparameters:\n" + "\n".join(lines))

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self._pending.update(metrics)

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self.log_traces_enabled:
            self._write("\n".join(f"[trace]: {k}: {v}" for k, v in traces.items()))

    @staticmethod
    def _progress(state: State) -> str:
        """Composer's train progress: ``[epoch=1][batch=2/4]`` or ``[batch=2/10]``."""
        ts, duration = state.timestamp, state.max_duration
        if duration is None or duration.unit is TimeUnit.EPOCH:
            return epoch_progress(state)
        unit = duration.unit
        done = ts.get(unit).value
        return f"[{unit.name.lower()}={format_value(done)}/{format_value(duration.value)}]"

    def _block(self, header: str, prefix: str, metrics: Mapping[str, Any]) -> None:
        values = to_host(metrics)
        units = self._units
        units.refresh(self._state.callbacks if self._state is not None else ())
        lines = "".join(
            f"\n\t {prefix}{k}: {with_unit(format_value(values[k]), units.of(k))}"
            for k in sorted(values)
        )
        self._write(header + (":" if values else "") + lines)

    def _print_train(self, state: State) -> None:
        pending = self._pending.take()
        if pending:
            self._block(self._progress(state), "Train ", pending)

    @override
    @at_interval("log_interval")
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_batch_end(state):
            self._print_train(state)

    @override
    @at_interval("log_interval")
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            self._print_train(state)

    @override
    def eval_start(self, state: State, logger: Logger) -> None:
        if self._held_for_train is None:
            self._held_for_train = self._pending.take()

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        label = state.dataloader_label or "eval"
        done = state.eval_timestamp._batch
        total = state.dataloader_len
        header = f"[Eval batch={done}/{int(total.value) if total is not None else done}]"
        pending = self._pending.take()
        if pending:
            self._block(f"{header} Eval on {label} data", "Eval ", pending)
        held, self._held_for_train = self._held_for_train, None
        if held:
            self._pending.put_back(held)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._print_train(state)  # what is still held: nothing logged is dropped
        super().fit_end(state, logger)

    @override
    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        pending = self._pending.take()
        if pending:
            self._block("[eval]", "Eval ", pending)
