"""Run a function on two real ranks: torch.multiprocessing + gloo + a file:// rendezvous.

Usage::

    def _check(rank, scale):          # module-level, so it pickles by reference
        from obsbus import dist
        return dist.get_rank() * scale

    results = run_two_ranks(_check, tmp_path, 10)   # -> [0, 10], in rank order

Each rank runs ``fn(rank, *args)`` after ``torch.distributed`` is initialized
(unless ``init=False``: then ``fn`` calls :func:`init_gloo` itself, e.g. to
observe what things look like before initialization). Its return value is
pickled to ``tmp_path/result-{rank}.pkl`` and the parent reads them back. An
exception in any rank fails :func:`run_two_ranks` with that rank's traceback;
every collective times out after ``timeout`` seconds, so a rank that dies
cannot hang the test run.

Rendezvous is through a file and gloo is pinned to the loopback interface
(``GLOO_SOCKET_IFNAME=lo``); nothing listens on a public interface (torchrun's
TCP store would).
"""

from __future__ import annotations

import datetime
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORLD_SIZE = 2
_LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OBSBUS_RUN_NAME",
)
_RENDEZVOUS_ENV = "OBSBUS_TEST_RENDEZVOUS"
_TIMEOUT_ENV = "OBSBUS_TEST_DIST_TIMEOUT"

__all__ = ["WORLD_SIZE", "init_gloo", "run_two_ranks"]


def init_gloo(rank: int, world_size: int = WORLD_SIZE) -> None:
    """Initialize the gloo process group of this worker (only inside :func:`run_two_ranks`)."""
    import torch.distributed as dist

    rendezvous = os.environ.get(_RENDEZVOUS_ENV)
    if not rendezvous:
        raise RuntimeError("init_gloo() only works inside a worker started by run_two_ranks().")
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=float(os.environ[_TIMEOUT_ENV])),
    )


def _worker(
    rank: int,
    fn: Callable[..., Any],
    out_dir: str,
    args: tuple[Any, ...],
    init: bool,
    timeout: float,
) -> None:
    # Each rank starts from a clean launcher environment: rank information
    # must come from torch.distributed, not from variables a shell leaked.
    for name in _LAUNCHER_VARS:
        os.environ.pop(name, None)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ[_RENDEZVOUS_ENV] = os.path.join(out_dir, "rendezvous")
    os.environ[_TIMEOUT_ENV] = str(timeout)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if init:
        init_gloo(rank)
    try:
        result = fn(rank, *args)
        final = Path(out_dir) / f"result-{rank}.pkl"
        partial = final.with_suffix(".tmp")
        with open(partial, "wb") as f:
            pickle.dump(result, f)
        os.replace(partial, final)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_two_ranks(
    fn: Callable[..., Any],
    tmp_path: str | os.PathLike[str],
    *args: Any,
    init: bool = True,
    timeout: float = 30.0,
) -> list[Any]:
    """Run ``fn(rank, *args)`` on ranks 0 and 1; return their results in rank order.

    ``fn`` and ``args`` must pickle (``fn`` defined at module level).
    """
    if "<" in getattr(fn, "__qualname__", "<"):
        raise TypeError(
            f"run_two_ranks needs a module-level function (it is pickled into the workers), "
            f"got {fn!r}."
        )
    import torch.multiprocessing as mp

    out_dir = Path(tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(WORLD_SIZE):
        (out_dir / f"result-{rank}.pkl").unlink(missing_ok=True)
    (out_dir / "rendezvous").unlink(missing_ok=True)

    mp.spawn(_worker, args=(fn, str(out_dir), args, init, timeout), nprocs=WORLD_SIZE, join=True)

    results = []
    for rank in range(WORLD_SIZE):
        with open(out_dir / f"result-{rank}.pkl", "rb") as f:
            results.append(pickle.load(f))
    return results
