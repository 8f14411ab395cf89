"""Soak: many ``log_metrics`` calls through FileLogger and TensorBoard keep memory bounded.

The rows a destination holds are capped (1024) on every call path, so the
resident memory of a run that logs and logs stays flat, with batch
boundaries and without them (a long eval, a loop that never calls
``run.train``: before, every row was held until close, ~1.4 KB a call per
destination). The default suite makes 60k calls; ``-m long`` 1e6 each way.
The run's files are read back: every call was written.
"""

from __future__ import annotations

import json

import psutil
import pytest

from obsbus import Run
from obsbus.loggers import FileLogger, TensorboardLogger

GROWTH_MB = 60  # far below what holding every row costs (60k calls: ~170 MB before)


def _soak(tmp_path, calls: int, boundaries: bool) -> None:
    proc = psutil.Process()
    loggers = [FileLogger(write_period=3600.0), TensorboardLogger(write_period=3600.0)]
    samples = []
    with Run(max_duration=f"{calls}ba", run_folder=tmp_path, loggers=loggers) as run:
        start = proc.memory_info().rss
        if boundaries:
            for i, _ in enumerate(run.train([[0]] * calls)):
                run.log_metrics({"soak/value": float(i), "soak/other": 1.0})
                if i % 10_000 == 0:
                    samples.append(proc.memory_info().rss)
        else:
            for i in range(calls):
                run.log_metrics({"soak/value": float(i), "soak/other": 1.0}, step=i)
                if i % 10_000 == 0:
                    samples.append(proc.memory_info().rss)
            run.state.stop_training()
        samples.append(proc.memory_info().rss)
    growth = (max(samples) - start) / 1e6
    assert growth < GROWTH_MB, f"RSS grew {growth:.0f} MB over {calls} calls: {samples}"
    written = sum(1 for line in (tmp_path / "metrics-rank0.jsonl").open() if "soak/value" in line)
    assert written == calls
    last = json.loads((tmp_path / "metrics-rank0.jsonl").read_text().splitlines()[-1])
    assert last["soak/value"] == float(calls - 1) or "loss/train/total" in last


@pytest.mark.parametrize("boundaries", [False, True], ids=["no-batch-boundary", "batches"])
def test_memory_stays_bounded_over_many_calls(tmp_path, boundaries):
    _soak(tmp_path, 60_000, boundaries)


@pytest.mark.long
@pytest.mark.parametrize("boundaries", [False, True], ids=["no-batch-boundary", "batches"])
def test_memory_stays_bounded_over_a_million_calls(tmp_path, boundaries):
    _soak(tmp_path, 1_000_000, boundaries)
