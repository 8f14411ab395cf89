"""bench/bench_overhead.py, the reference overhead harness, still runs against the engine
it instruments (its hook timing reads the engine's dispatch table)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_overhead.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_overhead", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_overhead"] = module
    spec.loader.exec_module(module)
    return module


def test_a_tiny_interleaved_run_reports_every_variant_and_the_hooks(capsys):
    bench = _load()
    variants = ["bare", "bare_b", "run", "mem+NaN", "stack", "trainer"]
    bench.main(
        ["--cycles", "2", "--warmup", "2", "--chunk", "3", "--hooks", "30", "--variants", *variants]
    )
    out = capsys.readouterr().out
    for name in variants:
        assert f"| `{name}` |" in out
    # the hook table: gated hooks are timed on log steps only, the others on both
    assert "| NaNMonitor | batch_end |" in out and "| SpeedMonitor | batch_end |" in out
    nan_row = next(line for line in out.splitlines() if line.startswith("| NaNMonitor | batch_end"))
    assert nan_row.split("|")[4].strip() == "nan"  # never called on the other steps


def test_the_ratios_are_against_bare_from_the_same_cycles():
    bench = _load()
    times = {
        "bare": {"wall": [1.0, 2.0], "cpu": [1.0, 1.0]},
        "run": {"wall": [1.1, 2.2], "cpu": [1.5, 1.5]},
        "stack": {"wall": [1.21, 2.42], "cpu": [1.5, 1.5]},
    }
    rows = bench.summarize(times, chunk=10)
    assert abs(rows["run"]["bare_wall"] - 1.1) < 1e-9 and rows["run"]["bare_cpu"] == 1.5
    assert abs(rows["stack"]["over_wall"] - 1.1) < 1e-9  # stack is read against run
    assert abs(rows["bare"]["us_wall"] - 1.5 / 10 * 1e6) < 1e-6
