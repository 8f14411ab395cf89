"""Merge per-rank Chrome traces into one trace where each rank is its own process row.

Each input is a Chrome trace: an object ``{"traceEvents": [...], ...}`` or a
bare array of events (the closing ``]`` may be missing, as the format allows;
an event cut off at the end of a crashed writer's file is dropped with a
warning). Gzip-compressed inputs (``.json.gz``) are recognised by their magic
bytes. Only the standard library is used, so the ``obsbus merge-traces``
command stays light.

The rank of an input is read from, in this order:

1. a ``{"ph": "M", "name": "obsbus_rank", "args": {"rank": r}}`` event;
2. the top-level ``otherData.rank``;
3. the top-level ``distributedInfo.rank`` (what ``torch.profiler`` writes);
4. a single ``process_name`` metadata event named ``"rank r"``;
5. otherwise the lowest rank no other input claims, in input order (its
   position, when no input claims a rank).

If two inputs claim the same rank, a warning is issued and every input is
numbered by its position instead, unless ``combine_same_rank`` is set: then
they share the rank's process row (several saved windows of one rank, or a
rank's obsbus trace and its ``torch.profiler`` trace).

Times: obsbus traces count ``ts`` in µs since the Unix epoch; ``torch.profiler``
counts from the trace's ``baseTimeNanoseconds``. When the inputs do not share
one base, every input is moved onto the Unix epoch (``ts + base / 1000``), so
they line up; when they do, ``ts`` is kept and the output carries that base.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from itertools import count
from pathlib import Path
from typing import Any, TypeGuard

from obsbus.profiler._trace_io import read_trace, write_trace

__all__ = ["merge_traces"]

TraceInput = str | os.PathLike[str] | Mapping[str, Any] | list[Any]
_Names = dict[tuple[Any, Any, Any], Mapping[str, Any]]

_RANK_NAME = re.compile(r"rank (\d+)", re.IGNORECASE)
# Metadata about the original processes and threads; folded into the new thread names.
_FOLDED_META = frozenset(
    {
        "process_name",
        "process_labels",
        "process_sort_index",
        "process_uptime_seconds",
        "thread_name",
        "thread_sort_index",
        "obsbus_rank",
    }
)
# Flow (s t f) and async (b e n S T F p) events pair up by id across the whole trace,
# so equal ids from two ranks would be joined; each rank's ids get their own range.
_ID_PHASES = frozenset("stfbenSTFp")
_ID_SPAN = 1 << 32


def merge_traces(
    inputs: Sequence[TraceInput],
    output: str | os.PathLike[str] | None = None,
    *,
    combine_same_rank: bool = False,
) -> dict[str, Any]:
    """Merge Chrome traces, one per rank, into one trace with a process row per rank.

    Every event of a rank's input gets ``pid`` = that rank. The input's own
    (pid, tid) pairs become thread rows of that process, named after the
    original pid/tid (and their ``process_name``/``thread_name``), so nothing
    is hidden. Each rank's ``ts`` values are moved onto rank 0's clock by the
    ``offset_us`` of its ``obsbus_clock`` metadata event; a rank without one
    is left as recorded and listed in ``otherData.unaligned_ranks``.

    Args:
        inputs: trace file paths (``.json`` or ``.json.gz``), or traces already
            loaded (an object with ``traceEvents`` or a list of events). The
            rank of each is found as the module docstring describes.
        output: where to write the merged trace (atomically; gzip-compressed if
            the name ends in ``.gz``). ``None`` writes nothing.
        combine_same_rank: inputs that claim the same rank share its process
            row (and its clock offset), instead of being numbered by position.

    Returns:
        The merged trace: ``{"traceEvents": [...], "displayTimeUnit": "ms",
        "otherData": {...}}``, where ``otherData`` has ``clock_offsets_us``
        (``{"rank": offset}``, the offsets applied), ``unaligned_ranks`` and
        ``ranks``: per rank, its ``inputs`` (source, how the rank was found,
        event count, time shift and the input's top-level fields).

    Raises:
        ValueError: no inputs, an input that is not a Chrome trace (the message
            names the file), or a bad rank or clock offset.
        TypeError: an input that is neither a path nor a trace.
        OSError: a file can not be read or the output can not be written.

    Example:
        >>> step = {"ph": "X", "name": "step", "pid": 9, "tid": 1, "ts": 10, "dur": 5}
        >>> rank0 = {"traceEvents": [step], "distributedInfo": {"rank": 0}}
        >>> rank1 = [{"ph": "M", "name": "obsbus_clock", "args": {"offset_us": 2.5}}, step]
        >>> merged = merge_traces([rank0, rank1])
        >>> [(e["pid"], e["ts"]) for e in merged["traceEvents"] if e["ph"] == "X"]
        [(0, 10), (1, 12.5)]
        >>> merged["otherData"]["clock_offsets_us"], merged["otherData"]["unaligned_ranks"]
        ({'0': 0.0, '1': 2.5}, [0])
    """
    if isinstance(inputs, str | os.PathLike | Mapping) or not isinstance(inputs, Sequence):
        raise TypeError(f"merge_traces takes a list of traces or paths, got {inputs!r}.")
    if not inputs:
        raise ValueError("merge_traces needs at least one input trace, got an empty list.")
    loaded = [_Input(item, i) for i, item in enumerate(inputs)]
    _assign_ranks(loaded, combine_same_rank)
    bases = {src.base_ns for src in loaded}
    rebase = len(bases) > 1
    events: list[dict[str, Any]] = []
    per_rank: dict[str, Any] = {}
    offsets: dict[str, float] = {}
    for rank in sorted({src.rank for src in loaded}):
        group = [src for src in loaded if src.rank == rank]
        aligned = [src.offset for src in group if src.offset is not None]
        offsets[str(rank)] = aligned[0] if aligned else 0.0
        events.append(_meta("process_name", rank, None, name=f"rank {rank}"))
        events.append(_meta("process_sort_index", rank, None, sort_index=rank))
        events.extend(_remap(group, rank, offsets[str(rank)], rebase))
        per_rank[str(rank)] = {"clock_aligned": bool(aligned), "inputs": [s.summary for s in group]}
    trace: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if not rebase and bases != {0}:
        trace["baseTimeNanoseconds"] = bases.pop()
    trace["otherData"] = {
        "merged_by": "obsbus merge-traces",
        "clock_offsets_us": offsets,
        "unaligned_ranks": [int(r) for r, v in per_rank.items() if not v["clock_aligned"]],
        "ranks": per_rank,
    }
    if output is not None:
        write_trace(trace, Path(output))
    return trace


class _Input:
    """One input trace: its events, its top-level fields and the metadata merging needs."""

    def __init__(self, item: TraceInput, index: int) -> None:
        if isinstance(item, str | os.PathLike):
            self.label = os.fspath(item)
            doc = read_trace(Path(item).read_bytes(), self.label)
        elif isinstance(item, Mapping | list):
            self.label, doc = f"<input {index}>", item
        else:
            raise TypeError(
                f"A trace input must be a path, a trace object or a list of events, got {item!r}."
            )
        if isinstance(doc, list):
            self.events, self.top = doc, {}
        elif isinstance(doc, Mapping) and isinstance(doc.get("traceEvents"), list):
            self.events = doc["traceEvents"]
            self.top = {k: v for k, v in doc.items() if k != "traceEvents"}
        else:
            raise ValueError(
                f"{self.label} is not a Chrome trace: expected an object with a "
                f"'traceEvents' list or an array of events, got {_short(doc)}."
            )
        for i, event in enumerate(self.events):
            if not isinstance(event, Mapping):
                raise ValueError(f"{self.label}: event {i} is {_short(event)}, not an object.")
        meta = [e for e in self.events if e.get("ph") == "M"]
        self.claim, self.rank_from = self._claim(meta)
        self.rank = -1  # set by _assign_ranks
        self.offset = self._offset(meta)
        base = self.top.get("baseTimeNanoseconds", 0)
        self.base_ns = base if type(base) is int else 0
        self.names: _Names = {}
        for e in reversed(meta):  # the first of repeated metadata wins
            # Process metadata is keyed by pid alone: torch writes it with "tid": 0.
            tid = None if str(e.get("name")).startswith("process_") else _key(e.get("tid"))
            self.names[(e.get("name"), _key(e.get("pid")), tid)] = _args(e)
        self.summary: dict[str, Any] = {"source": self.label}

    def row(self, event: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        """The original thread of ``event``: (process name, pid, tid)."""
        pid = _key(event.get("pid"))
        return self._name("process_name", pid, None), pid, _key(event.get("tid"))

    def sort_index(self, kind: str, pid: Any, tid: Any) -> tuple[bool, float]:
        value = self.names.get((f"{kind}_sort_index", pid, tid), {}).get("sort_index")
        return (False, float(value)) if isinstance(value, int | float) else (True, 0.0)

    def thread_name(self, pid: Any, tid: Any) -> str:
        process, thread = self._name("process_name", pid, None), self._name("thread_name", pid, tid)
        p = f"pid {_label(pid)}" + (f" ({process})" if process not in ("", str(pid)) else "")
        t = f"tid {_label(tid)}" + (f" ({thread})" if thread not in ("", str(tid)) else "")
        return f"{p} / {t}"

    def _name(self, kind: str, pid: Any, tid: Any) -> str:
        return str(self.names.get((kind, pid, tid), {}).get("name", ""))

    def _claim(self, meta: list[Mapping[str, Any]]) -> tuple[int | None, str]:
        marker = next((e for e in meta if e.get("name") == "obsbus_rank"), None)
        if marker is not None:
            return _as_rank(_args(marker).get("rank"), self.label, "obsbus_rank"), "obsbus_rank"
        for key in ("otherData", "distributedInfo"):
            section = self.top.get(key)
            if isinstance(section, Mapping) and section.get("rank") is not None:
                return _as_rank(section["rank"], self.label, f"{key}.rank"), f"{key}.rank"
        named = {
            int(m.group(1))
            for e in meta
            if e.get("name") == "process_name"
            if (m := _RANK_NAME.fullmatch(str(_args(e).get("name", ""))))
        }
        return (named.pop(), "process_name") if len(named) == 1 else (None, "position")

    def _offset(self, meta: list[Mapping[str, Any]]) -> float | None:
        clock = next((e for e in meta if e.get("name") == "obsbus_clock"), None)
        if clock is None:
            return None
        value = _args(clock).get("offset_us")
        if not _is_number(value) or not math.isfinite(value):
            raise ValueError(
                f"{self.label}: obsbus_clock offset_us is {value!r}; "
                "expected a finite number of microseconds."
            )
        return float(value)


def _remap(
    group: list[_Input], rank: int, rank_offset: float, rebase: bool
) -> Iterator[dict[str, Any]]:
    """Yield thread metadata, then the events of ``group`` (one rank's inputs) moved to ``rank``."""
    # An original thread is (process name, pid, tid): one rank's windows share their rows,
    # while another source's process that happens to reuse a pid gets its own.
    rows: dict[tuple[Any, Any, Any], tuple[int, _Input]] = {}
    processes = set()
    for src in group:
        for e in src.events:
            if "tid" in e and not (e.get("ph") == "M" and e.get("name") in _FOLDED_META):
                rows.setdefault(src.row(e), (len(rows), src))
            if e.get("ph") != "M":
                processes.add(src.row(e)[:2])
    first = {row[:2]: i for row, (i, _) in reversed(rows.items())}

    def order(row: tuple[Any, Any, Any]) -> tuple[tuple[bool, float], int, tuple[bool, float], int]:
        # Rows with a sort_index come first, by it; the others in the order they appear.
        i, src = rows[row]
        return (src.sort_index("process", row[1], None), first[row[:2]],
                src.sort_index("thread", *row[1:]), i)  # fmt: skip

    # A thread keeps its tid unless a thread ordered before it has it already.
    original = {str(row[2]) for row in rows}
    fresh = (t for t in count(1) if str(t) not in original)
    tids: dict[tuple[Any, Any, Any], Any] = {}
    for sort_index, row in enumerate(sorted(rows, key=order)):
        keep = isinstance(row[2], int | str) and str(row[2]) not in map(str, tids.values())
        tids[row] = row[2] if keep else next(fresh)
        yield _meta("thread_name", rank, tids[row], name=rows[row][1].thread_name(*row[1:]))
        yield _meta("thread_sort_index", rank, tids[row], sort_index=sort_index)
    for src in group:
        offset = rank_offset if src.offset is None else src.offset
        shift = offset + (src.base_ns / 1000 if rebase else 0.0)
        src.summary.update(rank_from=src.rank_from, events=len(src.events), clock_offset_us=offset)
        src.summary.update(shift_us=shift, metadata=src.top)
        for e in src.events:
            ph, name = e.get("ph"), e.get("name")
            if ph == "M" and name in _FOLDED_META:
                continue
            new = dict(e)
            new["pid"] = rank
            if "tid" in e:
                new["tid"] = tids[src.row(e)]
            if ph == "M" and name == "obsbus_clock":  # applied here; a re-merge must not redo it
                new["args"] = {**_args(e), "offset_us": 0.0, "applied_offset_us": offset}
            elif shift and _is_number(e.get("ts")):
                new["ts"] = e["ts"] + shift
            if ph in _ID_PHASES and "id" in e:
                new["id"] = _scoped_id(e["id"], rank)
            if "bind_id" in e:
                new["bind_id"] = _scoped_id(e["bind_id"], rank)
            if ph == "C" and len(processes) > 1:  # counters are per process
                new["name"] = f"{name} (pid {e.get('pid')})"
            yield new
        src.events = []  # the merged copy is what is kept


def _assign_ranks(inputs: list[_Input], combine_same_rank: bool) -> None:
    claims = Counter(i.claim for i in inputs if i.claim is not None)
    duplicated = sorted(r for r, n in claims.items() if n > 1)
    if duplicated and not combine_same_rank:
        who = ", ".join(f"{i.label} ({i.rank_from})" for i in inputs if i.claim in duplicated)
        warnings.warn(
            f"Several inputs claim rank {', '.join(map(str, duplicated))}: {who}. "
            "Numbering every input by its position (0, 1, ...) instead. To fix, if they "
            "are one rank's traces, pass combine_same_rank=True (--combine-same-rank).",
            UserWarning,
            stacklevel=3,
        )
        for position, src in enumerate(inputs):
            src.rank, src.rank_from = position, "position (duplicate rank)"
        return
    free = (r for r in count() if r not in claims)
    for src in inputs:
        src.rank = src.claim if src.claim is not None else next(free)


def _meta(kind: str, pid: int, tid: Any, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
    return event


def _scoped_id(value: Any, rank: int) -> Any:
    """Give each rank its own id range so equal ids on two ranks never pair up."""
    if rank == 0:
        return value
    if isinstance(value, str):  # Chrome writes ids as hex strings ("0x1f")
        try:
            value = int(value, 16)
        except ValueError:
            return value
    if type(value) is int and 0 <= value < _ID_SPAN:
        return rank * _ID_SPAN + value
    return value


def _as_rank(value: Any, label: str, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if type(value) is int and value >= 0:
        return value
    raise ValueError(f"{label}: {where} is {value!r}; a rank must be a non-negative integer.")


def _args(event: Mapping[str, Any]) -> Mapping[str, Any]:
    args = event.get("args")
    return args if isinstance(args, Mapping) else {}


def _key(value: Any) -> Any:
    return value if value is None or isinstance(value, int | float | str) else json.dumps(value)


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _label(value: Any) -> str:
    return value if isinstance(value, str) and value else repr(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
