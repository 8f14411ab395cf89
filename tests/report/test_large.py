"""A 1e6-row JSON Lines file: the page stays within a size bound, and the spike is drawn."""

from __future__ import annotations

import numpy as np

from obsbus.report import render
from obsbus.report._plots import build_plots
from obsbus.report._read import read_run

ROWS = 1_000_000
SPIKE_AT = 354_321
#: The bound the module docstring of obsbus.report states: BokehJS (~1.3 MB) plus at most
#: 4,000 points per line, whatever the run's length.
MAX_BYTES = 2_000_000


def _write(path, rows: int) -> None:
    """FileLogger's layout: one row per logged call (the loss, then the learning rate)."""
    steps = rows // 2
    with open(path, "w") as f:
        for start in range(1, steps + 1, 50_000):
            f.write(
                "".join(
                    f'{{"step": {i}, "epoch": 0, "batch": {i}, "loss/train/total": '
                    f"{1000.0 if i == SPIKE_AT else (i % 997) / 997}}}\n"
                    f'{{"step": {i}, "epoch": 0, "batch": {i}, "lr-SGD/group0": {i % 10 / 10}}}\n'
                    for i in range(start, min(start + 50_000, steps + 1))
                )
            )


def test_a_million_rows_render_within_the_size_bound(tmp_path):
    _write(tmp_path / "metrics-rank0.jsonl", ROWS)
    data = read_run(tmp_path)
    assert data.ranks[0].rows == ROWS
    html = render(data)
    assert len(html.encode()) < MAX_BYTES
    plots = {p.group.id: p for p in build_plots(data)}
    assert set(plots) == {"loss", "lr"}
    assert all(p.points <= 4_000 for p in plots.values())
    line = plots["loss"].figure.renderers[0].data_source.data
    assert 1000.0 in np.asarray(line["y"])  # the one spike among 500,000 points survives
    assert SPIKE_AT in np.asarray(line["x"])
