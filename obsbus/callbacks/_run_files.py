"""Diagnostic files a monitor writes into the run folder and hands to the destinations. Not API.

:class:`~obsbus.callbacks.HangWatchdog`'s dumps and the memory snapshots of
:class:`~obsbus.callbacks.MemorySnapshot` and
:class:`~obsbus.callbacks.OOMObserver` are written whole or not at all (an
uploader or a person never reads half a file) and uploaded under the run's
name.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = ["atomic_write", "remote_name"]


def atomic_write(path: Path, fill: Callable[[IO[bytes]], Any]) -> None:
    """``fill`` a temporary file next to ``path``, then rename it to ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            fill(f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remote_name(state: State, path: Path) -> str:
    """``{run_name}/`` + the path inside the run folder (or the bare name outside it).

    Example:
        >>> from obsbus import State
        >>> state = State(run_name="r", run_folder="/tmp/runs/r")
        >>> remote_name(state, Path("/tmp/runs/r/hangs/rank0.txt"))
        'r/hangs/rank0.txt'
        >>> remote_name(state, Path("/elsewhere/rank0.txt"))
        'r/rank0.txt'
    """
    try:
        inside = path.relative_to(state.run_folder.root).as_posix()
    except ValueError:
        inside = path.name
    return f"{state.run_name}/{inside}"
