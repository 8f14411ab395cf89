"""Time per event and per callback from the profiler's Chrome traces in the run folder."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsbus.masking import mask_secrets

__all__ = ["SpanStats", "TraceSummary", "read_traces", "trace_files", "trace_folders"]

#: Bigger traces are left out (listed as skipped): a report is not a trace viewer.
_MAX_TRACE_BYTES = 200 * 1024 * 1024


@dataclass
class SpanStats:
    name: str
    count: int = 0
    total_us: float = 0.0

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


@dataclass
class TraceSummary:
    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    spans: dict[str, SpanStats] = field(default_factory=dict)

    def group(self, prefix: str) -> list[SpanStats]:
        """Spans named ``prefix...``, the longest total first."""
        found = [s for name, s in self.spans.items() if name.startswith(prefix)]
        return sorted(found, key=lambda s: (-s.total_us, s.name))


def _load(path: Path) -> list[Any]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    try:
        value = json.loads(text)
    except ValueError:
        # a trace cut short: a bare array whose closing ']' is missing
        value = json.loads(text.rstrip().rstrip(",") + "]")
    events = value.get("traceEvents", []) if isinstance(value, dict) else value
    return events if isinstance(events, list) else []


def _add(summary: TraceSummary, events: list[Any]) -> None:
    open_spans: dict[tuple[Any, Any], list[tuple[str, float]]] = {}
    spans = summary.spans
    for event in events:
        if not isinstance(event, dict):
            continue
        phase, ts = event.get("ph"), event.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        name = event.get("name")
        if phase == "X" and isinstance(name, str):
            duration = event.get("dur")
            if isinstance(duration, (int, float)):
                stats = spans.setdefault(name, SpanStats(name))
                stats.count += 1
                stats.total_us += float(duration)
        elif phase == "B" and isinstance(name, str):
            open_spans.setdefault((event.get("pid"), event.get("tid")), []).append((name, ts))
        elif phase == "E":
            stack = open_spans.get((event.get("pid"), event.get("tid")))
            if not stack:
                continue
            # An 'E' may omit its name; with one, close the innermost span of that name.
            at = len(stack) - 1
            if isinstance(name, str):
                while at >= 0 and stack[at][0] != name:
                    at -= 1
                if at < 0:
                    continue
            begun, start = stack.pop(at)
            stats = spans.setdefault(begun, SpanStats(begun))
            stats.count += 1
            stats.total_us += float(ts) - float(start)


def trace_folders(root: Path, config: dict[str, Any]) -> set[Path]:
    """``traces/``, the folders the profiler's plug-ins were given (``config/plugins.json``:
    a ``folder`` or ``torch_prof_folder`` argument) and folders holding torch.profiler traces."""
    folders = {root / "traces", *(p.parent for p in root.glob("*/*.pt.trace.json*"))}
    plugins = config.get("plugins.json", {})
    for row in plugins.get("plugins", []) if isinstance(plugins, dict) else []:
        args = row.get("args") if isinstance(row, dict) else None
        for name in ("folder", "torch_prof_folder"):
            value = args.get(name) if isinstance(args, dict) else None
            if isinstance(value, str) and value and "{" not in value:
                folder = (root / value).resolve()
                if folder.is_relative_to(root.resolve()):  # under the run folder only
                    folders.add(folder)
    return folders


def trace_files(root: Path, config: dict[str, Any] | None = None) -> list[Path]:
    """The traces :func:`read_traces` reads (a merged trace only when there is nothing else)."""
    folders = trace_folders(root, config or {})
    found: set[Path] = set()
    for folder in folders:
        if folder.is_dir():
            found.update(p for p in folder.glob("**/*.json") if p.is_file())
            found.update(p for p in folder.glob("**/*.json.gz") if p.is_file())
    # A merged trace holds the per-rank ones again: counted only when it is all there is.
    single = [p for p in found if "merged" not in p.name]
    return sorted(single or found)


def read_traces(root: Path, config: dict[str, Any] | None = None) -> TraceSummary:
    """Sum span durations (``B``/``E`` pairs and ``X`` events) over the run's traces."""
    summary = TraceSummary()
    for path in trace_files(root, config):
        try:
            if path.stat().st_size > _MAX_TRACE_BYTES:
                summary.skipped.append(f"{path.name}: larger than {_MAX_TRACE_BYTES >> 20} MiB")
                continue
            events = _load(path)
        except (OSError, ValueError, EOFError) as exc:
            summary.skipped.append(mask_secrets(f"{path.name}: {exc}"))
            continue
        summary.files.append(path)
        _add(summary, events)
    return summary
