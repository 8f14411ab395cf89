"""``obsbus report`` on a real two-rank run folder, one rank failed, opened in headless Chromium."""

from __future__ import annotations

import pytest

from obsbus.cli import main

from .._dist_utils import run_two_ranks
from ._runs import SECRET, two_ranks
from .conftest import pixel_spread

pytestmark = pytest.mark.dist

#: The groups this run's monitors feed (SpeedMonitor, MemoryMonitor, LRMonitor,
#: OptimizerMonitor, SystemMetricsMonitor, the loss). SpeedMonitor's rates get one plot per
#: unit (no tokens or FLOPs counted here).
EXPECTED = {
    "loss",
    "lr",
    "throughput_batches",
    "throughput_samples",
    "memory",
    "norms",
    "utilization",
    "system_memory",
}


@pytest.fixture(scope="module")
def two_rank_folder(tmp_path_factory):
    base = tmp_path_factory.mktemp("two-ranks")
    folder = base / "run"
    endings = run_two_ranks(two_ranks, base / "ranks", str(folder), timeout=20.0)
    assert "failed on purpose at batch 6" in endings[1]
    return folder


@pytest.fixture(scope="module")
def page(two_rank_folder, open_report, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "report.html"
    assert main(["report", str(two_rank_folder), "-o", str(out)]) == 0
    return out, open_report(out)


def test_no_network_and_no_javascript_error(page):
    _, seen = page
    assert seen.requests == []
    assert seen.errors == []


def test_every_expected_plot_is_drawn(page, two_rank_folder):
    _, seen = page
    assert set(seen.plots) >= EXPECTED, seen.plots
    # every plot section holds one drawn Bokeh figure (a canvas of non-zero size)
    assert seen.figures == len(seen.plots)
    assert all(count >= 1 for count in seen.plots.values()), seen.plots


def test_screenshot_is_not_blank(page):
    _, seen = page
    stddev, inked = pixel_spread(seen.screenshot)
    # The first plot as painted: grey-level spread ~20, ~5% of pixels inked (axes, grid, lines,
    # legend). The same section with its figure hidden (title and border only): ~8 and ~1.5%.
    assert stddev > 14 and inked > 0.03, (stddev, inked)


def test_header_shows_both_ranks_and_the_failure(page):
    out, seen = page
    # No status file: the run's name comes from config/run.json (the folder is named "run").
    assert seen.text.startswith("two-ranks\n")
    by_rank = {row[0]: row for row in seen.ranks}
    assert set(by_rank) == {"0", "1"}
    assert by_rank["1"][1] == "failed" and "failed on purpose at batch 6" in by_rank["1"][2]
    assert by_rank["1"][3] == "6"  # its metrics end at the batch that raised
    # rank 0's next collective lost its peer: failed too, with gloo's error (the peer's closed
    # connection, or the collective's timeout)
    assert by_rank["0"][1] == "failed" and "Error" in by_rank["0"][2]
    assert "rank 1 failed: RuntimeError" in seen.text
    assert SECRET not in out.read_text()
