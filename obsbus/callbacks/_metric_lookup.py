"""Where the stoppers (EarlyStopper, ThresholdStopper) read their metric, and how they compare.

**Lookup.** A stopper watches ``(dataloader_label, name)``:

- an eval label (anything but ``"train"``): ``state.eval_metrics[label][name]``,
  which :class:`~obsbus.Run` fills at ``eval_end`` (``"loss"``, logged as
  ``metrics/{label}/loss``) and any loop may fill with more metrics;
- ``"train"`` with ``"loss"``: ``state.loss``, the loss of the batch just
  trained (logged as ``loss/train/total``);
- ``"train"`` with any other name: ``state.train_metrics[name]`` (the
  ``train_metrics=`` of :class:`~obsbus.Run`/:class:`~obsbus.Trainer`, read
  with ``compute()`` as Composer's stoppers do), else
  ``state.eval_metrics["train"][name]``, where a loop may put its own.

``monitor`` may also be a logged key: ``"loss/train/total"`` means
``("train", "loss")`` and ``"metrics/{label}/{name}"`` means ``(label, name)``.

**Values** may be numbers, tensors (0-d or one element) or objects with a
``compute()`` method (torchmetrics). Reading one turns it into a Python
float: one host transfer, which for a device tensor is a sync by nature (a
stop is a decision the host takes), so the stoppers read only where Composer
does.

**Comparison.** ``comp(value, reference)`` is true when ``value`` is better.
Names containing loss, error, perplexity or ppl are better when lower
(``less``); every other name when higher (``greater``).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from obsbus._check import is_number
from obsbus.values import is_tensor, to_number

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = [
    "Comparison",
    "MetricRef",
    "lower_is_better",
    "read_metric",
    "resolve_comp",
    "unevaluated_label",
]

LOWER_IS_BETTER = ("loss", "error", "perplexity", "ppl")

_OPS: dict[str, tuple[Callable[[float, float], bool], bool]] = {
    # name -> (operator on floats, lower is better)
    "less": (operator.lt, True),
    "lt": (operator.lt, True),
    "less_equal": (operator.le, True),
    "le": (operator.le, True),
    "greater": (operator.gt, False),
    "gt": (operator.gt, False),
    "greater_equal": (operator.ge, False),
    "ge": (operator.ge, False),
}
_ACCEPTED = (
    "None (inferred from the name), one of the strings "
    + ", ".join(repr(name) for name in _OPS)
    + ", or the function of the same name from torch or operator (torch.less, operator.gt, ...)"
)


def lower_is_better(name: str) -> bool:
    """Whether a metric called ``name`` improves by going down.

    Example:
        >>> lower_is_better("loss"), lower_is_better("val_ppl"), lower_is_better("accuracy")
        (True, True, False)
    """
    lowered = name.lower()
    return any(part in lowered for part in LOWER_IS_BETTER)


@dataclass(frozen=True, slots=True)
class Comparison:
    """``op(value, reference)``: true when ``value`` beats ``reference``."""

    name: str
    op: Callable[[float, float], bool]
    lower_is_better: bool

    def __call__(self, value: float, reference: float) -> bool:
        return bool(self.op(value, reference))


def _named_callables() -> dict[Any, str]:
    known: dict[Any, str] = {
        operator.lt: "lt",
        operator.le: "le",
        operator.gt: "gt",
        operator.ge: "ge",
    }
    torch = sys.modules.get("torch")  # a caller holding torch.less has imported torch
    if torch is not None:
        for name in _OPS:
            fn = getattr(torch, name, None)
            if fn is not None:
                known[fn] = name
    return known


def resolve_comp(comp: Any, monitor: str, owner: str) -> Comparison:
    """The comparison ``comp`` names, or the one inferred from ``monitor``.

    Raises:
        ValueError: ``comp`` is not one of the accepted values (listed).

    Example:
        >>> resolve_comp(None, "loss", "demo").name, resolve_comp("gt", "loss", "demo").name
        ('less', 'gt')
        >>> resolve_comp("max", "acc", "demo")
        Traceback (most recent call last):
        ...
        ValueError: demo comp 'max' is not accepted; accepted: None (inferred from the name), ...
    """
    if comp is None:
        name = "less" if lower_is_better(monitor) else "greater"
    elif isinstance(comp, str):
        name = comp.strip().lower()
        if name not in _OPS:
            raise ValueError(f"{owner} comp {comp!r} is not accepted; accepted: {_ACCEPTED}.")
    else:
        found = _named_callables().get(comp) if callable(comp) else None
        if found is None:
            raise ValueError(
                f"{owner} comp {comp!r} is not accepted; accepted: {_ACCEPTED}. A custom "
                "function is refused because min_delta needs to know which way is better."
            )
        name = found
    op, lower = _OPS[name]
    return Comparison(name, op, lower)


@dataclass(frozen=True, slots=True)
class MetricRef:
    """A monitored metric: the dataloader label and the metric's name."""

    label: str
    name: str

    @classmethod
    def parse(
        cls, monitor: Any, dataloader_label: Any, owner: str, default_label: str | None
    ) -> MetricRef:
        """Resolve ``monitor`` (a name or a logged key) and ``dataloader_label``.

        A logged key names its label; ``dataloader_label`` must then be that
        label or ``default_label`` (the owner's default, which the key overrides).

        Example:
            >>> MetricRef.parse("loss/train/total", "eval", "demo", "eval")
            MetricRef(label='train', name='loss')
            >>> MetricRef.parse("metrics/val/top1/acc", "eval", "demo", "eval")
            MetricRef(label='val', name='top1/acc')
            >>> MetricRef.parse("accuracy", "val", "demo", "eval")
            MetricRef(label='val', name='accuracy')
        """
        for what, value in (("monitor", monitor), ("dataloader_label", dataloader_label)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"{owner} {what} must be a non-empty str such as 'loss' or 'eval', "
                    f"got {value!r}."
                )
        label, name = dataloader_label, monitor
        keyed: str | None = None
        if monitor == "loss/train/total":
            keyed, name = "train", "loss"
        elif monitor.startswith("metrics/") and monitor.count("/") >= 2:
            _, keyed, name = monitor.split("/", 2)
        if keyed is not None:
            if dataloader_label not in (default_label, keyed):
                raise ValueError(
                    f"{owner} monitor {monitor!r} is the logged key of label {keyed!r}, but "
                    f"dataloader_label is {dataloader_label!r}. To fix, pass "
                    f"dataloader_label={keyed!r}, or monitor={name!r} with the label you want."
                )
            label = keyed
        return cls(label, name)

    @property
    def is_train(self) -> bool:
        return self.label == "train"

    def __str__(self) -> str:
        return f"{self.name!r} of dataloader_label {self.label!r}"


