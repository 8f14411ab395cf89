"""Which keys the report draws in which plot: groups of keys, split by unit and magnitude.

A key goes to the first group of :data:`GROUPS` whose test it passes. A group's
keys are then split into plots:

- **by unit**, the one the run declared (``config/units.json``): one y-axis,
  one unit; the title and axis name it, and a key with no declared unit shows
  none (titles never guess one);
- in "Eval metrics" and "Other metrics", **by magnitude**: keys within three
  decades of each other share a plot, so ``hf/total_flos`` (1e9) does not
  flatten a gradient norm of 1; and "Other metrics" also **by prefix** (``hf/``,
  ``custom/``), one plot each;
- **twins**, keys whose series are identical on every rank, are drawn once:
  the line's legend names them all (``time/eval = time/val``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from obsbus._units import unit_of
from obsbus.report._read import RunData
from obsbus.report._twins import find_twins

__all__ = ["GROUPS", "MAX_KEYS", "Group", "Plot", "group_of", "is_eval", "plan_plots"]

#: Lines per plot; the global and total keys first, the rest named as left out.
MAX_KEYS = 16
#: Keys further apart than this many decades get plots of their own (where split by magnitude).
_DECADES = 3


@dataclass(frozen=True)
class Group:
    id: str
    #: The title, without a unit: the unit comes from what the run declared.
    title: str
    test: Callable[[str], bool]
    #: Split by magnitude (and by prefix, for "other"): groups of unrelated keys.
    split: bool = False


_COUNTS = ("memory/num_ooms", "memory/alloc_retries", "memory/rocm/max_rank")
_STEP_TIME = re.compile(r"^throughput/step_time_(max|min)$")


def _loss(key: str) -> bool:
    return key.startswith("loss/") or (key.startswith("metrics/") and "loss" in key)


def _prefix(prefix: str, *parts: str, suffix: str = "") -> Callable[[str], bool]:
    """Keys that start with ``prefix``, hold one of ``parts`` (if any) and end in ``suffix``."""

    def test(key: str) -> bool:
        return (
            key.startswith(prefix)
            and key.endswith(suffix)
            and (not parts or any(p in key for p in parts))
        )

    return test


def _throughput(unit: str) -> Callable[[str], bool]:
    """``throughput/{unit}_per_sec`` and ``throughput/device/{unit}_per_sec``: one unit a plot,
    so 10 batches/s is not flattened against 50,000 tokens/s on a shared y-axis."""
    names = (f"throughput/{unit}_per_sec", f"throughput/device/{unit}_per_sec")
    return lambda key: key in names


def _utilization(key: str) -> bool:
    return _prefix("system/", "percent", "pct")(key) or key.startswith("utilization/")


#: In order: a key goes to the first group whose test it passes.
GROUPS: tuple[Group, ...] = (
    Group("loss", "Loss (train and eval)", _loss),
    Group("metrics", "Eval metrics", _prefix("metrics/"), split=True),
    Group("lr", "Learning rate", _prefix("lr-")),
    Group("mfu", "MFU", _prefix("throughput/", suffix="mfu")),
    Group("throughput_batches", "Throughput, batches", _throughput("batches")),
    Group("throughput_samples", "Throughput, samples", _throughput("samples")),
    Group("throughput_tokens", "Throughput, tokens", _throughput("tokens")),
    Group("throughput_flops", "Throughput, FLOP", _throughput("flops")),
    # Any other rate (a unit SpeedMonitor does not log): a plot of its own, not mixed in.
    Group("throughput", "Throughput, other rates", _prefix("throughput/", suffix="_per_sec")),
    Group("step_time", "Step time", lambda k: bool(_STEP_TIME.match(k))),
    Group("memory_pct", "Memory use", _prefix("memory/", "pct", "percent")),
    Group("memory", "Memory", lambda k: k.startswith("memory/") and k not in _COUNTS),
    Group("norms", "Gradient and parameter norms (L2)", _prefix("l2_norm/")),
    Group("power", "Power", _prefix("system/", "power")),
    Group("temperature", "Temperature", _prefix("system/", "temperature")),
    Group("utilization", "CPU and GPU utilisation", _utilization),
    Group("system_memory", "System memory", _prefix("system/", "_gb")),
    Group("io", "Disk and network", _prefix("system/", "mb_per_s")),
    Group("time", "Time", _prefix("time/")),
    Group("other", "Other metrics", lambda k: not k.startswith("nan/"), split=True),
)
_ORDER = {group.id: index for index, group in enumerate(GROUPS)}


def group_of(key: str) -> Group | None:
    """The group ``key`` is plotted in (``None``: not plotted, as ``nan/*``).

    Example:
        >>> [group_of(k).id for k in ("loss/train/total", "lr-AdamW/group0", "system/gpu/power_w")]
        ['loss', 'lr', 'power']
    """
    return next((g for g in GROUPS if g.test(key)), None)


@dataclass
class Plot:
    group: Group
    keys: list[str]
    left_out: list[str] = field(default_factory=list)
    points: int = 0
    figure: Any = None
    #: The unit of every key drawn (``None``: none declared).
    unit: str | None = None
    #: The plot's name in the page (``data-group``) and of its figure: unique.
    id: str = ""
    #: The title shown, with the unit when one is declared.
    title: str = ""
    #: kept key -> the keys with the identical series, drawn as its line.
    twins: dict[str, list[str]] = field(default_factory=dict)


def is_eval(key: str) -> bool:
    """An evaluation's key (``metrics/{label}/...`` with a label other than ``train``, or
    ``loss/{label}/...`` likewise): logged once per evaluation, a few points.

    Example:
        >>> is_eval("metrics/eval/loss"), is_eval("metrics/train/acc"), is_eval("loss/train/total")
        (True, False, False)
    """
    parts = key.split("/")
    return len(parts) >= 3 and parts[0] in ("metrics", "loss") and parts[1] != "train"


def _rank_of_first(key: str) -> tuple[int, str]:
    # global/total keys first: with many per-layer norms, they are the ones that matter
    return (0 if ("global" in key or "total" in key) else 1, key)


def _magnitude(data: RunData, key: str) -> int:
    """The decade of the key's largest finite absolute value (0 when none is above 0)."""
    top = 0.0
    for rank in data.ranks.values():
        found = rank.series.get(key)
        if found is not None:
            finite = [abs(v) for v in found[1] if math.isfinite(v)]
            top = max(top, max(finite, default=0.0))
    return math.floor(math.log10(top)) if top > 0 else 0


def _by_magnitude(data: RunData, keys: list[str]) -> list[tuple[int | None, list[str]]]:
    """``keys`` in runs within ``_DECADES`` of each other: (top decade, keys) each; the decade
    is ``None`` when all the keys fit one plot."""
    ranked = sorted((_magnitude(data, k), k) for k in keys)
    runs: list[list[tuple[int, str]]] = []
    for decade, key in ranked:
        if runs and decade - runs[-1][0][0] < _DECADES:
            runs[-1].append((decade, key))
        else:
            runs.append([(decade, key)])
    if len(runs) == 1:
        return [(None, keys)]
    return [(run[-1][0], [k for _, k in run]) for run in runs]


def _split(data: RunData, group: Group, keys: list[str], units: dict[str, str]) -> list[Plot]:
    by_unit: dict[str | None, list[str]] = {}
    for key in keys:
        by_unit.setdefault(unit_of(key, units), []).append(key)
    parts: list[tuple[str | None, str, int | None, list[str]]] = []
    for unit in sorted(by_unit, key=lambda u: (u is not None, u or "")):
        found = by_unit[unit]
        prefixes: dict[str, list[str]] = {}
        for key in found:
            prefix = key.split("/", 1)[0] + "/*" if "/" in key and group.id == "other" else ""
            prefixes.setdefault(prefix, []).append(key)
        for prefix in sorted(prefixes):
            keys_here = prefixes[prefix]
            runs = _by_magnitude(data, keys_here) if group.split else [(None, keys_here)]
            parts.extend((unit, prefix, decade, run) for decade, run in runs)
    plots = []
    for index, (unit, prefix, decade, run) in enumerate(parts):
        title = group.title + (f": {prefix}" if prefix else "")
        title += f" ({unit})" if unit else ""
        if decade is not None:  # ~0.01 .. ~100 as numbers, further as powers of ten
            title += f", values ~{10.0**decade:g}" if abs(decade) <= 2 else f", values ~1e{decade}"
        ordered = sorted(run, key=_rank_of_first)
        plot = Plot(group, ordered[:MAX_KEYS], ordered[MAX_KEYS:], unit=unit, title=title)
        plot.id = group.id if len(parts) == 1 else f"{group.id}-{index}"
        plots.append(plot)
    return plots


def plan_plots(data: RunData) -> list[Plot]:
    """Which keys go in which plot: the plots of each group that has data, in ``GROUPS``
    order (see the module)."""
    units = data.units
    groups: dict[str, Group] = {}
    for rank in data.ranks.values():
        for key in rank.series:
            if key not in groups:
                group = group_of(key)
                if group is not None:
                    groups[key] = group

    def preference(key: str) -> tuple[int, bool, str]:
        # the earlier group keeps the line, then the key that is not per device, then A-Z
        return (_ORDER[groups[key].id], "/device/" in key, key)

    twins = find_twins(data, groups, preference, lambda key: unit_of(key, units))
    hidden = {key for found in twins.values() for key in found}
    by_group: dict[str, list[str]] = {}
    for key, group in groups.items():
        if key not in hidden:
            by_group.setdefault(group.id, []).append(key)
    plots = []
    for group in GROUPS:
        found = sorted(by_group.get(group.id, []))
        if found:
            for plot in _split(data, group, found, units):
                plot.twins = {k: twins[k] for k in plot.keys if k in twins}
                plots.append(plot)
    return plots
