"""Batch helpers shared by Run and Trainer: counting, device moves, microbatches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from obsbus.values import is_tensor


def _first_tensor(batch: Any) -> Any:
    if is_tensor(batch):
        return batch
    if isinstance(batch, Mapping):
        for value in batch.values():
            found = _first_tensor(value)
            if found is not None:
                return found
    elif isinstance(batch, (tuple, list)):
        for value in batch:
            found = _first_tensor(value)
            if found is not None:
                return found
    return None


def default_num_samples(batch: Any) -> int:
    """Samples in ``batch``: the leading dimension of its first tensor (no device sync)."""
    if type(batch) in (tuple, list) and batch:  # the common (inputs, targets) shape, fast
        shape = getattr(batch[0], "shape", None)
        if shape is not None and len(shape) and is_tensor(batch[0]):
            return int(shape[0])
    tensor = _first_tensor(batch)
    if tensor is not None and tensor.dim() > 0:
        return int(tensor.shape[0])
    if isinstance(batch, (tuple, list)) and batch and not isinstance(batch[0], (tuple, list)):
        return len(batch)
    raise TypeError(
        f"Cannot count the samples in a batch of type {type(batch).__name__}. "
        "To fix, pass num_samples_fn=lambda batch: <number of samples>."
    )


def default_num_tokens(batch: Any) -> int:
    """Tokens in ``batch``: ``input_ids.numel()`` for a dict batch that has them, else 0."""
    if type(batch) in (tuple, list):  # the common (inputs, targets): no Mapping ABC check
        return 0
    if isinstance(batch, Mapping):
        ids: Any = batch.get("input_ids")
        if is_tensor(ids):
            return int(ids.numel())
    return 0


def resolve_device(device: Any) -> Any:
    """``device`` as a ``torch.device`` with an index (``cuda`` -> ``cuda:N``), for comparisons."""
    import torch

    dev = torch.device(device)
    index: int | None = dev.index  # None for a bare "cuda"
    if dev.type == "cuda" and index is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def to_device(batch: Any, device: Any) -> Any:
    """Move every tensor in ``batch`` to ``device`` (a resolved ``torch.device``) without blocking.

    Tensors already there are returned as they are: ``Tensor.to`` costs
    microseconds even when it has nothing to move.
    """
    if is_tensor(batch):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        rebuild: Any = type(batch)
        return rebuild({k: to_device(v, device) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def split_batch(batch: Any, parts: int) -> list[Any]:
    """Split ``batch`` into at most ``parts`` microbatches along the first dimension."""
    if parts == 1:
        return [batch]
    if is_tensor(batch):
        return list(batch.chunk(parts))
    if isinstance(batch, Mapping):
        keys = list(batch)
        columns = [split_batch(batch[k], parts) for k in keys]
        count = min(len(c) for c in columns)
        rebuild: Any = type(batch)
        return [
            rebuild({k: c[i] for k, c in zip(keys, columns, strict=True)}) for i in range(count)
        ]
    if isinstance(batch, (tuple, list)):
        columns = [split_batch(v, parts) for v in batch]
        count = min(len(c) for c in columns)
        return [type(batch)(c[i] for c in columns) for i in range(count)]
    raise TypeError(
        f"Cannot split a batch of type {type(batch).__name__} into microbatches. "
        "To fix, use tensors, tuples, lists or dicts of tensors, or grad_accum=1."
    )
