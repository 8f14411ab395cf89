"""Training-thread cost of each tracker destination against its own client called directly.

The trackers issue's target: under 10 µs on the training thread per
``log_metrics`` call (one scalar), for every tracker, at any logging rate the
background side can sustain. Each tracker has a module in ``bench/trackers/``
with ``make_destination(tmp, **kwargs)`` (the obsbus destination, offline) and
``make_direct(tmp)`` (the tracker's client, offline, called directly:
``log(metrics, step)`` and ``close()``).

For each tracker whose client is installed, in one process, round by round:

- ``direct``: µs per call of the client itself, one scalar per call, in a
  plain loop, and the µs per step that loop takes over the same loop without
  the calls (what calling the client by hand costs a training step, its
  background threads included);
- ``startup``: seconds from ``Run`` start until the client has started and
  caught up (its start runs on the writer thread, overlapping the first
  steps; ``WARMUP`` steps run before the wait and are not timed);
- ``obsbus call``: µs per ``log_metrics`` call on the training thread, inside a
  ``Run``, steady state (the destination holds the value: all a call costs);
- ``added, empty step``: µs per step that a ``Run`` with the destination takes
  over the same ``Run`` without it, log interval 1, steady state, with nothing
  else in the step: the hand-overs plus every microsecond the client's Python
  work on the writer thread takes the GIL from the training thread (the worst
  case: a step that never releases the GIL);
- ``added, MLP step``: the same with a real ~1 ms CPU training step in the
  body (``bench_loop.py``'s MLP), whose torch kernels release the GIL;
- ``drain``: seconds from the end of the loop until close returned.

``--write-period`` is passed to the destinations (obsbus's default is 1 s;
``0`` hands the values over at every step, as before it existed).

Usage::

    .venv/bin/python bench/bench_trackers.py [--steps 2000] [--rounds 5] [--only wandb,mlflow]
        [--write-period 1.0]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_loop import make_data, make_model
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


def time_direct(
    module: Any, tmp: Path, steps: int, body: Callable[[], None]
) -> tuple[float, float]:
    """(µs per client call, µs per step in all) of a plain loop calling the client each step."""
    log, close = module.make_direct(tmp)
    log({"warm": 0.0}, 0)
    call_ns = 0
    t0 = time.perf_counter_ns()
    for step in range(1, steps + 1):
        body()
        c0 = time.perf_counter_ns()
        log({"loss": 0.5 + step * 1e-6}, step)
        call_ns += time.perf_counter_ns() - c0
    loop_ns = time.perf_counter_ns() - t0
    close()
    return call_ns / 1e3 / steps, loop_ns / 1e3 / steps


def time_plain(steps: int, body: Callable[[], None]) -> float:
    """µs per step of the body alone."""
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        body()
    return (time.perf_counter_ns() - t0) / 1e3 / steps


WARMUP = 20


def make_body(kind: str) -> Callable[[], None]:
    """The step body: nothing, or one ~1 ms MLP training step on the CPU."""
    if kind == "empty":
        return lambda: None
    model = make_model(128, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = make_data(1, 64, 128)[0]

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()

    return step


def time_obsbus(
    module: Any | None, tmp: Path, steps: int, body: Callable[[], None], write_period: float
) -> tuple[float, float, float, float]:
    """(µs per log_metrics call, µs per step in all, startup s, drain s), steady state."""
    loggers = [] if module is None else [module.make_destination(tmp, write_period=write_period)]
    value = torch.tensor(0.5)
    call_ns = 0
    with Run(max_duration=f"{steps + WARMUP}ba", loggers=loggers, run_folder=tmp / "run") as run:
        log_metrics = run.logger.log_metrics
        batches = iter(run.train([[0]] * (steps + WARMUP)))
        s0 = time.perf_counter()
        for _ in range(WARMUP):
            next(batches)
            body()
            log_metrics({"bench/value": value})
        for destination in loggers:
            destination._writer.flush(timeout=300)  # started, and caught up
        startup = time.perf_counter() - s0
        t0 = time.perf_counter_ns()
        for _ in batches:
            body()
            c0 = time.perf_counter_ns()
            log_metrics({"bench/value": value})
            call_ns += time.perf_counter_ns() - c0
        loop_ns = time.perf_counter_ns() - t0
        d0 = time.perf_counter()
    drain = time.perf_counter() - d0
    return call_ns / 1e3 / steps, loop_ns / 1e3 / steps, startup, drain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=",".join(TRACKERS))
    parser.add_argument("--write-period", type=float, default=1.0)
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
    bodies = {kind: make_body(kind) for kind in ("empty", "mlp")}
    rows = []
    for name, module in modules.items():
        cols: dict[str, list[float]] = {}
        for r in range(args.rounds):
            tmp = root / f"{name}-{r}"
            tmp.mkdir()
            for kind, body in bodies.items():
                plain = time_plain(args.steps, body)
                direct, direct_step = time_direct(module, tmp / f"direct-{kind}", args.steps, body)
                cols.setdefault(f"direct {kind}", []).append(direct)
                cols.setdefault(f"direct added {kind}", []).append(direct_step - plain)
                bare_call, bare, _, _ = time_obsbus(None, tmp / f"bare-{kind}", args.steps, body, 0)
                cols.setdefault(f"bare call {kind}", []).append(bare_call)
                call, step, startup, drain = time_obsbus(
                    module, tmp / f"obsbus-{kind}", args.steps, body, args.write_period
                )
                cols.setdefault(f"bare {kind}", []).append(bare)
                cols.setdefault(f"added {kind}", []).append(step - bare)
                cols.setdefault(f"call {kind}", []).append(call)
                cols.setdefault("startup", []).append(startup)
                cols.setdefault("drain", []).append(drain)
        rows.append((name, {k: statistics.median(v) for k, v in cols.items()}))
    print(f"# Tracker destinations: training-thread cost ({started:%Y-%m-%d %H:%M} UTC)\n")
    print(
        f"{args.steps} steps x {args.rounds} rounds (medians), one scalar per call, log interval "
        f"1, write_period {args.write_period:g} s; load average {os.getloadavg()[0]:.2f} at the "
        f"end; torch {torch.__version__}.\n"
    )
    print(
        "| tracker | step | client direct: µs/call | client direct: added µs/step "
        "| obsbus `log_metrics`: µs/call (`Run` without it) | obsbus: added µs/step "
        "| `Run` alone µs/step | startup, s | drain at close, s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, m in rows:
        for kind in ("empty", "mlp"):
            print(
                f"| {name} | {kind} | {m[f'direct {kind}']:.1f} | {m[f'direct added {kind}']:.1f} "
                f"| {m[f'call {kind}']:.2f} ({m[f'bare call {kind}']:.2f}) "
                f"| {m[f'added {kind}']:.1f} | {m[f'bare {kind}']:.1f} | {m['startup']:.2f} "
                f"| {m['drain']:.2f} |"
            )


if __name__ == "__main__":
    main()
