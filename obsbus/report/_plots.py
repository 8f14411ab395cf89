"""The report's plots: one Bokeh figure per group of metric keys, all on one step axis."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from obsbus.masking import mask_secrets
from obsbus.report._downsample import DEFAULT_BUCKETS, minmax_band, minmax_downsample
from obsbus.report._read import RunData

__all__ = ["GROUPS", "Group", "Plot", "build_plots", "group_of", "is_eval", "marked"]

#: One line per rank up to this many ranks; beyond, a min/max band over the ranks and rank 0.
MAX_RANK_LINES = 4
#: Lines per plot; the global and total keys first, the rest named as left out.
MAX_KEYS = 16
#: A line of at most this many points (after downsampling) also gets a marker at each point:
#: a single point (an eval logged once) draws no line at all. Eval series always get them.
MAX_MARKED_POINTS = 50


@dataclass(frozen=True)
class Group:
    id: str
    title: str
    test: Callable[[str], bool]


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
    Group("metrics", "Eval metrics", _prefix("metrics/")),
    Group("lr", "Learning rate", _prefix("lr-")),
    Group("mfu", "MFU", _prefix("throughput/", suffix="mfu")),
    Group("throughput_batches", "Throughput (batches/s)", _throughput("batches")),
    Group("throughput_samples", "Throughput (samples/s)", _throughput("samples")),
    Group("throughput_tokens", "Throughput (tokens/s)", _throughput("tokens")),
    Group("throughput_flops", "Throughput (FLOP/s)", _throughput("flops")),
    # Any other rate (a unit SpeedMonitor does not log): a plot of its own, not mixed in.
    Group(
        "throughput", "Throughput (other, per second)", _prefix("throughput/", suffix="_per_sec")
    ),
    Group("step_time", "Step time (s)", lambda k: bool(_STEP_TIME.match(k))),
    Group("memory_pct", "Memory use (%)", _prefix("memory/", "pct", "percent")),
    Group("memory", "Memory (GB)", lambda k: k.startswith("memory/") and k not in _COUNTS),
    Group("norms", "Gradient and parameter norms (L2)", _prefix("l2_norm/")),
    Group("power", "Power (W)", _prefix("system/", "power")),
    Group("temperature", "Temperature (°C)", _prefix("system/", "temperature")),
    Group("utilization", "CPU and GPU utilisation (%)", _utilization),
    Group("system_memory", "System memory (GB)", _prefix("system/", "_gb")),
    Group("io", "Disk and network (MB/s)", _prefix("system/", "mb_per_s")),
    Group("time", "Time (s)", _prefix("time/")),
    Group("other", "Other metrics", lambda k: not k.startswith("nan/")),
)


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


def is_eval(key: str) -> bool:
    """An evaluation's key (``metrics/{label}/...`` with a label other than ``train``, or
    ``loss/{label}/...`` likewise): logged once per evaluation, a few points.

    Example:
        >>> is_eval("metrics/eval/loss"), is_eval("metrics/train/acc"), is_eval("loss/train/total")
        (True, False, False)
    """
    parts = key.split("/")
    return len(parts) >= 3 and parts[0] in ("metrics", "loss") and parts[1] != "train"


def marked(key: str, points: int) -> bool:
    """Whether the line of ``key`` with ``points`` points (downsampled) gets markers."""
    return points <= MAX_MARKED_POINTS or is_eval(key)


def _rank_of_first(key: str) -> tuple[int, str]:
    # global/total keys first: with many per-layer norms, they are the ones that matter
    return (0 if ("global" in key or "total" in key) else 1, key)


def _arrays(
    steps: list[float], values: list[float]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    x, y = np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if len(x) > 1 and np.any(np.diff(x) < 0):
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
    return x, y


def _finite(y: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    # Bokeh can't draw inf: NaN and inf become gaps (the header names them).
    return np.where(np.isfinite(y), y, np.nan)


def _lines(data: RunData, plot: Plot, buckets: int) -> list[tuple[str, str, Any, Any, Any]]:
    """(key, label, x, y or low, high or None) per line or band."""
    ranks = sorted(data.ranks)
    out: list[tuple[str, str, Any, Any, Any]] = []
    for key in plot.keys:
        label = mask_secrets(key)
        have = [r for r in ranks if key in data.ranks[r].series]
        if len(have) <= MAX_RANK_LINES:
            for rank in have:
                x, y = _arrays(*data.ranks[rank].series[key])
                x, y = minmax_downsample(x, y, buckets)
                name = label if len(ranks) == 1 else f"{label} (rank {rank})"
                out.append((key, name, x, _finite(y), None))
            continue
        x, y = _arrays(
            [s for r in have for s in data.ranks[r].series[key][0]],
            [v for r in have for v in data.ranks[r].series[key][1]],
        )
        steps, starts = np.unique(x, return_index=True)
        with np.errstate(invalid="ignore"):
            low, high = np.fmin.reduceat(y, starts), np.fmax.reduceat(y, starts)
        bx, blow, bhigh = minmax_band(steps, low, high, buckets)
        band = f"{label} (min..max of {len(have)} ranks)"
        out.append((key, band, bx, _finite(blow), _finite(bhigh)))
        x0, y0 = minmax_downsample(*_arrays(*data.ranks[have[0]].series[key]), buckets)
        out.append((key, f"{label} (rank {have[0]})", x0, _finite(y0), None))
    return out


def plan_plots(data: RunData) -> list[Plot]:
    """Which keys go in which plot: one plot per group that has data, in ``GROUPS`` order."""
    keys: set[str] = set()
    for rank in data.ranks.values():
        keys.update(rank.series)
    by_group: dict[str, list[str]] = {}
    for key in keys:
        group = group_of(key)
        if group is not None:
            by_group.setdefault(group.id, []).append(key)
    plots = []
    for group in GROUPS:
        found = sorted(by_group.get(group.id, []), key=_rank_of_first)
        if found:
            plots.append(Plot(group, found[:MAX_KEYS], found[MAX_KEYS:]))
    return plots


def build_plots(data: RunData, buckets: int = DEFAULT_BUCKETS) -> list[Plot]:
    """Bokeh figures for ``data``, sharing one x (step) range."""
    from bokeh.models import (  # type: ignore[attr-defined]
        ColumnDataSource,
        HoverTool,
        Legend,
        Line,
        Scatter,
        VArea,
    )
    from bokeh.palettes import Category10_10, Category20_20
    from bokeh.plotting import figure

    plots = plan_plots(data)
    shared: Any = None
    for plot in plots:
        lines = _lines(data, plot, buckets)
        palette = Category10_10 if len(lines) <= 10 else Category20_20
        extra = {"x_range": shared} if shared is not None else {}
        fig = figure(
            name=plot.group.id,  # to find a plot in the page's document
            height=300,
            sizing_mode="stretch_width",
            x_axis_label="step",
            tools="pan,xwheel_zoom,box_zoom,reset,save",
            active_scroll="xwheel_zoom",
            **extra,
        )
        shared = fig.x_range
        items, hovered = [], []
        for index, (key, label, x, y, high) in enumerate(lines):
            color = palette[index % len(palette)]
            # Renderers made whole, not by figure.line(): figure's glyph methods add a
            # nonselection and a muted copy of every glyph (two models more a line, which
            # the page serializes; BokehJS makes them when needed).
            if high is None:
                # One source for the line and its markers: the points are sent once.
                source = ColumnDataSource(data={"x": x, "y": y})
                line = Line(x="x", y="y", line_color=color, line_width=1.5)
                glyphs: list[Any] = [fig.add_glyph(source, line, name=label)]
                if marked(key, len(x)):
                    dots = Scatter(x="x", y="y", size=5, marker="circle", fill_color=color)
                    dots.line_color = color
                    glyphs.append(fig.add_glyph(source, dots, name=label))
                # One tooltip per point: the markers where there are, else the line.
                hovered.append(glyphs[-1])
            else:
                source = ColumnDataSource(data={"x": x, "y1": y, "y2": high})
                band = VArea(x="x", y1="y1", y2="y2", fill_color=color, fill_alpha=0.25)
                glyphs = [fig.add_glyph(source, band, name=label)]
            items.append((label, glyphs))
            plot.points += len(x)
        fig.add_layout(
            Legend(items=items, click_policy="hide", label_text_font_size="8pt"), "right"
        )
        fig.add_tools(
            HoverTool(
                renderers=hovered, tooltips=[("", "$name"), ("step", "$x{0,0}"), ("value", "$y")]
            )
        )
        plot.figure = fig
    return plots
