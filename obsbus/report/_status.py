"""How the run ended, and the header's facts: duration, steps, final and best metrics, failures."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field

from obsbus._check import is_int
from obsbus._units import unit_of
from obsbus.report._best import best_direction
from obsbus.report._read import RankData, RunData

__all__ = ["MetricRow", "Summary", "rank_status", "started", "summarize"]

#: Worst first: the run's status is the worst of its ranks'.
_SEVERITY = ("failed", "killed", "unknown", "finished")
_KILLS = ("TrainingTerminated", "KeyboardInterrupt", "SystemExit")


def _is_kill(exception: str) -> bool:
    return exception.lstrip().startswith(_KILLS)


def rank_status(rank: RankData) -> tuple[str, str]:
    """``(status, why)`` of one rank, by the rule in :mod:`obsbus.report`'s docstring."""
    status = rank.status
    if status:
        said, exception = status.get("status"), str(status.get("exception") or "")
        if said == "running":
            return "killed", (
                "RunReport recorded the start and no end: the process was killed (or is still "
                "running)"
            )
        if said == "closed":
            return "finished", "closed without fit_end (the loop stopped early)"
        if said in ("finished", "failed", "killed"):
            return str(said), exception
    if rank.exceptions:
        exception = rank.exceptions[-1]
        return ("killed" if _is_kill(exception) else "failed"), exception
    if rank.torn:
        return "killed", "the last line of the metrics was cut short mid-write"
    return "unknown", (
        "no status record: add RunReport() to the run's loggers to record how it ends "
        "(no exception was logged)"
    )


@dataclass(frozen=True)
class MetricRow:
    """A row of the header's table: a key's last value and, where the key says which way is
    better (:func:`~obsbus.report._best.best_direction`), its best value and step."""

    key: str
    final: float
    #: ``None``: the direction is unknown (no best shown), or no value is finite.
    best: float | None
    best_step: float | None
    #: The unit the run declared for the key, else ``None`` (none shown).
    unit: str | None


@dataclass
class Summary:
    status: str
    #: rank -> (status, why)
    ranks: dict[int, tuple[str, str]]
    duration_s: float | None
    #: When the run started, epoch seconds (see :func:`started`).
    started: float | None
    steps: float | None
    samples: int | None
    tokens: int | None
    #: The loss and eval metrics (of the lowest rank that has them).
    metrics: list[MetricRow] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _timestamp(data: RunData, name: str) -> int | None:
    values = [
        r.status["timestamp"].get(name)
        for r in data.ranks.values()
        if r.status and isinstance(r.status.get("timestamp"), dict)
    ]
    numbers = [v for v in values if is_int(v)]
    return max(numbers) if numbers else None


def started(data: RunData) -> float | None:
    """When the run started (epoch seconds): the earliest ``started`` of the status files,
    else ``config/run.json``'s (ISO 8601, written at ``init``), else ``None``."""
    found = [
        float(r.status["started"])
        for r in data.ranks.values()
        if r.status and isinstance(r.status.get("started"), (int, float))
    ]
    if found:
        return min(found)
    run = data.config.get("run.json")
    value = run.get("started") if isinstance(run, dict) else None
    if not isinstance(value, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def _duration(data: RunData) -> float | None:
    start = started(data)
    starts: list[float] = [] if start is None else [start]
    ends: list[float] = []
    for r in data.ranks.values():
        status = r.status or {}
        if isinstance(status.get("ended"), (int, float)):
            ends.append(float(status["ended"]))
        if r.first_wall is not None:
            starts.append(r.first_wall)
        if r.last_wall is not None:
            ends.append(r.last_wall)
    return max(ends) - min(starts) if starts and ends else None


def _is_summary_key(key: str) -> bool:
    return key.startswith(("loss/", "metrics/"))


def _best(key: str, steps: list[float], values: list[float]) -> tuple[float | None, float | None]:
    direction = best_direction(key)
    finite = [(v, s) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
    if direction is None or not finite:
        return None, None
    pick = max if direction == "max" else min
    value, step = pick(finite, key=lambda pair: pair[0])  # the first step of a tie
    return value, step


def _metrics(data: RunData) -> list[MetricRow]:
    units = data.units
    out: dict[str, MetricRow] = {}
    for rank in sorted(data.ranks):
        for key, (steps, values) in data.ranks[rank].series.items():
            if key in out or not _is_summary_key(key) or not values:
                continue
            best, at = _best(key, steps, values)
            out[key] = MetricRow(key, values[-1], best, at, unit_of(key, units))
    return [out[k] for k in sorted(out)]


def _failures(data: RunData, ranks: dict[int, tuple[str, str]]) -> list[str]:
    found: list[str] = []
    for number in sorted(data.ranks):
        rank = data.ranks[number]
        status, why = ranks[number]
        if status in ("failed", "killed") and why:
            found.append(f"rank {number} {status}: {why}")
        for line in (rank.status or {}).get("failures") or []:
            found.append(f"rank {number}: {line}")
        for key, (steps, values) in rank.series.items():
            if key.startswith("nan/"):
                found.append(f"rank {number}: NaNMonitor: {key} = {values[-1]:g}")
            elif _is_summary_key(key) or key.startswith("l2_norm/"):
                bad = next(
                    (s for s, v in zip(steps, values, strict=True) if not math.isfinite(v)), None
                )
                if bad is not None:
                    found.append(
                        f"rank {number}: {key} is not finite (NaN or inf) from step {bad:g}"
                    )
        if rank.torn:
            found.append(f"rank {number}: the last line of {rank.source.name} was cut short")
        if rank.bad_lines:
            found.append(
                f"rank {number}: {rank.bad_lines} line(s) of {rank.source.name} are not JSON"
            )
    found.extend(f"{where}: {line}" for where, line in data.log_lines)
    found.extend(f"unreadable: {line}" for line in data.unreadable)
    return found


def summarize(data: RunData) -> Summary:
    """The header's facts for ``data``."""
    ranks = {number: rank_status(rank) for number, rank in sorted(data.ranks.items())}
    worst = min((s for s, _ in ranks.values()), key=_SEVERITY.index, default="unknown")
    steps = [r.last_step for r in data.ranks.values() if r.last_step is not None]
    batch = _timestamp(data, "batch")
    return Summary(
        status=worst,
        ranks=ranks,
        duration_s=_duration(data),
        started=started(data),
        steps=float(batch) if batch is not None else (max(steps) if steps else None),
        samples=_timestamp(data, "sample"),
        tokens=_timestamp(data, "token"),
        metrics=_metrics(data),
        failures=_failures(data, ranks),
    )
