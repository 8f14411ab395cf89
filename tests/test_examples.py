"""The examples and the README's main job run and do what they say."""

from __future__ import annotations

import json
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
    folder = tmp_path / "runs" / "qs"
    assert f"Run folder: {folder}" in out.stdout
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    losses = [r for r in rows if r["key"] == "loss/train/total"]
    assert [r["batch"] for r in losses] == list(range(1, 101))
    assert any(r["key"] == "metrics/eval/loss" for r in rows)
    hparams = json.loads((folder / "hparams.json").read_text())
    assert hparams["max_duration"] == "1ep" and hparams["batch_size"] == 64


def test_plain_loop_example_gets_the_same_metrics():
    memory = runpy.run_path(str(ROOT / "examples" / "plain_loop.py"))["main"]()
    losses = memory.get_timeseries("loss/train/total")
    assert losses["batch"] == list(range(1, 43))  # 3 epochs of 14 batches
    assert losses["epoch"][-1] == 2
    assert len(memory.get_timeseries("metrics/eval/loss")["batch"]) == 1
