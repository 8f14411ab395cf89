"""Soak: many ``run.log_metrics`` calls through FileLogger and TensorBoard keep memory bounded.

The attack: log and log, with the resident memory (RSS, psutil) sampled as
it goes, in three shapes of loop: one call per training batch (a batch
boundary after each), every call inside one long ``run.eval`` batch, and
calls inside ``with Run`` with no ``run.train`` at all. Held rows must be
capped on every call path (before, a destination held every row until the
next batch boundary: 0.7-1.7 KB a call, all of it lost on kill -9). Two
bounds:

- RSS grows less than ``GROWTH_MB`` in all (with batch boundaries the
  writers' bounded queues fill first: ~75 MB here when the loop outruns them);
- without batch boundaries, where at most two capped hand-overs may wait,
  RSS is flat once warm: it grows less than ``LATE_GROWTH_MB`` after the
  first tenth of the calls.

Each run is a fresh process (``scripts/soak_run.py``): in the test process,
memory an earlier test freed is filled again before RSS moves. The run's
JSON Lines are read back: every call was written once, in order,
at its own step. The default suite makes 50k calls per shape (seconds
each); ``-m long`` makes 1e6, and adds a shape whose hand-overs come every
1000 batches (``flush_interval=1000``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "soak_run.py"
#: Holding every row of 1e6 calls costs 0.7-1.7 GB; a bounded run here stays under ~80 MB.
GROWTH_MB = 100
#: Growth after the first tenth of the calls, without batch boundaries: a bounded run moves a
#: few MB (allocator noise); holding every row moved 30-90 MB over the last 45k of 50k calls.
LATE_GROWTH_MB = 15
SHAPES = ["batches", "inside-eval", "no-train-loop"]


def _soak(tmp_path: Path, calls: int, shape: str, flush_interval: int = 100) -> None:
    folder = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), str(calls), shape, str(flush_interval)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    samples = [int(line.split()[2]) for line in done.stdout.splitlines() if line.startswith("rss ")]
    assert len(samples) == 11, done.stdout[-3000:]
    growth_mb, late_mb = (max(samples) - samples[0]) / 1e6, (max(samples) - samples[1]) / 1e6
    seen = f"RSS every {calls // 10} calls (MB): {[round(s / 1e6) for s in samples]}"
    assert growth_mb < GROWTH_MB, (
        f"RSS grew {growth_mb:.0f} MB over {calls} calls ({shape}); {seen}"
    )
    if shape != "batches":
        assert late_mb < LATE_GROWTH_MB, (
            f"RSS grew {late_mb:.0f} MB after the first {calls // 10} of {calls} calls "
            f"({shape}): rows are held without bound; {seen}"
        )
    values = []
    with (folder / "metrics-rank0.jsonl").open() as f:
        for line in f:
            row = json.loads(line)
            if "soak/value" in row:
                assert row["step"] == row["soak/value"]
                values.append(row["soak/value"])
    assert values == [float(i) for i in range(calls)]  # each call written once, in order


@pytest.mark.parametrize("shape", SHAPES)
def test_memory_stays_bounded_over_50k_calls(tmp_path, shape):
    _soak(tmp_path, 50_000, shape)


@pytest.mark.long
@pytest.mark.parametrize("shape", SHAPES)
def test_memory_stays_bounded_over_a_million_calls(tmp_path, shape):
    _soak(tmp_path, 1_000_000, shape)


@pytest.mark.long
def test_memory_stays_bounded_over_a_million_calls_handed_over_every_1000_batches(tmp_path):
    """Each hand-over carries 1000 rows: a writer queue bounded in calls must not hold 1e6 rows."""
    _soak(tmp_path, 1_000_000, "batches", flush_interval=1000)
