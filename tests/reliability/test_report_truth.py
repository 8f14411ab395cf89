"""Issue 34, the report: every number it shows is the logged value, in the unit the run declared.

Each test plants a known truth in a run folder (as FileLogger and the run write it) and reads
it back from the report: the plan of its plots, its HTML, or the page as Chromium draws it.
"""

from __future__ import annotations

import json
import math
import re
from html import unescape
from pathlib import Path

import pytest

from obsbus.cli import main as cli_main
from obsbus.report import build_report, write_report
from obsbus.report._groups import plan_plots
from obsbus.report._plots import build_plots
from obsbus.report._read import read_run

from ..report import conftest as report_conftest

# The report tests' shared Chromium and page opener, as fixtures of this module too.
browser = report_conftest.browser
open_report = report_conftest.open_report


def _rows(folder: Path, rows: list[dict], rank: int = 0, units: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"metrics-rank{rank}.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            full = {"epoch": 0, "batch": row["step"], "wall_time": 1e9 + row["step"], **row}
            f.write(json.dumps(full) + "\n")
    if units is not None:
        (folder / "config").mkdir(exist_ok=True)
        (folder / "config" / "units.json").write_text(json.dumps({"units": units}))
    return folder


def _metrics_table(html: str) -> dict[str, list[str]]:
    """The header's final/best table: metric -> its other cells, as text."""
    table = html.split('<table class="metrics">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    head = [unescape(h) for h in re.findall(r"<th>(.*?)</th>", rows[0])]
    out = {}
    for row in rows[1:]:
        cells = [
            unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)
        ]
        out[cells[0]] = dict(zip(head[1:], cells[1:], strict=True))
    return out


# --------------------------------------------------------------------------- units


def _timed_run(folder: Path, units: dict | None) -> Path:
    """SpeedMonitor's time keys in hours (its default): an 11 s run ends at 0.00306 h."""
    rows = [
        {"step": s, "time/train": 11.0 * s / 10 / 3600, "loss/train/total": 1.0 / s}
        for s in range(1, 11)
    ]
    rows.append({"step": 10, "metrics/eval/samples_per_second": 83.8})
    return _rows(folder, rows, units=units)


def test_the_time_panel_names_the_unit_the_monitor_declared(tmp_path):
    folder = _timed_run(
        tmp_path / "run",
        {"time/*": "h", "metrics/*/samples_per_second": "samples/s"},
    )
    plots = {p.group.id: p for p in plan_plots(read_run(folder))}
    time = plots["time"]
    assert time.unit == "h" and time.title == "Time (h)", time.title
    html = build_report(folder)
    assert "Time (s)" not in html and "Time (h)" in html
    [figure] = [p.figure for p in build_plots(read_run(folder)) if p.group.id == "time"]
    assert figure.yaxis[0].axis_label == "h"
    table = _metrics_table(html)
    assert table["metrics/eval/samples_per_second"]["unit"] == "samples/s"
    assert table["loss/train/total"]["unit"] == ""  # none declared: none shown


def test_no_declared_unit_shows_no_unit(tmp_path):
    """A run made before units were recorded: no unit anywhere, never a guessed one."""
    rows = [
        {
            "step": s,
            "time/train": 0.001 * s,
            "memory/peak_allocated_mem": 1.5,
            "system/cpu_power_w": 3.0,
        }
        for s in range(1, 5)
    ]
    folder = _rows(tmp_path / "old", rows)
    titles = {p.group.id: p.title for p in plan_plots(read_run(folder))}
    assert titles["time"] == "Time", titles
    assert titles["memory"] == "Memory", titles
    assert titles["power"] == "Power", titles
    html = build_report(folder)
    for guessed in ("Time (s)", "Memory (GB)", "Power (W)"):
        assert guessed not in html


def test_keys_of_one_group_with_different_units_get_a_plot_each(tmp_path):
    rows = [
        {"step": s, "time/train": 0.5 * s, "time/remaining_estimate": 100.0 - s}
        for s in range(1, 5)
    ]
    folder = _rows(tmp_path / "run", rows, units={"time/*": "h", "time/remaining_estimate": "s"})
    plots = [p for p in plan_plots(read_run(folder)) if p.group.id == "time"]
    assert sorted((p.unit, tuple(p.keys)) for p in plots) == [
        ("h", ("time/train",)),
        ("s", ("time/remaining_estimate",)),
    ]
    assert len({p.id for p in plots}) == 2


# ---------------------------------------------------------------------------- best


def test_best_is_max_for_rates_and_accuracy_min_for_loss_none_when_unknown(tmp_path):
    rows = []
    for s, (speed, acc, loss, other) in enumerate(
        [(13.4, 0.5, 2.0, 7.0), (60.0, 0.9, 1.0, 3.0), (83.8, 0.8, 1.5, 5.0)], start=1
    ):
        rows.append(
            {
                "step": s,
                "metrics/eval/samples_per_second": speed,
                "metrics/eval/accuracy": acc,
                "metrics/eval/loss": loss,
                "metrics/eval/runtime": other,
                "metrics/eval/mfu": acc / 2,
            }
        )
    table = _metrics_table(build_report(_rows(tmp_path / "run", rows)))
    assert table["metrics/eval/samples_per_second"]["best"] == "83.8"  # not 13.4
    assert table["metrics/eval/samples_per_second"]["best at step"] == "3"
    assert table["metrics/eval/accuracy"]["best"] == "0.9"
    assert table["metrics/eval/mfu"]["best"] == "0.45"
    assert table["metrics/eval/loss"]["best"] == "1"
    # runtime: neither lower nor higher is known to be better (a shorter eval may be a
    # smaller one): no best at all, rather than a wrong one
    assert (
        table["metrics/eval/runtime"]["best"] == ""
        and table["metrics/eval/runtime"]["final"] == "5"
    )


@pytest.mark.parametrize(
    ("key", "direction"),
    [
        ("loss/train/total", "min"),
        ("metrics/eval/perplexity", "min"),
        ("metrics/val/error", "min"),
        ("metrics/eval/wer", "min"),
        ("throughput/samples_per_sec", "max"),
        ("metrics/eval/tokens_per_second", "max"),
        ("throughput/device/mfu", "max"),
        ("metrics/eval/MulticlassAccuracy", "max"),
        ("metrics/eval/f1", "max"),
        ("metrics/eval/steps_per_second", "max"),
        ("metrics/eval/time_per_batch", "min"),
        ("metrics/eval/runtime", None),
        ("metrics/eval/epoch", None),
        ("metrics/eval/lossless_ratio", None),
        ("metrics/eval/mapping_size", None),
    ],
)
def test_direction_of_best(key, direction):
    from obsbus.report._best import best_direction

    assert best_direction(key) == direction


# --------------------------------------------------------------------------- twins


def _twin_rows() -> list[dict]:
    rows = []
    for s in range(1, 21):
        rate = 100.0 + (s % 3)
        loss = 1.0 / s
        rows.append(
            {
                "step": s,
                "throughput/samples_per_sec": rate,
                "throughput/device/samples_per_sec": rate,  # one rank: the same series
                "time/eval": 0.1 * s,
                "time/val": 0.1 * s,
                "loss/train/total": loss,
                "hf/loss": loss,
                "time/train": 0.2 * s,
                "throughput/batches_per_sec": 3.0,
                "throughput/device/batches_per_sec": 3.0 if s != 7 else 2.5,  # differs once
            }
        )
    return rows


def test_identical_series_draw_one_line_that_names_its_twins(tmp_path):
    folder = _rows(tmp_path / "run", _twin_rows())
    plots = build_plots(read_run(folder))
    drawn = {key: p for p in plots for key in p.keys}
    assert drawn["throughput/samples_per_sec"].twins == {
        "throughput/samples_per_sec": ["throughput/device/samples_per_sec"]
    }
    assert "throughput/device/samples_per_sec" not in drawn
    assert "time/val" not in drawn and drawn["time/eval"].twins["time/eval"] == ["time/val"]
    assert "hf/loss" not in drawn  # drawn once, in the loss plot, named there
    assert drawn["loss/train/total"].twins["loss/train/total"] == ["hf/loss"]
    # a series that differs at one step is not a twin
    assert {"throughput/batches_per_sec", "throughput/device/batches_per_sec"} <= set(drawn)
    # the legend names every twin
    names = {r.name for p in plots for r in p.figure.renderers}
    assert "throughput/samples_per_sec = throughput/device/samples_per_sec" in names
    assert "loss/train/total = hf/loss" in names
    assert "time/eval = time/val" in names


def test_twins_on_one_rank_only_are_not_merged(tmp_path):
    """With two ranks, keys equal on rank 0 but not on rank 1 are two lines."""
    rows = _twin_rows()
    _rows(tmp_path / "run", rows, rank=0)
    other = [dict(r, **{"throughput/device/samples_per_sec": 50.0}) for r in rows]
    _rows(tmp_path / "run", other, rank=1)
    drawn = {key for p in plan_plots(read_run(tmp_path / "run")) for key in p.keys}
    assert {"throughput/samples_per_sec", "throughput/device/samples_per_sec"} <= drawn
    assert "time/val" not in drawn  # equal on both ranks


# ---------------------------------------------------------------------- other metrics


def test_other_metrics_are_grouped_by_prefix_and_magnitude(tmp_path):
    rows = [
        {
            "step": s,
            "hf/total_flos": 1.2e9 * s,
            "hf/grad_norm": 1.0 + 0.1 * s,
            "hf/learning_rate_scale": 0.5,
            "custom/score_raw": 4.0 + s,
            "epoch_fraction": s / 10,
        }
        for s in range(1, 11)
    ]
    plots = [
        p for p in plan_plots(read_run(_rows(tmp_path / "run", rows))) if p.group.id == "other"
    ]
    for plot in plots:
        prefixes = {k.split("/", 1)[0] if "/" in k else "" for k in plot.keys}
        assert len(prefixes) == 1, plot.keys
    by_key = {k: p for p in plots for k in p.keys}
    assert by_key["hf/total_flos"] is not by_key["hf/grad_norm"]  # 1e9 does not flatten 1
    assert by_key["hf/grad_norm"] is by_key["hf/learning_rate_scale"]
    assert by_key["custom/score_raw"] is not by_key["hf/grad_norm"]
    assert len({p.id for p in plots}) == len(plots)
    assert "hf/" in by_key["hf/grad_norm"].title


# ------------------------------------------------------------------ the page, drawn


def _busy_run(folder: Path) -> Path:
    """Plots whose y ticks and legends differ in width: 1e9s, 1e-4s and 20 long names."""
    rows = []
    for s in range(0, 1001, 50):
        row = {
            "step": s,
            "loss/train/total": 1.0 / (s + 1),
            "lr-AdamW/group0": 1e-4 * (1 + s / 1000),
        }
        row["hf/total_flos"] = 1.234e9 * (s + 1)
        for i in range(20):
            row[f"custom/a_rather_long_metric_name_for_the_legend_{i:02d}"] = i + 0.01 * s
        rows.append(row)
    # a y-axis named with a unit is wider than one without
    return _rows(folder, rows, units={"hf/*": "flops", "lr-*": "1/step"})


def test_step_0_is_at_one_x_in_every_plot_and_legends_stay_in_their_card(tmp_path, open_report):
    seen = open_report(write_report(_busy_run(tmp_path / "run")))
    assert seen.errors == []
    layout = seen.layout
    assert len(layout) >= 3, [f["name"] for f in layout]
    for what in ("step0", "step1000"):
        xs = {f["name"]: round(f[what], 1) for f in layout}
        assert max(xs.values()) - min(xs.values()) <= 1.0, (what, xs)
    for figure in layout:
        left, top, right, bottom = figure["card"]
        assert figure["legends"], figure["name"]
        for legend in figure["legends"]:
            assert left <= legend[0] and legend[2] <= right, (
                figure["name"],
                legend,
                figure["card"],
            )
            assert top <= legend[1] and legend[3] <= bottom, (
                figure["name"],
                legend,
                figure["card"],
            )
            # and inside the figure itself (a legend past the canvas is cut off)
            assert legend[3] <= figure["box"][3] + 0.5, (figure["name"], legend, figure["box"])


def _hover(name: str, step: float, value: float):
    """``act`` for open_report: put the mouse 2 px below the point (step, value) of figure
    ``name`` (on its marker, off its exact value) and return the tooltip's text."""

    def act(page):
        where = page.evaluate(
            """([name, step, value]) => {
              const v = [...Bokeh.index].find(v => v.model.name === name);
              const box = v.el.getBoundingClientRect();
              return [box.left + v.frame_view.x_scale.compute(step),
                      box.top + v.frame_view.y_scale.compute(value)];
            }""",
            [name, step, value],
        )
        page.mouse.move(where[0] - 40, where[1] + 40)
        page.mouse.move(where[0], where[1] + 2, steps=4)
        tooltip = page.locator(".bk-tooltip-content").filter(has_text="step").first
        tooltip.wait_for(state="visible", timeout=10_000)
        return tooltip.inner_text()

    return act


def test_hover_shows_the_logged_value_not_the_mouse_position(tmp_path, open_report):
    rows = [
        {"step": s, "lr-SGD/group0": v}
        for s, v in ((0, 0.1), (10, 0.05), (20, 0.025), (30, 0.0125))
    ]
    folder = _rows(tmp_path / "run", rows, units={"lr-*": "1/step"})
    seen = open_report(write_report(folder), act=_hover("lr", 20, 0.025))
    text = seen.acted
    assert "0.025" in text and "20" in text, text
    assert "1/step" in text, text  # the unit the run declared
    numbers = [float(n) for n in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)]
    assert all(n in (0.025,) for n in numbers), text  # no mouse position


