"""Training-thread cost of each tracker destination against its own client called directly.

The trackers issue's target: under 10 µs on the training thread per
``log_metrics`` call (one scalar), for every tracker, at any logging rate the
background side can sustain. Each tracker has a module in ``bench/trackers/``
with ``make_destination(tmp)`` (the obsbus destination, offline) and
``make_direct(tmp)`` (the tracker's client, offline, called directly:
``log(metrics, step)`` and ``close()``).

For each tracker whose client is installed, in one process:

- ``direct``: µs per call of the client itself, one scalar per call;
- ``obsbus call``: µs per ``log_metrics`` call on the training thread, inside a
  ``Run`` (the destination holds the value; this is all a call costs);
- ``obsbus step``: µs per step a ``Run`` with the destination takes over the
  same ``Run`` without it, log interval 1 (so every step also hands its value
  to the writer thread: the hand-over is on the training thread too);
- ``drain``: seconds from the end of the loop until close returned (the
  background side catching up), and the implied sustainable rate.

Usage::

    .venv/bin/python bench/bench_trackers.py [--steps 2000] [--rounds 5] [--only wandb,mlflow]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from obsbus import Run

TRACKERS = ("tensorboard", "wandb", "mlflow", "comet", "neptune")


def _offline_env(tmp: Path) -> None:
    for var, sub in (
        ("WANDB_DIR", "wandb"),
        ("WANDB_CACHE_DIR", "wandb-cache"),
        ("WANDB_CONFIG_DIR", "wandb-config"),
        ("WANDB_DATA_DIR", "wandb-data"),
        ("MPLCONFIGDIR", "mpl"),
        ("NEPTUNE_DATA_DIRECTORY", "neptune"),
    ):
        os.environ[var] = str(tmp / sub)
    os.environ.update(
        {
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "1",
            "NEPTUNE_MODE": "offline",
        }
    )


def time_direct(module: Any, tmp: Path, steps: int) -> float:
    log, close = module.make_direct(tmp)
    log({"warm": 0.0}, 0)
    t0 = time.perf_counter_ns()
    for step in range(1, steps + 1):
        log({"loss": 0.5 + step * 1e-6}, step)
    per_call = (time.perf_counter_ns() - t0) / 1e3 / steps
    close()
    return per_call


def time_obsbus(module: Any | None, tmp: Path, steps: int) -> tuple[float, float, float]:
    """(µs per log_metrics call, µs per step in all, seconds to drain at close)."""
    loggers = [] if module is None else [module.make_destination(tmp)]
    value = torch.tensor(0.5)
    call_ns = 0
    with Run(max_duration=f"{steps}ba", loggers=loggers, run_folder=tmp / "run") as run:
        log_metrics = run.logger.log_metrics
        t0 = time.perf_counter_ns()
        for _ in run.train([[0]] * steps):
            c0 = time.perf_counter_ns()
            log_metrics({"bench/value": value})
            call_ns += time.perf_counter_ns() - c0
        loop_ns = time.perf_counter_ns() - t0
        d0 = time.perf_counter()
    drain = time.perf_counter() - d0
    return call_ns / 1e3 / steps, loop_ns / 1e3 / steps, drain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(TRACKERS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = datetime.datetime.now(datetime.UTC)
    root = Path(tempfile.mkdtemp(prefix="obsbus-bench-trackers-"))
    _offline_env(root)
    modules = {}
    for name in args.only.split(","):
        try:
            modules[name] = importlib.import_module(f"bench.trackers.{name}")
        except ImportError as exc:
            print(f"skip {name}: {exc}", file=sys.stderr)
    rows = []
    for name, module in modules.items():
        direct, calls, steps, drains, bare = [], [], [], [], []
        for r in range(args.rounds):
            tmp = root / f"{name}-{r}"
            tmp.mkdir()
            direct.append(time_direct(module, tmp / "direct", args.steps))
            _, bare_step, _ = time_obsbus(None, tmp / "bare", args.steps)
            call, step, drain = time_obsbus(module, tmp / "obsbus", args.steps)
            bare.append(bare_step)
            calls.append(call)
            steps.append(step - bare_step)
            drains.append(drain)
        rows.append(
            (
                name,
                statistics.median(direct),
                statistics.median(calls),
                statistics.median(steps),
                statistics.median(bare),
                statistics.median(drains),
            )
        )
    print(f"# Tracker destinations: training-thread cost ({started:%Y-%m-%d %H:%M} UTC)\n")
    print(
        f"{args.steps} steps x {args.rounds} rounds, one scalar per call, log interval 1; "
        f"load average {os.getloadavg()[0]:.2f} at the end; torch {torch.__version__}.\n"
    )
    print(
        "| tracker | client direct, µs/call | obsbus `log_metrics`, µs/call | obsbus added "
        "µs/step (hand-over included) | `Run` alone µs/step | drain at close, s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, direct_us, call_us, step_us, bare_us, drain_s in rows:
        print(
            f"| {name} | {direct_us:.1f} | {call_us:.2f} | {step_us:.1f} | {bare_us:.1f} | "
            f"{drain_s:.2f} |"
        )


if __name__ == "__main__":
    main()
