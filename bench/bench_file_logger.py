"""What a FileLogger costs a ~1 ms CPU training step, by ``write_period``.

The FileLogger's writer thread formats every logged row (a text line per
value, a JSON line per row) while training runs; on CPython that work takes
the GIL from the training thread whenever the step releases it (every torch
op). ``write_period`` sets how often held rows are handed to the writer:
``0`` at every ``log_interval`` (obsbus before ``write_period`` existed),
``1.0`` (the default) at most once a second and at flushes.

The loop is ``bench_loop.py``'s MLP (128->256->1, batch 64, SGD, CPU, one
torch thread) under :class:`obsbus.Run`, which logs the loss every step; every
10th step also logs 15 more scalars (a monitor stack's worth). Variants,
interleaved round by round: ``none`` (no destination), ``write_period=0``,
``write_period=1``, each a ``FileLogger(log_interval="10ba")`` writing into a
temporary run folder. Reported per variant: mean, p99 and max step time (each
the median over rounds), and the mean over ``none``.

Usage::

    .venv/bin/python bench/bench_file_logger.py [--steps 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_loop import make_data, make_model
from obsbus import Run
from obsbus.loggers import FileLogger

VARIANTS: dict[str, float | None] = {"none": None, "write_period=0": 0.0, "write_period=1": 1.0}


def run_once(folder: Path, steps: int, write_period: float | None) -> list[float]:
    """Seconds per step of one run (the FileLogger closed after the timed loop)."""
    model = make_model(128, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = make_data(1, 64, 128)[0]
    extra = {f"bench/m{i}": torch.tensor(float(i)) for i in range(15)}
    loggers = (
        []
        if write_period is None
        else [FileLogger(log_interval="10ba", write_period=write_period, overwrite=True)]
    )
    times = []
    with Run(max_duration=f"{steps}ba", loggers=loggers, run_folder=folder) as run:
        last = time.perf_counter()
        for i, _ in enumerate(run.train([[0]] * steps)):
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            run.state.loss = loss
            if i % 10 == 9:
                run.log_metrics(extra)
            now = time.perf_counter()
            times.append(now - last)
            last = now
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = datetime.datetime.now(datetime.UTC)
    root = Path(tempfile.mkdtemp(prefix="obsbus-bench-file-logger-"))
    stats: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    try:
        for r in range(args.rounds):
            for name, period in VARIANTS.items():
                times = sorted(run_once(root / f"{r}-{name}", args.steps, period))
                p99 = times[int(0.99 * (len(times) - 1))]
                stats[name].append((statistics.mean(times), p99, times[-1]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"# FileLogger on a ~1 ms CPU step ({started:%Y-%m-%d %H:%M} UTC)\n")
    print(
        f"{args.steps} steps x {args.rounds} rounds (medians over rounds), log_interval 10ba; "
        f"load average {os.getloadavg()[0]:.2f} at the end; torch {torch.__version__}.\n"
    )
    print("| variant | mean µs/step | added over `none` | p99 µs | max µs |")
    print("|---|---:|---:|---:|---:|")
    base = statistics.median(m for m, _, _ in stats["none"])
    for name, rows in stats.items():
        mean, p99, worst = (statistics.median(row[i] for row in rows) * 1e6 for i in range(3))
        print(f"| {name} | {mean:.0f} | {mean - base * 1e6:+.0f} | {p99:.0f} | {worst:.0f} |")


if __name__ == "__main__":
    main()