# -------------------------------------------------------------------------- images


def test_images_logged_with_log_images_are_in_the_report(tmp_path, open_report):
    import numpy as np

    from obsbus import Run
    from obsbus.loggers import FileLogger

    red = np.zeros((8, 12, 3), dtype=np.float32)
    red[..., 0] = 1.0
    with Run(max_duration="2ba", run_folder=tmp_path / "run", loggers=[FileLogger()]) as run:
        for batch in run.train([[1], [2]]):
            run.state.loss = 0.5
            run.logger.log_images(red, name="samples/red", step=10 * batch[0])
    folder = tmp_path / "run"
    pngs = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.png"))
    assert pngs == ["images/rank0/samples/red/step-10.png", "images/rank0/samples/red/step-20.png"]
    from PIL import Image

    with Image.open(folder / pngs[0]) as png:  # the pixels logged, read by another decoder
        assert png.size == (12, 8) and png.convert("RGB").getpixel((5, 3)) == (255, 0, 0)
    html = build_report(folder)
    assert html.count('src="data:image/png;base64,') == 2
    seen = open_report(
        write_report(folder),
        act=lambda page: page.evaluate(
            "() => [...document.querySelectorAll('#images img')].map(i => [i.naturalWidth, "
            "i.naturalHeight, i.closest('figure').innerText])"
        ),
    )
    assert [(w, h) for w, h, _ in seen.acted] == [(12, 8), (12, 8)]
    captions = " ".join(c for _, _, c in seen.acted)
    assert "samples/red" in captions and "step 10," in captions and "step 20," in captions


