"""The examples and the README's main job run and do what they say."""

from __future__ import annotations

import getpass
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_writes_a_run_folder(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--epochs", "1",
         "--run-name", "qs", "--workspace", str(tmp_path / "runs")],
        capture_output=True, text=True, check=True, timeout=300,
    )
    folder = tmp_path / "runs" / "default" / getpass.getuser() / "qs"
    assert f"Run folder: {folder}" in out.stdout
    rows = [json.loads(line) for line in (folder / "metrics-rank0.jsonl").read_text().splitlines()]
    losses = [r for r in rows if "loss/train/total" in r]
    assert [r["batch"] for r in losses] == list(range(1, 101))
    assert any("metrics/eval/loss" in r for r in rows)
    info = (folder / "logs" / "train" / "rank-0" / "info.log").read_text()
    assert "quickstart: 1 epochs" in info
    assert re.search(r"\[epoch=1\]\[batch=50/100\] .*loss/train/total=", info)  # keys sorted
    assert "train epoch" in out.stderr  # the progress bar, as plain lines off a terminal
    text = (folder / "logs-rank0.txt").read_text()
    assert "[hyperparameter][batch=0]: max_duration: 1ep" in text
    assert "[hyperparameter][batch=0]: batch_size: 64" in text
    # Every monitor of the default stack, at its interval.
    steps = {}
    for row in rows:
        for key in row:
            steps.setdefault(key, []).append(row["step"])
    assert steps["throughput/samples_per_sec"] == list(range(21, 101))  # a 20-batch window
    assert steps["memory/host_rss_mem"] == list(range(1, 101))
    assert steps["lr-AdamW/group0"] == list(range(1, 101))
    assert steps["l2_norm/grad/global"] == list(range(10, 101, 10))
    assert not [key for key in steps if key.startswith("nan/")]
    # One profiler window: batches 21-24 recorded, after a warm-up batch.
    (trace,) = (folder / "traces").glob("ep1-ba*-rank0.json")
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert "event/batch" in names
    # TensorBoard, read back with its own reader.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("loss/train/total")] == list(range(1, 101))
    # The report, named in the output, with the run's plots in it.
    report = folder / "report.html"
    assert f"Report: {report}" in out.stdout
    page = report.read_text()
    for key in ("loss/train/total", "throughput/samples_per_sec", "memory/host_rss_mem",
                "lr-AdamW/group0", "l2_norm/grad/global"):  # fmt: skip
        assert key in page, key
    assert "<script src=" not in page and '<link rel="stylesheet" href="http' not in page
    status = json.loads((folder / "run-status-rank0.json").read_text())
    assert status["status"] == "finished"
    assert (folder / "config" / "plugins.json").is_file()


def test_plain_loop_example_gets_the_same_metrics():
    memory = runpy.run_path(str(ROOT / "examples" / "plain_loop.py"))["main"]()
    losses = memory.get_timeseries("loss/train/total")
    assert losses["batch"] == list(range(1, 43))  # 3 epochs of 14 batches
    assert losses["epoch"][-1] == 2
    assert len(memory.get_timeseries("metrics/eval/loss")["batch"]) == 1


def test_logger_smoke_script_passes():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "logger_smoke.py")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("\nok    ") + out.stdout.startswith("ok    ") == 5
    assert "logger smoke: all destinations ok" in out.stdout


def test_from_composer_example_runs_composers_callbacks_page(capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    memory = runpy.run_path(str(ROOT / "examples" / "from_composer.py"))["main"]()
    assert len(memory.get_timeseries("throughput/samples_per_sec")["batch"]) == 12  # 16 - 4
    assert "lr-AdamW/group0" in memory.data
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Epoch: ")]
    assert len(lines) == 4  # two trainers of 2 epochs: the hook and the run_event forms agree
    assert lines[:2] == lines[2:] and lines[0] != lines[1]


def test_lightning_example_writes_a_run_folder(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "lightning_fit.py"), "--epochs", "1",
         "--run-name", "lf", "--workspace", str(tmp_path / "runs")],
        capture_output=True, text=True, check=True, timeout=300,
    )
    folder = tmp_path / "runs" / "default" / getpass.getuser() / "lf"
    assert f"Run folder: {folder}" in out.stdout
    rows = [json.loads(line) for line in (folder / "metrics-rank0.jsonl").read_text().splitlines()]
    assert [r["batch"] for r in rows if "loss/train/total" in r] == list(range(1, 15))
    assert any("val/mse" in r for r in rows) and any("train/mse" in r for r in rows)
    assert any("throughput/samples_per_sec" in r for r in rows)
    assert list((folder / "tensorboard").glob("events.out.tfevents.*"))


def test_hf_trainer_example_writes_a_run_folder(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "hf_trainer.py"), "--epochs", "1",
         "--run-name", "hf", "--workspace", str(tmp_path / "runs")],
        capture_output=True, text=True, check=True, timeout=300,
    )
    folder = tmp_path / "runs" / "default" / getpass.getuser() / "hf"
    assert f"Run folder: {folder}" in out.stdout
    rows = [json.loads(line) for line in (folder / "metrics-rank0.jsonl").read_text().splitlines()]
    assert [r["batch"] for r in rows if "loss/train/total" in r] == list(range(1, 17))
    assert any("metrics/eval/loss" in r for r in rows) and any("lr-AdamW/group0" in r for r in rows)
    assert any("throughput/samples_per_sec" in r for r in rows)
    assert list((folder / "tensorboard").glob("events.out.tfevents.*"))
