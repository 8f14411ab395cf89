"""A tqdm progress bar for training and evaluation, on local rank 0."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from typing_extensions import override

from obsbus._check import check_bool, check_optional_bool, check_seconds, check_stream
from obsbus._units import PluginUnits, with_unit
from obsbus.logger import Logger, LoggerDestination
from obsbus.loggers._progress_bars import Bar, LiveBar, PlainBar, isatty
from obsbus.loggers.console_logger import format_value
from obsbus.state import State
from obsbus.time import TimeUnit
from obsbus.values import to_host

__all__ = ["ProgressBarLogger"]

_DEFAULT_KEYS = ("loss/train/total", "loss/", "metrics/")
_MAX_SHOWN = 4  # a terminal line has room for a handful of values next to the bar
_LINE_STEPS = 10  # plain lines: one at every 10% of the total (and one a minute)
_UNITS = {  # what the train bar counts, per max_duration unit: (label, SI-scale the counts)
    TimeUnit.BATCH: ("ba", False),
    TimeUnit.EPOCH: ("ep", False),
    TimeUnit.SAMPLE: ("sp", True),
    TimeUnit.TOKEN: ("tok", True),
    TimeUnit.SECOND: ("s", False),
}


def _short_key(key: str) -> str:
    """The name a metric key gets in the postfix: ``train``/``total`` and a leading
    ``metrics`` segment are dropped.

    Example:
        >>> [_short_key(k) for k in ("loss/train/total", "loss/train/ce", "metrics/eval/loss")]
        ['loss', 'loss/ce', 'eval/loss']
    """
    parts = key.split("/")
    if parts[0] == "metrics":
        parts = parts[1:]
    return "/".join(p for p in parts if p not in ("train", "total")) or key


class ProgressBarLogger(LoggerDestination):
    """A tqdm progress bar per fit and per evaluation, with the latest metrics, on local rank 0.

    **Train bar.** Opened at ``fit_start``, closed at ``fit_end`` (and at
    ``exception`` and ``close``, so no bar is left open). It counts in the
    unit of ``state.max_duration``: batches (``ba``); batches again for
    epochs (``ep``) when the dataloader has a length (total = epochs x
    batches per epoch), else epochs; samples (``sp``) and tokens (``tok``),
    SI-scaled; seconds (``sec``). It starts at the progress already made, so
    a second ``fit`` continues the count. Without a ``max_duration`` it
    counts batches with no total. It moves at ``batch_end``/``epoch_end``.

    **Eval bars.** Each ``eval_start`` opens a bar over that dataloader's
    batches (total when it has a length), below the train bar; an eval bar
    inside fit vanishes at ``eval_end``, a standalone one stays.

    **Postfix.** The latest values logged under ``postfix_keys``, at most 4,
    formatted like :class:`ConsoleLogger` (``loss=0.1235``), with the unit
    the logging plug-in declares (``time/train=0.003056 h``), in the order of
    ``postfix_keys`` and then of first logging, kept for the run. Names are
    shortened by dropping ``train``/``total`` and a leading ``metrics``:
    ``loss/train/total`` -> ``loss``, ``metrics/eval/loss`` -> ``eval/loss``.
    Values are held as logged (tensors stay on the device) and turned into
    numbers together, with one :func:`~obsbus.values.to_host`, only when the
    postfix is refreshed: at most once per ``postfix_interval`` seconds
    (checked at ``batch_end``) and once at ``fit_end``: one device sync a
    second costs well under 1% of wall time whatever the step time, where
    one per batch would take a fast loop's CPU/GPU overlap away.

    **Not a terminal.** When the stream is not a TTY (a log file, a CI log,
    a pipe), redraws would fill the log with carriage returns, so plain
    lines are printed instead: ``train epoch 1/2:  40% 4/10 [00:03<00:04,
    1.25ba/s, loss=0.1235]``, one at every 10% of the total, at least one a
    minute, and a last one at the end (an eval prints its last line only).
    Values are then converted only for a line that is printed.

    **Logging.** Bars are plain ``tqdm.tqdm`` instances on the stream, so
    ``tqdm.tqdm.write`` (which obsbus's loguru stderr sink uses while bars
    exist) clears and redraws them: log lines are never torn.

    Only local rank 0 shows anything; on other ranks every hook returns at
    once. ``TQDM_DISABLE`` set to anything but ``""``/``0``/``false``/``no``/
    ``off`` turns the logger off (checked at each fit and eval). Prediction
    shows no bar.

    Args:
        stream: ``"stderr"``, ``"stdout"`` or a text stream; the names are
            resolved when a bar opens.
        log_traces: also print traces (``[trace]: key: value``).
        postfix_interval: the least number of seconds between two postfix
            refreshes of a live bar; ``0`` refreshes (and syncs) every batch.
        postfix_keys: the metric keys to show, in order: exact keys, or
            prefixes ending in ``/`` (``"loss/"``). Default:
            ``loss/train/total`` first, then other ``loss/`` and ``metrics/``
            keys in the order first logged. ``()`` shows none and converts
            nothing.
        live: ``True`` for a live bar, ``False`` for plain lines; ``None``
            (default) decides by whether the stream is a TTY. Set ``True`` in
            a notebook, whose output stream is not a TTY but redraws fine.

    Example:
        >>> import io
        >>> from obsbus import Run
        >>> out = io.StringIO()  # not a TTY: plain lines, not a live bar
        >>> with Run(max_duration="2ba", loggers=[ProgressBarLogger(stream=out)]) as run:
        ...     for batch in run.train([[1, 2], [3, 4]]):
        ...         run.state.loss = 0.25
        >>> print(out.getvalue(), end="")
        train epoch 1:  50% 1/2 [..., loss=0.2500]
        train epoch 1: 100% 2/2 [..., loss=0.2500]
    """

    def __init__(
        self,
        stream: str | TextIO = "stderr",
        log_traces: bool = False,
        postfix_interval: float = 1.0,
        postfix_keys: Sequence[str] | None = None,
        live: bool | None = None,
    ) -> None:
        check_stream("ProgressBarLogger", "stream", stream)
        check_bool("ProgressBarLogger", "log_traces", log_traces)
        # 0: refresh the values at every batch.
        check_seconds("ProgressBarLogger", "postfix_interval", postfix_interval, allow_zero=True)
        keys = _DEFAULT_KEYS if postfix_keys is None else postfix_keys
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise TypeError(
                f"ProgressBarLogger postfix_keys must be a list of metric keys or prefixes "
                f"ending in '/', got {postfix_keys!r}; e.g. ['loss/train/total', 'metrics/']."
            )
        for key in keys:
            if not isinstance(key, str):
                raise TypeError(
                    f"ProgressBarLogger postfix_keys entries must be str, got {key!r}; e.g. "
                    "'loss/train/total' or 'metrics/'."
                )
            if not key.strip("/"):
                raise ValueError(
                    f"ProgressBarLogger postfix_keys entry {key!r} is not supported: use a "
                    "metric key such as 'loss/train/total' or a prefix such as 'metrics/'."
                )
        check_optional_bool("ProgressBarLogger", "live", live)
        self.stream = stream
        self.log_traces_enabled = log_traces
        self.postfix_interval = float(postfix_interval)
        self.postfix_keys: tuple[str, ...] = tuple(keys)
        self.live = live
        self._on = True
        self._train: Bar | None = None
        self._train_due = False
        self._eval: Bar | None = None
        self._eval_n = 0
        self._per_epoch: int | None = None  # batches per epoch when epochs are shown as batches
        self._rank: dict[str, int] = {}  # key -> index of the postfix_keys entry it matches, or -1
        self._seen: list[str] = []
        self._labels: dict[str, str] = {}  # shown key -> name in the postfix, in display order
        self._values: dict[str, Any] = {}
        self._dirty = False
        self._units = PluginUnits()

    # ------------------------------------------------------------- helpers
    def _is_on(self, state: State) -> bool:
        flag = os.environ.get("TQDM_DISABLE", "").strip().lower()
        return state.local_rank == 0 and flag in ("", "0", "false", "no", "off")

    def _open(self, nested: bool, leave: bool, steps: int, **kwargs: Any) -> Bar:
        stream = getattr(sys, self.stream) if isinstance(self.stream, str) else self.stream
        live = self.live if self.live is not None else isatty(stream)
        if live:
            return LiveBar(
                stream, self.postfix_interval, position=1 if nested else 0, leave=leave, **kwargs
            )
        return PlainBar(stream, steps=steps, **kwargs)

    def _progress(self, state: State) -> float:
        ts, unit = state.timestamp, self._unit(state)
        if self._per_epoch is not None:
            return ts._epoch * self._per_epoch + ts._batch_in_epoch
        if unit is TimeUnit.SECOND:
            return int(ts.total_wct)
        return ts.get(unit).value

    @staticmethod
    def _unit(state: State) -> TimeUnit:
        return TimeUnit.BATCH if state.max_duration is None else state.max_duration.unit

    @staticmethod
    def _description(state: State) -> str:
        epoch, max_duration = state.timestamp._epoch + 1, state.max_duration
        if max_duration is not None and max_duration.unit is TimeUnit.EPOCH:
            return f"train epoch {epoch}/{max_duration.value}"
        return f"train epoch {epoch}"

    def _open_train(self, state: State) -> None:
        self._train_due = False
        unit, total = self._unit(state), None
        length = state.dataloader_len
        self._per_epoch = None
        if unit is TimeUnit.EPOCH and length is not None and length.value > 0:
            self._per_epoch = int(length.value)
        if state.max_duration is not None:
            total = state.max_duration.value * (self._per_epoch or 1)
        label, scale = _UNITS[TimeUnit.BATCH if self._per_epoch else unit]
        self._train = self._open(
            nested=False,
            leave=True,
            steps=_LINE_STEPS,
            desc=self._description(state),
            total=total,
            initial=self._progress(state),
            unit=label,
            unit_scale=scale,
        )

    def _ensure_train(self, state: State) -> Bar | None:
        if self._train is None and self._train_due:
            self._open_train(state)
        return self._train

    def _advance(self, state: State, force: bool = False) -> None:
        bar = self._ensure_train(state)
        if bar is None:
            return
        n = self._progress(state)
        if self._dirty and (force or bar.postfix_due(n)):
            bar.set_postfix(self._postfix_text(state))
        bar.update_to(n)

    def _postfix_text(self, state: State) -> str:
        numbers = to_host({k: self._values[k] for k in self._labels if k in self._values})
        self._values.update(numbers)  # numbers now: converting them again costs nothing
        self._dirty = False
        units = self._units
        units.refresh(state.callbacks)
        return ", ".join(
            f"{self._labels[k]}={with_unit(format_value(v), units.of(k))}"
            for k, v in numbers.items()
        )

    def _match(self, key: str) -> int:
        for i, pattern in enumerate(self.postfix_keys):
            if key == pattern or (pattern.endswith("/") and key.startswith(pattern)):
                return i
        return -1

    def _add_key(self, key: str) -> None:
        self._seen.append(key)
        shown = sorted(self._seen, key=self._rank.__getitem__)[:_MAX_SHOWN]  # stable: first seen
        counts = Counter(_short_key(k) for k in shown)
        self._labels = {k: _short_key(k) if counts[_short_key(k)] == 1 else k for k in shown}
        self._values = {k: v for k, v in self._values.items() if k in self._labels}

    def _close_bars(self) -> None:
        bars, self._eval, self._train = (self._eval, self._train), None, None
        self._train_due = False
        for bar in bars:
            if bar is not None:
                bar.close()

    # --------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        self._on = self._is_on(state)

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if not self._on:
            return
        for key, value in metrics.items():
            rank = self._rank.get(key)
            if rank is None:
                rank = self._rank[key] = self._match(key)
                if rank >= 0:
                    self._add_key(key)
            if rank >= 0 and key in self._labels:
                self._values[key] = value
                self._dirty = True

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if not (self.log_traces_enabled and self._on):
            return
        import tqdm as tqdm_module

        stream = getattr(sys, self.stream) if isinstance(self.stream, str) else self.stream
        for key, value in traces.items():
            tqdm_module.tqdm.write(f"[trace]: {key}: {value}", file=stream)
        stream.flush()

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._close_bars()
        self._on = self._is_on(state)
        self._train_due = self._on
        deferred = self._unit(state) is TimeUnit.EPOCH and state.dataloader_len is None
        if self._on and not deferred:  # epochs wait for epoch_start, which knows their length
            self._open_train(state)

    @override
    def epoch_start(self, state: State, logger: Logger) -> None:
        bar = self._ensure_train(state)
        if bar is not None:
            bar.set_description(self._description(state))

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        self._advance(state)

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        self._advance(state)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._advance(state, force=True)
        self._close_bars()

    @override
    def eval_start(self, state: State, logger: Logger) -> None:
        if self._eval is not None:
            self._eval.close()
        self._eval, self._eval_n = None, 0
        self._on = self._is_on(state)
        if not self._on:
            return
        label = state.dataloader_label or "eval"
        length = state.dataloader_len
        self._eval = self._open(
            nested=self._train is not None,
            leave=self._train is None,  # inside fit the eval bar vanishes; standalone it stays
            steps=0,
            desc="eval" if label == "eval" else f"eval {label}",
            total=None if length is None else length.value,
            initial=0,
            unit="ba",
            unit_scale=False,
        )

    @override
    def eval_batch_end(self, state: State, logger: Logger) -> None:
        if self._eval is not None:
            self._eval_n += 1
            self._eval.update_to(self._eval_n)

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        bar, self._eval = self._eval, None
        if bar is not None:
            bar.close()

    @override
    def exception(self, state: State, logger: Logger) -> None:
        self._close_bars()  # no conversion here: the device may be what failed

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._close_bars()
