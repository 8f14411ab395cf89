"""The report's plots: one Bokeh figure per plot of :func:`plan_plots`, on one step axis.

Every figure has the same left and right borders and its legend below the
plot area (as many rows as it needs, the figure grows to hold them), so step
0, and every other step, is drawn at one x in every plot, and no legend leaves
its card. The tooltip shows the point's logged step and value, with the unit
the run declared, never the mouse position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from obsbus.masking import mask_secrets
from obsbus.report._downsample import DEFAULT_BUCKETS, minmax_band, minmax_downsample
from obsbus.report._groups import Plot, is_eval, plan_plots
from obsbus.report._read import RunData

__all__ = ["build_plots", "marked"]

#: One line per rank up to this many ranks; beyond, a min/max band over the ranks and rank 0.
MAX_RANK_LINES = 4
#: A line of at most this many points (after downsampling) also gets a marker at each point:
#: a single point (an eval logged once) draws no line at all. Eval series always get them.
MAX_MARKED_POINTS = 50


def marked(key: str, points: int) -> bool:
    """Whether the line of ``key`` with ``points`` points (downsampled) gets markers."""
    return points <= MAX_MARKED_POINTS or is_eval(key)


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
        # the line is also its twins': the legend names them all
        label = " = ".join(mask_secrets(k) for k in [key, *plot.twins.get(key, [])])
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


#: Pixels left of every plot area (the y-axis, its ticks and unit) and right of it: fixed, so
#: a step is at one x in every plot whatever its tick labels.
_LEFT, _RIGHT = 110, 24
#: Height of the plot area; the legend below adds its rows.
_FRAME_HEIGHT = 230
#: Width the legend's columns share (a card is ~1,200 px wide on a 1,280 px screen; this leaves
#: room for narrower windows), and a label's estimated width (8pt text and its glyph).
_LEGEND_WIDTH, _CHAR_PX, _ITEM_PX = 760, 6.0, 44


def _columns(labels: list[str]) -> int:
    """Legend columns: as many as fit ``_LEGEND_WIDTH`` with the longest label, 1 to 4."""
    widest = max((len(label) for label in labels), default=1) * _CHAR_PX + _ITEM_PX
    return max(1, min(4, len(labels), int(_LEGEND_WIDTH // widest)))


def _tooltips(unit: str | None) -> list[tuple[str, str]]:
    """The logged point's step and value (``@x``, ``@y``: the data, not the mouse's ``$x``)."""
    shown = f" {unit}" if unit and not set(unit) & set("@${}") else ""
    return [("", "$name"), ("step", "@x{0,0.[00]}"), ("value", "@y{%.6g}" + shown)]


def build_plots(data: RunData, buckets: int = DEFAULT_BUCKETS) -> list[Plot]:
    """Bokeh figures for ``data``, sharing one x (step) range."""
    from bokeh.models import (  # type: ignore[attr-defined]
        BasicTickFormatter,
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
            name=plot.id,  # to find a plot in the page's document
            frame_height=_FRAME_HEIGHT,
            sizing_mode="stretch_width",
            min_border_left=_LEFT,
            min_border_right=_RIGHT,
            x_axis_label="step",
            y_axis_label=plot.unit,
            tools="pan,xwheel_zoom,box_zoom,reset,save",
            active_scroll="xwheel_zoom",
            **extra,
        )
        # Scientific beyond 1e4 and below 1e-3: tick labels stay short enough for _LEFT.
        fig.yaxis.formatter = BasicTickFormatter(power_limit_high=4, power_limit_low=-3)
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
        legend = Legend(
            items=items,
            click_policy="hide",
            label_text_font_size="8pt",
            ncols=_columns([label for label, _ in items]),
        )
        fig.add_layout(legend, "below")
        fig.add_tools(
            HoverTool(
                renderers=hovered,
                tooltips=_tooltips(plot.unit),
                formatters={"@y": "printf"},
            )
        )
        plot.figure = fig
    return plots
