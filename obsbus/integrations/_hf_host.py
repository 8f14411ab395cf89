"""What the Hugging Face bridge reads from its host: optimizer, hyperparameters, evaluation
labels and FLOPs, from HF's objects (no device sync)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["current_flos", "eval_label", "hparams_of", "is_number", "unwrap_optimizer"]


def unwrap_optimizer(optimizer: Any) -> Any:
    """Accelerate's ``AcceleratedOptimizer`` holds the real one, whose class names LRMonitor's
    keys (``lr-AdamW/group0``, as under obsbus's own loops)."""
    inner = getattr(optimizer, "optimizer", None)
    if inner is not None and type(optimizer).__name__ == "AcceleratedOptimizer":
        return inner
    return optimizer


def eval_label(metrics: Mapping[str, Any]) -> tuple[str, str]:
    """The evaluation's label and key prefix: ``eval_{name}_`` for one of several datasets.

    HF evaluates each dataset of an ``eval_dataset`` dict with the prefix ``eval_{name}``
    and always adds ``{prefix}_runtime``.
    """
    for key in metrics:
        if key.startswith("eval_") and key.endswith("_runtime") and key != "eval_runtime":
            name = key[len("eval_") : -len("_runtime")]
            return name, f"eval_{name}_"
    return "eval", "eval_"


def current_flos(trainer: Any) -> float | None:
    value: Any = getattr(trainer, "current_flos", None)
    return float(value) if is_number(value) else None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def hparams_of(args: Any) -> dict[str, Any] | None:
    to_dict = getattr(args, "to_dict", None)
    if not callable(to_dict):
        return None
    return {k: v for k, v in to_dict().items() if isinstance(v, (int, float, str, bool))}