# ----------------------------------------------------------------------- obsbus report


def test_report_on_a_folder_without_a_run_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a run")
    assert cli_main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "holds no run" in err and "metrics-rank0.jsonl" in err and "To fix" in err, err
    assert err.count("obsbus report:") == 1, err
    assert not (empty / "report.html").exists()


def test_report_on_a_missing_path_is_an_error_said_once(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("obsbus report:") == 1 and "nowhere" in err and "does not exist" in err, err


# ----------------------------------------------------------------------- JSON Lines


def test_strict_json_non_finite_strings_and_bare_tokens_read_as_floats(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    lines = [
        '{"step": 1, "epoch": 0, "batch": 1, "wall_time": 1.0, "loss/train/total": 1.5}',
        '{"step": 2, "epoch": 0, "batch": 2, "wall_time": 2.0, "loss/train/total": "NaN"}',
        '{"step": 3, "epoch": 0, "batch": 3, "wall_time": 3.0, "loss/train/total": "Infinity"}',
        '{"step": 4, "epoch": 0, "batch": 4, "wall_time": 4.0, "loss/train/total": "-Infinity"}',
        '{"step": 5, "epoch": 0, "batch": 5, "wall_time": 5.0, "loss/train/total": NaN}',
        '{"step": 6, "epoch": 0, "batch": 6, "wall_time": 6.0, "loss/train/total": -Infinity}',
        '{"step": 7, "epoch": 0, "batch": 7, "wall_time": 7.0, "note": "hello"}',
    ]
    (folder / "metrics-rank0.jsonl").write_text("\n".join(lines) + "\n")
    data = read_run(folder)
    steps, values = data.ranks[0].series["loss/train/total"]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert values[0] == 1.5 and math.isnan(values[1]) and values[2] == math.inf
    assert values[3] == -math.inf and math.isnan(values[4]) and values[5] == -math.inf
    assert "note" not in data.ranks[0].series  # text stays out of the plots
    assert data.ranks[0].bad_lines == 0
    html = build_report(folder)
    assert "loss/train/total is not finite (NaN or inf) from step 2" in html


def test_a_metric_named_like_a_column_is_read_as_that_metric(tmp_path):
    """HF logs ``epoch`` (a float, 0.25 a quarter into the first epoch); FileLogger writes it
    as ``metric:epoch`` beside its own ``epoch`` column (the loop's epoch count)."""
    folder = tmp_path / "run"
    folder.mkdir()
    with open(folder / "metrics-rank0.jsonl", "w") as f:
        for s in range(1, 9):
            row = {"step": s, "epoch": 0, "batch": s, "wall_time": 1e9 + s, "metric:epoch": s / 4}
            row["metric:step"] = 100 + s
            f.write(json.dumps(row) + "\n")
    data = read_run(folder)
    series = data.ranks[0].series
    assert series["epoch"] == ([1, 2, 3, 4, 5, 6, 7, 8], [s / 4 for s in range(1, 9)])
    assert series["step"][1][0] == 101
    assert "metric:epoch" not in series
    assert data.ranks[0].last_epoch == 0  # the column, not the metric
    assert data.ranks[0].last_step == 8
    drawn = {k for p in plan_plots(data) for k in p.keys}
    assert "epoch" in drawn


def test_a_real_run_in_hours_reads_as_hours(tmp_path):
    """SpeedMonitor's default time unit is hours: the report's time plot says so, and its
    last time/train point, times 3600, is within the run's measured wall time."""
    import time as clock

    from obsbus import Run
    from obsbus.callbacks import SpeedMonitor
    from obsbus.loggers import FileLogger

    folder = tmp_path / "run"
    began = clock.perf_counter()
    with Run(
        max_duration="4ba",
        run_folder=folder,
        callbacks=[SpeedMonitor(window_size=2)],
        loggers=[FileLogger(write_period=0)],
    ) as run:
        for batch in run.train([[1], [2], [3], [4]]):
            run.state.loss = 1.0 / batch[0]
    took_s = clock.perf_counter() - began
    data = read_run(folder)
    # without an eval, time/total is time/train: one line, named for both
    drawn = {k: p for p in plan_plots(data) for k in p.keys}
    drawn.update({t: p for p in drawn.values() for twins in p.twins.values() for t in twins})
    plot = drawn["time/train"]
    assert plot.unit == "h" and plot.title == "Time (h)", plot.title
    hours = data.ranks[0].series["time/train"][1][-1]
    assert 0 < hours * 3600 <= took_s, (hours, took_s)
    assert "Time (s)" not in build_report(folder)
