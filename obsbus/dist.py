"""Rank and world information, and reductions that are no-ops on one process.

Rank information comes from ``torch.distributed`` once it is initialized and,
before that (or without it), from the launcher's environment variables
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``NODE_RANK`` (``GROUP_RANK`` as torchrun sets it is accepted too). torch is
never imported when this module is: if the program has not imported
``torch.distributed``, it cannot have initialized it. Only the two helpers
that build tensors, :func:`collective_device` and :func:`gather_rows`,
import torch, when they are called.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from obsbus._check import check_choice, type_as_value_error

if TYPE_CHECKING:
    import torch

__all__ = [
    "RankInfo",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "collective_device",
    "gather_rows",
    "get_local_rank",
    "get_local_world_size",
    "get_node_rank",
    "get_rank",
    "get_world_size",
    "is_initialized",
    "rank_info",
]

T = TypeVar("T")
_REDUCE_OPS = ("sum", "mean", "min", "max", "product")


def _torch_dist() -> Any:
    """``torch.distributed`` if it is imported and initialized, else ``None``."""
    module = sys.modules.get("torch.distributed")
    if module is not None and module.is_available() and module.is_initialized():
        return module
    return None


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"Environment variable {name}={raw!r} is not an integer; launchers set it to a "
            f"non-negative integer. To fix, unset it or set it to e.g. 0."
        ) from None
    if value < 0:
        raise ValueError(f"Environment variable {name}={raw!r} must be non-negative.")
    return value


def is_initialized() -> bool:
    """Whether ``torch.distributed`` is initialized in this process."""
    return _torch_dist() is not None


def get_world_size() -> int:
    """The number of processes in the job (1 when not distributed)."""
    dist = _torch_dist()
    return int(dist.get_world_size()) if dist else _env_int("WORLD_SIZE", 1)


def get_rank() -> int:
    """This process's global rank (0 when not distributed)."""
    dist = _torch_dist()
    return int(dist.get_rank()) if dist else _env_int("RANK", 0)


def get_local_world_size() -> int:
    """The number of processes on this node (the world size when no launcher says)."""
    return _env_int("LOCAL_WORLD_SIZE", get_world_size())


def get_local_rank() -> int:
    """This process's rank on its node (the global rank when no launcher says)."""
    return _env_int("LOCAL_RANK", get_rank())


def get_node_rank() -> int:
    """The index of this node."""
    for name in ("NODE_RANK", "GROUP_RANK"):
        if os.environ.get(name, "").strip():
            return _env_int(name, 0)
    return get_rank() // max(get_local_world_size(), 1)


@dataclass(frozen=True, slots=True)
class RankInfo:
    """A snapshot of where this process sits in the job."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0


def rank_info() -> RankInfo:
    """Read the current :class:`RankInfo`.

    Example:
        >>> info = rank_info()
        >>> 0 <= info.rank < info.world_size
        True
    """
    return RankInfo(
        rank=get_rank(),
        local_rank=get_local_rank(),
        world_size=get_world_size(),
        local_world_size=get_local_world_size(),
        node_rank=get_node_rank(),
    )


def all_reduce(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Reduce ``tensor`` in place across ranks and return it; a no-op on one process.

    Args:
        tensor: the values to reduce; on NCCL it must live on this rank's GPU.
        op: one of ``sum``, ``mean``, ``min``, ``max``, ``product``.
    """
    with type_as_value_error():  # a wrong type has always been a ValueError here
        check_choice("all_reduce", "op", op, _REDUCE_OPS)
    if op == "mean" and not (tensor.is_floating_point() or tensor.is_complex()):
        raise TypeError(
            f"all_reduce(op='mean') needs a floating-point tensor, got {tensor.dtype}. "
            "To fix, reduce with op='sum' and divide, or convert with tensor.float()."
        )
    dist = _torch_dist()
    if dist is None or dist.get_world_size() == 1:
        return tensor
    if op == "mean":
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        tensor.div_(dist.get_world_size())
    else:
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op.upper()))
    return tensor


def all_gather_object(obj: T) -> list[T]:
    """Gather a picklable object from every rank; ``[obj]`` on one process."""
    dist = _torch_dist()
    if dist is None or dist.get_world_size() == 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    """Wait for every rank; a no-op on one process."""
    dist = _torch_dist()
    if dist is not None and dist.get_world_size() > 1:
        dist.barrier()


def collective_device() -> torch.device:
    """Where a tensor must live for the process group's collectives.

    This process's GPU (``cuda:<current device>``) when the backend is
    neither gloo nor MPI (NCCL on NVIDIA, RCCL on AMD, which both go through
    ``torch.cuda``) and CUDA is available; else, or when ``torch.distributed``
    is not initialized, the CPU.

    Example:
        >>> collective_device()  # one process
        device(type='cpu')
    """
    import torch

    tdist = _torch_dist()
    if tdist is not None:
        backend = str(tdist.get_backend()).lower()
        if "gloo" not in backend and "mpi" not in backend and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_rows(row: Sequence[float], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Every rank's ``row`` as a ``[world_size, len(row)]`` table in rank order, in one all_reduce.

    Each rank fills its own row of a zero table and the ranks sum the
    tables: every cell holds one rank's value, so the sum is exact, for ints
    too. The table lives on :func:`collective_device`. On a GPU backend it
    goes over with a pinned, non-blocking copy, so building it does not wait
    for the device, and the result stays there (read it where a sync is
    due). On gloo, or on one process (a ``[1, len(row)]`` table, no
    collective), it is a CPU tensor. Every rank must call it, with rows of
    the same length.

    Args:
        row: this rank's values.
        dtype: the table's dtype: float64 by default; ``torch.int64`` for
            counts or batch numbers that must stay exact past 2**53.

    Example:
        >>> gather_rows([1.5, 2.0]).tolist()  # one process
        [[1.5, 2.0]]
    """
    import torch

    tdist = _torch_dist()
    world = int(tdist.get_world_size()) if tdist else 1
    rank = int(tdist.get_rank()) if tdist else 0
    dtype = torch.float64 if dtype is None else dtype
    table = torch.zeros(world, len(row), dtype=dtype)
    table[rank] = torch.tensor(list(row), dtype=dtype)
    device = collective_device()
    if device.type != "cpu":
        table = table.pin_memory().to(device, non_blocking=True)
    return all_reduce(table, op="sum")
