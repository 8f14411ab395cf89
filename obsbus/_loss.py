"""How :class:`~obsbus.Run` records a loss: detached, combined over microbatches, logged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["combine_losses", "detached", "loss_metrics"]


def detached(loss: Any) -> Any:
    """``loss`` without its autograd graph: a tensor, or a dict/list/tuple of them."""
    detach = getattr(loss, "detach", None)
    if callable(detach):
        return detach()
    if isinstance(loss, Mapping):
        return {key: detached(value) for key, value in loss.items()}
    if isinstance(loss, (list, tuple)):
        return [detached(value) for value in loss]
    return loss


def loss_metrics(loss: Any) -> dict[str, Any]:
    """What ``Run`` logs for a batch loss (as Composer): ``loss/train/total``, and for a
    dict (list) loss ``loss/train/{key}`` (``{index}``) too, the total being its ``"total"``
    entry or else the sum of the parts."""
    if not isinstance(loss, (list, tuple)) and hasattr(loss, "dim"):
        return {"loss/train/total": loss}  # a tensor, every step: no Mapping ABC check
    if isinstance(loss, Mapping):
        metrics = {f"loss/train/{key}": value for key, value in loss.items()}
        if "total" not in loss:
            metrics["loss/train/total"] = _sum(list(loss.values()))
        return metrics
    if isinstance(loss, (list, tuple)):
        metrics = {f"loss/train/{i}": value for i, value in enumerate(loss)}
        metrics["loss/train/total"] = _sum(list(loss))
        return metrics
    return {"loss/train/total": loss}


def _sum(values: list[Any]) -> Any:
    total = values[0] if values else 0.0
    for value in values[1:]:
        total = total + value
    return total


def combine_losses(parts: list[tuple[Any, float | None]]) -> Any:
    """The batch loss from its microbatch losses: their mean, or their weighted sum.

    A dict (list) loss is combined key by key (element by element); every
    microbatch must then have the same keys (length).
    """
    if len(parts) == 1 and parts[0][1] is None:
        return parts[0][0]
    first = parts[0][0]
    if isinstance(first, Mapping):
        for loss, _ in parts[1:]:
            if not isinstance(loss, Mapping) or set(loss) != set(first):
                got = sorted(loss) if isinstance(loss, Mapping) else repr(loss)
                raise ValueError(
                    "Run.loss: the microbatch losses of one batch must have the same keys; "
                    f"got {sorted(first)} and {got}."
                )
        return {key: combine_losses([(loss[key], w) for loss, w in parts]) for key in first}
    if isinstance(first, (list, tuple)):
        for loss, _ in parts[1:]:
            if not isinstance(loss, (list, tuple)) or len(loss) != len(first):
                raise ValueError(
                    "Run.loss: the microbatch losses of one batch must have the same length; "
                    f"got {len(first)} parts and {loss!r}."
                )
        return [combine_losses([(loss[i], w) for loss, w in parts]) for i in range(len(first))]
    if any(w is not None for _, w in parts):
        total = None
        for loss, w in parts:
            term = loss * (1.0 if w is None else w)
            total = term if total is None else total + term
        return total
    total = parts[0][0]
    for loss, _ in parts[1:]:
        total = total + loss
    return total / len(parts)
