"""What the Lightning bridge reads from its host: the import, and the trainer's settings."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from obsbus.errors import MissingExtraError
from obsbus.time import Time, TimeUnit

__all__ = ["IMPORT_NAMES", "import_lightning", "max_duration_of", "precision_of", "steps_per_epoch"]

#: Lightning's two import names, tried in order: the unified ``lightning``
#: package, then the standalone ``pytorch_lightning``.
IMPORT_NAMES = ("lightning.pytorch", "pytorch_lightning")

_PRECISIONS = {
    "32": "fp32",
    "32-true": "fp32",
    "16-mixed": "amp_fp16",
    "bf16-mixed": "amp_bf16",
}


def import_lightning(
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> ModuleType:
    """``lightning.pytorch``, else ``pytorch_lightning``; neither is a MissingExtraError."""
    for name in IMPORT_NAMES:
        try:
            return import_module(name)
        except ModuleNotFoundError as exc:
            # Only the package itself missing moves on; a broken install raises as it is.
            if exc.name is None or not name.startswith(exc.name):
                raise
    raise MissingExtraError("lightning", "obsbus.integrations.lightning")


def max_duration_of(trainer: Any) -> Time | None:
    """Lightning's stopping point as an obsbus time: ``max_steps`` first, else ``max_epochs``."""
    steps = getattr(trainer, "max_steps", -1)
    if isinstance(steps, int) and steps > 0:
        return Time(steps, TimeUnit.BATCH)
    epochs = getattr(trainer, "max_epochs", None)
    if isinstance(epochs, int) and epochs > 0:
        return Time(epochs, TimeUnit.EPOCH)
    return None


def precision_of(trainer: Any) -> str | None:
    """Lightning's ``trainer.precision`` (``"16-mixed"``...) as obsbus's name, or None."""
    return _PRECISIONS.get(str(getattr(trainer, "precision", "")))


def steps_per_epoch(trainer: Any) -> Time | None:
    """Optimizer steps in one training epoch, when Lightning knows the length."""
    batches = getattr(trainer, "num_training_batches", math.inf)
    if not isinstance(batches, int) or isinstance(batches, bool) or batches <= 0:
        return None  # float("inf") for an iterable dataset
    accum = max(1, int(getattr(trainer, "accumulate_grad_batches", 1)))
    return Time(math.ceil(batches / accum), TimeUnit.BATCH)
