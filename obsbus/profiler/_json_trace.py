"""Helpers of :class:`~obsbus.profiler.JSONTraceHandler`: trace documents and files. Not API."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from obsbus import dist
from obsbus.loggers._remote_folder import check_remote_name, join
from obsbus.naming import check_placeholders

#: Composer's remote names (``remote_folder`` replaces their folder part).
REMOTE_FILE_NAME = "{run_name}/traces/ep{epoch}-ba{batch}-rank{rank}.json"
MERGED_REMOTE_FILE_NAME = "{run_name}/traces/merged_trace.json"


def check_name(value: object, what: str, *, optional: bool) -> str | None:
    """A file-name template (a remote one may be a bucket URI), or ``None`` where allowed."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        accepted = "a non-empty str" + (" or None" if optional else "")
        raise TypeError(f"JSONTraceHandler {what} must be {accepted}, got {value!r}.")
    check_remote_name(value, f"JSONTraceHandler {what}")
    return check_placeholders(value, f"JSONTraceHandler {what}")


def remote_names(
    remote_folder: str | None,
    remote_file_name: str | None,
    merged_trace_remote_file_name: str | None,
    filename: str,
    merged_trace_filename: str | None,
) -> tuple[str | None, str | None]:
    """The remote names of a window's trace and of the merged trace (templates)."""
    if remote_folder is None:
        return remote_file_name, merged_trace_remote_file_name
    changed = [
        f"{name}={value!r}"
        for name, value, default in (
            ("remote_file_name", remote_file_name, REMOTE_FILE_NAME),
            (
                "merged_trace_remote_file_name",
                merged_trace_remote_file_name,
                MERGED_REMOTE_FILE_NAME,
            ),
        )
        if value != default
    ]
    if changed:
        raise ValueError(
            f"JSONTraceHandler(remote_folder={remote_folder!r}, {', '.join(changed)}): give "
            "one of them. remote_folder names the folder every trace goes to (under its own "
            "file name); remote_file_name and merged_trace_remote_file_name (Composer's) name "
            "each file. To fix, drop remote_folder or those names."
        )
    merged = None if merged_trace_filename is None else join(remote_folder, merged_trace_filename)
    return join(remote_folder, filename), merged


def end_open_spans(
    events: list[dict[str, Any]],
    open_spans: dict[str, int],
    carried: dict[str, int],
    ts_us: float,
    rank: int,
) -> list[dict[str, Any]]:
    """``E`` events, at ``ts_us``, for the spans still open when a window is saved.

    Innermost first: viewers pair an ``E`` with the latest ``B`` on its thread,
    and a span's open ``B`` is the latest ``B`` of its name. Each one ended is
    counted in ``carried``, so its real end, in a later window, is dropped.
    """
    left, ends = {name: count for name, count in open_spans.items() if count}, []
    for event in reversed(events):
        name = event["name"]
        if event["ph"] == "B" and left.get(name, 0) > 0:
            left[name] -= 1
            carried[name] = carried.get(name, 0) + 1
            ends.append({"name": name, "ph": "E", "ts": ts_us, "pid": rank, "tid": 0})
    return ends


def metadata(rank: int, offset_us: float, wall_ns: int) -> list[dict[str, Any]]:
    """The ``M`` events naming this rank's process and thread, and its clock offset."""

    def meta(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "ph": "M", "pid": rank, "tid": 0, "args": args}

    return [
        meta("process_name", {"name": f"rank {rank}"}),
        meta("process_sort_index", {"sort_index": rank}),
        meta("thread_name", {"name": "training loop"}),
        meta("obsbus_clock", {"offset_us": offset_us, "wall_clock_start_us": wall_ns / 1000.0}),
    ]


def clock_offset_us() -> float:
    """This rank's clock offset to rank 0's, in µs (0 on one process)."""
    if dist.get_world_size() == 1 or not dist.is_initialized():
        return 0.0
    dist.barrier()
    stamps = dist.all_gather_object(time.time_ns())
    return (stamps[0] - stamps[dist.get_rank()]) / 1000.0


def merge(
    folder: Path, target: Path, expected: list[Path], others: list[Path], log: logging.Logger
) -> bool:
    """Merge every trace in ``folder`` and the ``others`` still there into ``target``.

    Returns whether there was anything to merge. ``expected`` are every rank's
    traces (known at ``fit_end``): the ones not in ``folder`` are reported.
    """
    from obsbus.profiler.merge import merge_traces

    inputs = sorted(p for p in folder.glob("*.json") if p != target)
    missing = [p for p in expected if not p.is_file()]
    if missing:
        log.warning(
            "JSONTraceHandler: %d trace(s) of other ranks are not in %s (is the folder on "
            "storage every node shares?); the merged trace leaves them out. Merge by hand "
            "with 'obsbus merge-traces'. First: %s",
            len(missing),
            folder,
            missing[0],
        )
    inputs += [p for p in others if p.is_file() and p not in inputs]
    if not inputs:
        return False
    merge_traces(inputs, target, combine_same_rank=True)
    return True


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` atomically (a reader never sees half a trace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc))  # json.dump's pure-Python path is ~5x slower
    os.replace(tmp, path)


def remove(paths: Iterable[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
