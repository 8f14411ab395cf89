"""What the plots draw: markers where a line has few points, one plot per throughput unit."""

from __future__ import annotations

import json
import re
from html import unescape as html_unescape

import pytest
import torch.nn.functional as F

from obsbus import Trainer
from obsbus.loggers import FileLogger
from obsbus.report import build_report, write_report
from obsbus.report._groups import plan_plots
from obsbus.report._plots import MAX_MARKED_POINTS, build_plots
from obsbus.report._read import read_run

from ..helpers import regression_data, tiny_model


def _glyphs(figure, name: str) -> list[str]:
    """The glyph types (``Line``, ``Scatter``, ...) drawn for the line called ``name``."""
    return [type(r.glyph).__name__ for r in figure.renderers if r.name == name]


def _page_glyphs(html: str) -> list[tuple[str, str]]:
    """(renderer name, glyph type) of every glyph renderer in the page's Bokeh document JSON."""
    raw = re.search(r"const docs_json = '(.*?)';\n", html, re.S)
    assert raw is not None, "no Bokeh document in the page"
    found: list[tuple[str, str]] = []

    def walk(node):
        if isinstance(node, dict):
            attrs = node.get("attributes", {})
            if node.get("name") == "GlyphRenderer" and isinstance(attrs, dict):
                glyph = attrs.get("glyph", {})
                found.append((attrs.get("name"), glyph.get("name")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    # Bokeh writes the JSON HTML-escaped (& < > and ' as entities) inside a JS string.
    walk(json.loads(html_unescape(raw.group(1))))
    return found


@pytest.fixture(scope="module")
def one_eval(tmp_path_factory):
    """A real Trainer run of one epoch of 6 batches, evaluated once: one eval loss point."""
    folder = tmp_path_factory.mktemp("one-eval")
    data = regression_data(6)
    with Trainer(
        tiny_model(),
        data,
        "1ep",
        loss_fn=F.mse_loss,
        eval_dataloader=data[:2],
        device="cpu",
        run_folder=folder,
        loggers=[FileLogger()],
        log_to_console=False,
    ) as trainer:
        trainer.fit()
    return folder


def test_a_single_eval_point_gets_a_marker(one_eval, open_report):
    data = read_run(one_eval)
    assert data.ranks[0].series["metrics/eval/loss"][0] == [6]  # the one point
    plots = {p.group.id: p for p in build_plots(data)}
    loss = plots["loss"].figure
    assert _glyphs(loss, "metrics/eval/loss") == ["Line", "Scatter"]
    marker = next(r.glyph for r in loss.renderers if type(r.glyph).__name__ == "Scatter")
    assert marker.marker == "circle" and marker.size > 0
    # and in the page: the document BokehJS draws holds the marker
    html = build_report(one_eval)
    assert ("metrics/eval/loss", "Scatter") in _page_glyphs(html)
    seen = open_report(write_report(one_eval))
    assert seen.errors == [] and seen.plots["loss"] >= 1


def test_markers_only_on_short_or_eval_lines(tmp_path):
    rows = MAX_MARKED_POINTS + 10
    with open(tmp_path / "metrics-rank0.jsonl", "w") as f:
        for step in range(1, rows + 1):
            f.write(json.dumps({"step": step, "loss/train/total": 1.0 / step}) + "\n")
            f.write(json.dumps({"step": step, "metrics/val/acc": step / rows}) + "\n")
            if step <= 3:
                f.write(json.dumps({"step": step, "lr-SGD/group0": 0.1}) + "\n")
    plots = {p.group.id: p for p in build_plots(read_run(tmp_path))}
    assert _glyphs(plots["loss"].figure, "loss/train/total") == ["Line"]  # 60 points: a line
    assert _glyphs(plots["metrics"].figure, "metrics/val/acc") == ["Line", "Scatter"]  # eval
    assert _glyphs(plots["lr"].figure, "lr-SGD/group0") == ["Line", "Scatter"]  # 3 points
    # the markers share the line's points: they are in the page once
    line, marker = plots["metrics"].figure.renderers
    assert line.data_source is marker.data_source


UNITS = {
    "throughput/batches_per_sec": 10.0,
    "throughput/device/batches_per_sec": 5.0,
    "throughput/samples_per_sec": 320.0,
    "throughput/device/samples_per_sec": 160.0,
    "throughput/tokens_per_sec": 50_000.0,
    "throughput/device/tokens_per_sec": 25_000.0,
    "throughput/flops_per_sec": 4e12,
    "throughput/device/flops_per_sec": 2e12,
}


@pytest.fixture
def speeds(tmp_path):
    """SpeedMonitor's rate keys (as FileLogger writes them), batches/s ~10, tokens/s ~50,000."""
    with open(tmp_path / "metrics-rank0.jsonl", "w") as f:
        for step in range(2, 40):
            row = {"step": step, "epoch": 0, "batch": step, "wall_time": 1e9 + step}
            row.update({k: v * (1 + 0.05 * (step % 3)) for k, v in UNITS.items()})
            row["throughput/device/mfu"] = 0.4
            f.write(json.dumps(row) + "\n")
    return tmp_path


def test_each_throughput_unit_has_its_own_plot(speeds):
    groups = {p.group.id: p.keys for p in plan_plots(read_run(speeds))}
    assert groups == {
        "throughput_batches": ["throughput/batches_per_sec", "throughput/device/batches_per_sec"],
        "throughput_samples": ["throughput/device/samples_per_sec", "throughput/samples_per_sec"],
        "throughput_tokens": ["throughput/device/tokens_per_sec", "throughput/tokens_per_sec"],
        "throughput_flops": ["throughput/device/flops_per_sec", "throughput/flops_per_sec"],
        "mfu": ["throughput/device/mfu"],
    }


def test_batches_per_sec_is_not_flattened_by_tokens_per_sec(speeds, open_report):
    """In the browser, the batches/s plot's y-axis spans batches/s, not 0..50,000."""
    seen = open_report(write_report(speeds))
    assert seen.errors == []
    assert set(seen.plots) == {
        "mfu",
        "throughput_batches",
        "throughput_samples",
        "throughput_tokens",
        "throughput_flops",
    }
    top = seen.y_ends
    assert 10 < top["throughput_batches"] < 20, top
    assert 50_000 < top["throughput_tokens"] < 70_000, top
