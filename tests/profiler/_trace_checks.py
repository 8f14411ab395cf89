"""Invariants every Chrome trace obsbus writes keeps, as one reusable checker.

Usage::

    from tests.profiler._trace_checks import check_trace

    events = check_trace(path)                 # a file, a loaded trace, or a list of events
    events = check_trace(merged, phases=JSON_PHASES | {"X"})   # also allow torch's X events

:func:`check_trace` fails with an ``AssertionError`` naming the event when:

- the file is not JSON, or not ``{"traceEvents": [...]}`` / a list of events;
- an event's ``ph`` is not one of ``phases`` (by default what
  :class:`~obsbus.profiler.JSONTraceHandler` documents: ``B E i C M``);
- an event lacks a ``name``, a non-metadata event lacks a numeric ``ts``, an
  int ``pid`` or an int ``tid``;
- a ``B`` has no ``E`` of the same name on the same (pid, tid), or an ``E``
  has no earlier ``B`` (pairs are matched in file order, last opened first,
  per name, so windows of a merged trace may come in any order), or an ``E``
  is earlier than its ``B``;
- a ``C`` counter's ``args`` are not all finite numbers;
- a pid with events has no ``process_name`` metadata.

It returns the events, so a test can go on to check its own things.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["JSON_PHASES", "check_trace", "counters", "load_events", "span_range"]

#: The ``ph`` values JSONTraceHandler documents: spans, instants, counters, metadata.
JSON_PHASES = frozenset({"B", "E", "i", "C", "M"})


def load_events(trace: str | os.PathLike[str] | Mapping[str, Any] | list[Any]) -> list[dict]:
    """The events of a trace file (must parse as JSON), a loaded trace or a list of events."""
    if isinstance(trace, str | os.PathLike):
        text = Path(trace).read_text(encoding="utf-8")
        try:
            trace = json.loads(text)
        except json.JSONDecodeError as err:
            raise AssertionError(f"{trace}: not valid JSON ({err})") from None
    if isinstance(trace, Mapping):
        events = trace.get("traceEvents")
        assert isinstance(events, list), f"no traceEvents list in {sorted(trace)}"
        return events
    assert isinstance(trace, list), f"not a Chrome trace: {type(trace).__name__}"
    return trace


def check_trace(
    trace: str | os.PathLike[str] | Mapping[str, Any] | list[Any],
    *,
    phases: Iterable[str] = JSON_PHASES,
) -> list[dict]:
    """Assert the invariants in the module docstring; return the events."""
    events = load_events(trace)
    allowed = frozenset(phases)
    open_spans: dict[tuple[Any, Any, str], list[dict]] = defaultdict(list)
    named: set[Any] = set()
    with_events: set[Any] = set()
    for i, e in enumerate(events):
        assert isinstance(e, Mapping), f"event {i} is not an object: {e!r}"
        ph = e.get("ph")
        assert ph in allowed, f"event {i} has ph {ph!r}, not one of {sorted(allowed)}: {e}"
        assert isinstance(e.get("name"), str), f"event {i} has no name: {e}"
        if ph == "M":
            if e["name"] == "process_name":
                named.add(e.get("pid"))
            continue
        assert _number(e.get("ts")), f"event {i} has no numeric ts: {e}"
        assert type(e.get("pid")) is int, f"event {i} has no int pid: {e}"
        assert type(e.get("tid")) is int, f"event {i} has no int tid: {e}"
        with_events.add(e["pid"])
        key = (e["pid"], e["tid"], e["name"])
        if ph == "B":
            open_spans[key].append(e)
        elif ph == "E":
            assert open_spans[key], f"event {i}: an E with no open B on pid/tid {key[:2]}: {e}"
            begin = open_spans[key].pop()
            assert e["ts"] >= begin["ts"], f"event {i}: E before its B ({begin['ts']}): {e}"
        elif ph == "C":
            args = e.get("args")
            assert isinstance(args, Mapping) and args, f"event {i}: a counter with no args: {e}"
            assert all(_number(v) and math.isfinite(v) for v in args.values()), (
                f"event {i}: counter values must be finite numbers: {e}"
            )
    unmatched = {key: len(spans) for key, spans in open_spans.items() if spans}
    assert not unmatched, f"B events with no E (pid, tid, name): {unmatched}"
    missing = with_events - named
    assert not missing, f"pids with events but no process_name metadata: {sorted(missing)}"
    return events


def span_range(events: list[dict], pid: int | None = None) -> tuple[float, float]:
    """(first, last) ``ts`` of the spans and instants (of ``pid``): the recorded window."""
    stamps = [
        e["ts"]
        for e in events
        if e.get("ph") in ("B", "E", "i", "I", "X") and (pid is None or e.get("pid") == pid)
    ]
    assert stamps, f"no spans or instants{'' if pid is None else f' on pid {pid}'}"
    return min(stamps), max(stamps)


def counters(events: list[dict], prefix: str = "") -> list[dict]:
    """The ``C`` events whose name starts with ``prefix``."""
    return [e for e in events if e.get("ph") == "C" and str(e.get("name")).startswith(prefix)]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
