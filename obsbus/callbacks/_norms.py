"""Fused L2 norms and zero counts of tensor lists, with no host sync (OptimizerMonitor's math)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from obsbus import values

if TYPE_CHECKING:
    import torch

__all__ = ["count_zeros", "fused_l2_norms", "fused_l2_norms_of_groups"]


def _by_device(tensors: list[torch.Tensor]) -> dict[Any, list[int]]:
    """Indices of ``tensors`` grouped by device (and by float64 or not, for the norm's dtype)."""
    import torch

    groups: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype == torch.float64), []).append(i)
    return groups


def _target_device(tensors: list[torch.Tensor]) -> torch.device:
    """Where per-device results meet: the first accelerator, so nothing waits on a copy to host."""
    for t in tensors:
        if not t.is_cpu:
            return t.device
    return tensors[0].device


def _move(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``value`` on ``device`` without blocking the host (pinned memory for host to CUDA)."""
    if value.device == device:
        return value
    if value.device.type == "cpu" and device.type == "cuda":
        value = value.pin_memory()
    return value.to(device, non_blocking=True)


def _combine(totals: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    import torch

    if len(totals) == 1:
        return totals[0]
    total: torch.Tensor = torch.linalg.vector_norm(torch.stack([_move(t, device) for t in totals]))
    return total


def fused_l2_norms(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The L2 norm of ``tensors`` as one vector, and each tensor's own norm.

    One ``torch._foreach_norm`` per device (per device and float64-or-not,
    when both occur), then ``vector_norm`` of the stacked norms: the
    algorithm of ``torch.nn.utils.get_total_norm``. Half-precision norms are
    computed in float32, so a norm above 256 does not overflow float16 when
    squared. Nothing is synced; the results stay on the device.

    Example:
        >>> import torch
        >>> total, each = fused_l2_norms([torch.tensor([3.0, 0.0]), torch.tensor([4.0])])
        >>> total, each
        (tensor(5.), [tensor(3.), tensor(4.)])
    """
    totals, each = fused_l2_norms_of_groups([tensors])
    return totals[0], each


def fused_l2_norms_of_groups(
    groups: list[list[torch.Tensor]],
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """:func:`fused_l2_norms` of several lists at once: one ``_foreach_norm`` for all of them.

    Returns each list's global norm, and every tensor's norm in the order
    given (all lists concatenated). The gradients and the parameters go
    through one fused call this way, instead of one each.

    Example:
        >>> import torch
        >>> totals, _ = fused_l2_norms_of_groups([[torch.tensor([3.0, 4.0])], [torch.ones(4)]])
        >>> totals
        [tensor(5.), tensor(2.)]
    """
    return _l2_norms(groups, read_cpu=False)


def _layout(tensors: list[torch.Tensor]) -> tuple[torch.device, Any] | None:
    """``(device, norm dtype)`` when ``tensors`` share one device and dtype class, else None.

    The norm dtype is float32 for half-precision tensors (a norm above 256
    overflows float16 when squared) and None (their own) otherwise.
    """
    import torch

    by_device = _by_device(tensors)
    if len(by_device) != 1:
        return None
    ((device, wide),) = by_device
    half = (torch.float16, torch.bfloat16)
    return device, torch.float32 if not wide and any(t.dtype in half for t in tensors) else None


def _l2_norms(
    groups: list[list[torch.Tensor]],
    *,
    read_cpu: bool,
    layout: tuple[torch.device, Any] | None = None,
) -> tuple[list[Any], list[Any]]:
    """:func:`fused_l2_norms_of_groups`; with ``read_cpu``, CPU norms come back as floats.

    On the CPU a tensor is on the host already, so reading the per-tensor
    norms is no sync, and combining them in Python (``math.hypot``, in
    float64, which does not overflow where the squares would) costs a few
    µs where ``stack`` and ``vector_norm`` cost tens (every torch call is
    5-10 µs of dispatch there). ``layout``, when
    the caller knows it (:func:`_layout` of the tensors, or of the
    parameters whose gradients they are), saves looking at every tensor.
    """
    import torch

    flat = [t for group in groups for t in group]
    if layout is None:
        layout = _layout(flat)
    if layout is not None and all(groups):  # one device and dtype class: the usual case
        device, dtype = layout
        norms = torch._foreach_norm(flat, 2, dtype=dtype)
        if read_cpu and device.type == "cpu" and values._READ_CPU_NOW:
            numbers = [n.item() for n in norms]
            totals: list[Any] = []
            start = 0
            for group in groups:
                part = numbers[start : start + len(group)]
                start += len(group)
                totals.append(math.hypot(*part))  # exact-ish, and no overflow of the squares
            return totals, numbers
        stacked = torch.stack(norms)
        sizes = [len(group) for group in groups]
        if len(groups) > 1 and len(set(sizes)) == 1:  # e.g. gradients and parameters
            rows = stacked.view(len(groups), sizes[0])
            return list(torch.linalg.vector_norm(rows, dim=1).unbind()), list(norms)
        pieces = torch.split(stacked, sizes) if len(groups) > 1 else (stacked,)
        return [torch.linalg.vector_norm(piece) for piece in pieces], list(norms)
    half = (torch.float16, torch.bfloat16)
    by_device = _by_device(flat)
    owner = [k for k, group in enumerate(groups) for _ in group]
    each: list[Any] = [None] * len(flat)
    parts: list[list[torch.Tensor]] = [[] for _ in groups]
    for (_, wide), indices in by_device.items():
        tensors = [flat[i] for i in indices]
        # float32 norms for half-precision tensors; float64 ones keep float64.
        dtype = torch.float32 if not wide and any(t.dtype in half for t in tensors) else None
        norms = torch._foreach_norm(tensors, 2, dtype=dtype)
        for i, norm in zip(indices, norms, strict=True):
            each[i] = norm
        stacked = torch.stack(list(norms))
        start = 0
        while start < len(indices):  # a group's tensors are contiguous in `indices`
            k = owner[indices[start]]
            stop = start
            while stop < len(indices) and owner[indices[stop]] == k:
                stop += 1
            parts[k].append(torch.linalg.vector_norm(stacked[start:stop]))
            start = stop
    totals = []
    for k, group in enumerate(groups):
        if not parts[k]:
            raise ValueError("fused_l2_norms_of_groups: every list needs at least one tensor.")
        totals.append(_combine(parts[k], _target_device(group)))
    return totals, each


def count_zeros(tensors: list[torch.Tensor]) -> torch.Tensor:
    """How many elements of ``tensors`` are exactly zero, as an int64 tensor (no sync).

    Example:
        >>> import torch
        >>> count_zeros([torch.tensor([0.0, 1.0, 0.0]), torch.zeros(2, 2)])
        tensor(6)
    """
    import torch

    counts = []
    for (_, _), indices in _by_device(tensors).items():
        group = [tensors[i] for i in indices]
        numel = sum(t.numel() for t in group)
        nonzero = torch.stack([torch.count_nonzero(t) for t in group]).sum()
        counts.append(numel - nonzero)
    device = _target_device(tensors)
    return counts[0] if len(counts) == 1 else torch.stack([_move(c, device) for c in counts]).sum()