def _to_float(raw: Any, ref: MetricRef, owner: str) -> float:
    compute = getattr(raw, "compute", None)
    if callable(compute) and not is_tensor(raw):
        raw = compute()
    value = to_number(raw) if is_tensor(raw) else raw
    if not is_number(value):
        raise TypeError(
            f"{owner}: the metric {ref} is {raw!r}, not a number; a stopper needs a number, "
            "a one-element tensor or an object with compute() returning one."
        )
    return float(value)


def read_metric(state: State, ref: MetricRef, owner: str) -> float:
    """The current value of ``ref`` as a float (one host transfer for a tensor).

    Raises:
        ValueError: the label or the metric is not there; the message lists
            what is.
    """
    if ref.is_train and ref.name == "loss":
        if state.loss is None:
            raise ValueError(
                f"{owner}: the metric {ref} reads state.loss, which is None: this loop does "
                "not record a training loss. To fix, compute it with run.loss(...) or set "
                "run.state.loss in the loop."
            )
        return _to_float(state.loss, ref, owner)
    if ref.is_train and ref.name in state.train_metrics:
        return _to_float(state.train_metrics[ref.name], ref, owner)
    metrics = state.eval_metrics.get(ref.label)
    if metrics is None:
        where = (
            f"state.train_metrics (which holds {sorted(state.train_metrics)}) and "
            "state.eval_metrics['train']"
        )
        raise ValueError(
            f"{owner}: no metrics for dataloader_label {ref.label!r}; labels with metrics: "
            f"{sorted(state.eval_metrics)}." + (f" Looked in {where}." if ref.is_train else "")
        )
    if ref.name not in metrics:
        raise ValueError(
            f"{owner}: no metric {ref.name!r} for dataloader_label {ref.label!r}; available: "
            f"{sorted(metrics)}. To fix, pass monitor=<one of those>."
        )
    return _to_float(metrics[ref.name], ref, owner)


def unevaluated_label(state: State, ref: MetricRef, owner: str) -> str | None:
    """A warning when evaluation ran but never on ``ref``'s label (a typo, usually)."""
    if ref.label in state.eval_metrics:
        return None
    return (
        f"{owner}: evaluation ran on {sorted(state.eval_metrics)} but never on "
        f"dataloader_label {ref.label!r}, so this stopper has nothing to check and will not "
        f"stop training. To fix, pass dataloader_label=<one of those>."
    )
