"""Keep everything logged in memory, for tests, notebooks and agents."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from typing_extensions import override

from obsbus.logger import Logger, LoggerDestination
from obsbus.state import State
from obsbus.time import Timestamp
from obsbus.values import to_host

__all__ = ["InMemoryLogger"]


class InMemoryLogger(LoggerDestination):
    """Records metrics as time series, hyperparameters, traces and tables.

    Values are stored as logged (tensors stay tensors, so recording costs no
    device sync); :meth:`get_timeseries` turns a series into numbers with one
    transfer.

    Attributes:
        data: ``{key: [(timestamp, value), ...]}`` in logging order.
        steps: ``{key: [step, ...]}``, parallel to ``data``.
        most_recent_values: ``{key: value}``, the last value of each key.
        most_recent_timestamps: ``{key: timestamp}``.
        hyperparameters: everything passed to ``log_hyperparameters``, merged.
        traces: ``{key: value}``, the last value of each trace.
        tables: ``{name: {"columns": [...], "rows": [[...], ...], "step": int}}``.
        images: ``[(name, step, images), ...]``.

    Example:
        >>> mem = InMemoryLogger()
        >>> mem.log_metrics({"loss": 2.0}, step=1); mem.log_metrics({"loss": 1.0}, step=2)
        >>> mem.get_timeseries("loss")["loss"]
        [2.0, 1.0]
    """

    def __init__(self) -> None:
        self.state: State | None = None
        self.data: dict[str, list[tuple[Timestamp, Any]]] = {}
        self.steps: dict[str, list[int | None]] = {}
        self.most_recent_values: dict[str, Any] = {}
        self.most_recent_timestamps: dict[str, Timestamp] = {}
        self.hyperparameters: dict[str, Any] = {}
        self.traces: dict[str, Any] = {}
        self.tables: dict[str, dict[str, Any]] = {}
        self.images: list[tuple[str, int | None, Any]] = []
        # Any thread may log: a key's values and steps are appended together, under it.
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]  # a lock does not pickle or deep-copy
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @override
    def init(self, state: State, logger: Logger) -> None:
        self.state = state

    def _timestamp(self) -> Timestamp:
        return self.state.timestamp if self.state is not None else Timestamp()

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        # Run logs the loss here every step: appends only (no new list per key per call).
        timestamp = self.state.timestamp if self.state is not None else Timestamp()
        data, steps, recent = self.data, self.steps, self.most_recent_timestamps
        with self._lock:
            for key, value in metrics.items():
                series = data.get(key)
                if series is None:
                    series = data[key] = []
                series.append((timestamp, value))
                at = steps.get(key)
                if at is None:
                    at = steps[key] = []
                at.append(step)
                recent[key] = timestamp
            self.most_recent_values.update(metrics)

    @override
    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        self.hyperparameters.update(hyperparameters)

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        self.traces.update(traces)

    @override
    def log_table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        name: str = "Table",
        step: int | None = None,
    ) -> None:
        self.tables[name] = {
            "columns": list(columns),
            "rows": [list(r) for r in rows],
            "step": step,
        }

    @override
    def log_images(
        self, images: Any, name: str = "Images", step: int | None = None, **kwargs: Any
    ) -> None:
        self.images.append((name, step, images))

    def get_timeseries(self, key: str) -> dict[str, list[Any]]:
        """The series of ``key`` as lists: the values, their ``step`` and the time counters.

        Returns:
            ``{key: [...], "step": [...], "epoch": [...], "batch": [...],
            "sample": [...], "token": [...], "batch_in_epoch": [...]}``.

        Raises:
            KeyError: ``key`` was never logged; the message lists the keys that were.
        """
        if key not in self.data:
            raise KeyError(f"No metric {key!r} was logged; logged keys: {sorted(self.data)}.")
        series = self.data[key]
        numbers = to_host({str(i): value for i, (_, value) in enumerate(series)})
        out: dict[str, list[Any]] = {key: list(numbers.values()), "step": list(self.steps[key])}
        for counter in ("epoch", "batch", "sample", "token", "batch_in_epoch"):
            out[counter] = [getattr(ts, counter).value for ts, _ in series]
        return out
