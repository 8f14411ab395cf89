"""Two probes behind issue 20's findings, on bench_overhead's interleaved harness.

``body``: per variant, the median time of the step body (the torch step, with
``run.forward``/``run.loss``/``run.backward``) and of what runs outside it. A
monitor whose hooks run outside the body can still slow the body: that is the
cost of Python (and system calls) run between two torch steps.

``hooks``: what a hook costs that does nothing: an empty ``batch_end`` called
every batch (``mem+Empty``), empty ``after_train_batch`` and ``batch_end``
(``mem+Empty2``: the two every-batch hooks of SpeedMonitor and NaNMonitor), and
an empty ``batch_end`` gated at ``"10ba"`` (``mem+Gated``): the floor of a
monitor that must see every batch, and of one that must not.

``keep``: what an :class:`~obsbus.loggers.InMemoryLogger` costs when it keeps
every step's 0-d loss tensor (``keep``, what it does), when it keeps a float
instead (``drop``: the same appends, no tensor kept alive), and when it does
nothing (``noop``). One mode per process; run the three alternately.

Usage::

    .venv/bin/python bench/overhead_probes.py body --seed 3
    .venv/bin/python bench/overhead_probes.py hooks --seed 5
    for m in keep drop noop keep drop noop; do
        .venv/bin/python bench/overhead_probes.py keep --mode $m --seed 2
    done
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_overhead as b
import torch

from obsbus import Callback, LogInterval, at_interval
from obsbus.loggers import InMemoryLogger


class Empty(Callback):
    def batch_end(self, state: Any, logger: Any) -> None:
        pass


class Empty2(Empty):
    def after_train_batch(self, state: Any, logger: Any) -> None:
        pass


class Gated(Callback):
    def __init__(self) -> None:
        self.log_interval = LogInterval(f"{b.INTERVAL}ba", "Gated log_interval")

    @at_interval("log_interval")
    def batch_end(self, state: Any, logger: Any) -> None:
        pass


def _add_empty_variants() -> list[str]:
    names = []
    for name, cls in (("Empty", Empty), ("Empty2", Empty2), ("Gated", Gated)):
        b.MONITORS[name] = cls
        variant = f"mem+{name}"
        b.VARIANTS[variant] = lambda n, s, m=name: b.run_api(n, s, (m,), memory=True)
        b.OVER[variant] = "mem"
        names.append(variant)
    return names


def _rows(variants: list[str], cycles: int, seed: int) -> dict[str, dict[str, Any]]:
    torch.set_num_threads(1)
    times = b.interleave(variants, 50, cycles, 100, seed)
    rows = b.summarize(times, 50)
    for name, split in b.SPLITS.items():
        rows[name]["body"] = statistics.median(split.body) * 1e6
        rows[name]["out_med"] = statistics.median(split.outside) * 1e6
        rows[name]["out_mean"] = statistics.fmean(split.outside) * 1e6
    return rows


def _print(rows: dict[str, dict[str, Any]], label: str = "") -> None:
    print(
        "| variant | ratio bare | ratio over | body, median µs | outside, median µs | outside, mean µs |"
    )
    print("|---|---|---|---:|---:|---:|")
    for name, r in rows.items():
        over = f"{r['over_wall']:.3f}" if "over_wall" in r else ""
        print(
            f"| {label}`{name}` | {r['bare_wall']:.3f} | {over} | {r['body']:.1f} | "
            f"{r['out_med']:.1f} | {r['out_mean']:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("probe", choices=["body", "hooks", "keep"])
    parser.add_argument("--mode", choices=["keep", "drop", "noop"], default="keep")
    parser.add_argument("--cycles", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.probe == "body":
        variants = ["bare", "run", "mem", *(f"mem+{m}" for m in b.MONITORS), "stack"]
        _print(_rows(variants, args.cycles, args.seed))
        return
    if args.probe == "hooks":
        _print(_rows(["bare", "run", "mem", *_add_empty_variants()], args.cycles, args.seed))
        return
    original = InMemoryLogger.log_metrics
    if args.mode == "drop":

        def log_floats(self: InMemoryLogger, metrics: Any, step: int | None = None) -> None:
            original(self, dict.fromkeys(metrics, 0.0), step)

        InMemoryLogger.log_metrics = log_floats  # type: ignore[method-assign]
    elif args.mode == "noop":
        InMemoryLogger.log_metrics = lambda self, metrics, step=None: None  # type: ignore[method-assign]
    _print(_rows(["bare", "run", "mem"], args.cycles, args.seed), f"{args.mode}: ")


if __name__ == "__main__":
    main()
