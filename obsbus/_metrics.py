"""Train and eval metrics for :class:`~obsbus.Run` and :class:`~obsbus.Trainer`.

A metric is anything with ``update``, ``compute`` and ``reset`` (torchmetrics'
``Metric`` first of all, a first-class case: it is moved to the run's device).
Given as ``{name: metric}``, one metric or a list of them (a metric then goes by
its class name, as in Composer).

What ``update`` receives: ``metric.update(outputs, targets)``, Composer's
default (``ComposerClassifier.update_metric``): the model's outputs (their
``logits`` when they carry some, Hugging Face style) and the batch's targets
(``batch[1]`` of an ``(inputs, targets)`` batch, ``batch["labels"]`` or
``batch["targets"]`` of a dict batch). A model with Composer's
``update_metric(batch, outputs, metric)`` method decides for itself.

Nothing here converts a value to a number: ``update`` and ``compute`` run on
the device and ``compute`` returns a tensor, which the logger holds unsynced.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from obsbus._check import short

__all__ = ["MetricSet", "Metrics", "check_metrics", "default_targets", "metric_outputs"]

#: What ``train_metrics=`` and ``eval_metrics=`` take: a metric, a list of them, ``{name: metric}``.
Metrics = Any

_METHODS = ("update", "compute", "reset")
_ACCEPTED = (
    "a metric (anything with update(), compute() and reset(), such as a torchmetrics "
    "Metric), a list of them, a dict {name: metric} or None"
)


def _is_metric(value: object) -> bool:
    return not isinstance(value, type) and all(callable(getattr(value, m, None)) for m in _METHODS)


def check_metrics(owner: str, name: str, value: object) -> dict[str, Any]:
    """``value`` as ``{name: metric}``; a bare metric or a list go by class name.

    Example:
        >>> class Mean:
        ...     def update(self, outputs, targets): ...
        ...     def compute(self): ...
        ...     def reset(self): ...
        >>> list(check_metrics("Trainer", "train_metrics", [Mean()]))
        ['Mean']
        >>> check_metrics("Trainer", "train_metrics", 5)
        Traceback (most recent call last):
        ...
        TypeError: Trainer train_metrics must be a metric (anything with update(), ...got 5.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, metric in value.items():
            if not isinstance(key, str) or not key:
                raise TypeError(
                    f"{owner} {name} must be {_ACCEPTED}; the name {key!r} is not a non-empty str."
                )
            if not _is_metric(metric):
                raise TypeError(f"{owner} {name} must be {_ACCEPTED}; {key!r} holds {metric!r}.")
            out[key] = metric
        return out
    items = [value] if _is_metric(value) else value
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"{owner} {name} must be {_ACCEPTED}, got {value!r}.")
    out = {}
    for metric in items:
        if not _is_metric(metric):
            raise TypeError(
                f"{owner} {name} must be {_ACCEPTED}, got {metric!r} among {short(list(items))}."
            )
        key = type(metric).__name__
        if key in out:
            raise ValueError(
                f"{owner} {name}: two metrics are named {key!r} (a metric in a list goes by its "
                f"class name). To fix, pass a dict: {{'{key}_a': ..., '{key}_b': ...}}."
            )
        out[key] = metric
    return out


def metric_outputs(outputs: Any) -> Any:
    """What a metric is updated with: the ``logits`` of outputs that carry them, else outputs."""
    if isinstance(outputs, Mapping) and "logits" in outputs:
        return outputs["logits"]
    logits = getattr(outputs, "logits", None)
    return outputs if logits is None else logits


def default_targets(batch: Any) -> Any:
    """The targets of a batch: ``batch[1]``, ``batch["labels"]`` or ``batch["targets"]``."""
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        return batch[1]
    if isinstance(batch, Mapping):
        for key in ("labels", "targets", "label", "target"):
            if key in batch:
                return batch[key]
    raise TypeError(
        f"Cannot find the targets of a batch of type {type(batch).__name__} to update the "
        "metrics with: they are batch[1] of an (inputs, targets) batch or batch['labels']. "
        "To fix, call run.update_metrics(outputs, targets) yourself, or give the model "
        "Composer's update_metric(batch, outputs, metric) method."
    )


class MetricSet:
    """One dataloader's metrics: updated each batch, computed when due, reset after."""

    __slots__ = ("_stale", "_updates", "metrics")

    def __init__(self, metrics: dict[str, Any]) -> None:
        self.metrics = metrics
        self._updates = 0  # since the last compute
        self._stale = False  # computed: reset before the next update

    def __bool__(self) -> bool:
        return bool(self.metrics)

    def __iter__(self) -> Iterator[str]:
        return iter(self.metrics)

    def copy(self) -> MetricSet:
        """Fresh copies (one set per eval dataloader, as Composer deep-copies them)."""
        return MetricSet({k: copy.deepcopy(m) for k, m in self.metrics.items()})

    def to(self, device: Any) -> None:
        """Move the metrics that can move (torchmetrics' are modules) to ``device``."""
        for key, metric in self.metrics.items():
            move = getattr(metric, "to", None)
            if callable(move):
                moved = move(device)
                if moved is not None and _is_metric(moved):
                    self.metrics[key] = moved

    def reset(self) -> None:
        for metric in self.metrics.values():
            metric.reset()
        self._updates, self._stale = 0, False

    def update(self, outputs: Any, targets: Any) -> None:
        if self._stale:
            self.reset()
        outputs = _detach(outputs)
        for metric in self.metrics.values():
            metric.update(outputs, targets)
        self._updates += 1

    def update_with(self, model: Any, batch: Any, outputs: Any) -> None:
        """Composer's ``model.update_metric(batch, outputs, metric)`` when the model has it."""
        hook = getattr(model, "update_metric", None)
        if not callable(hook):
            self.update(metric_outputs(outputs), default_targets(batch))
            return
        if self._stale:
            self.reset()
        for metric in self.metrics.values():
            hook(batch, outputs, metric)
        self._updates += 1

    def compute(self, prefix: str) -> dict[str, Any]:
        """``{prefix + name: value}`` of every metric updated since the last reset (tensors)."""
        if not self._updates:
            return {}
        self._updates, self._stale = 0, True
        return {f"{prefix}{key}": metric.compute() for key, metric in self.metrics.items()}


def _detach(value: Any) -> Any:
    detach = getattr(value, "detach", None)
    return detach() if callable(detach) else value
