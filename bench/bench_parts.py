"""Where ``Run``'s per-step time goes: the pieces of its bookkeeping, one by one.

What is measured
----------------
Every training step under :class:`obsbus.Run` (no callbacks, no loggers)
does the same bookkeeping in ``Run.epoch`` and ``Run._end_batch``. This
script times each piece of it in isolation with :mod:`timeit` (``--number``
calls per repeat, ``--repeat`` repeats; the median and the minimum per call
are reported, in ns, with the garbage collector off as :mod:`timeit` does),
then times the whole thing: ``for _ in run.train(data): pass`` over
``--steps`` pre-built batches (median of the repeats), so the pieces can be
compared with the total.

The per-step count of each piece (``x/step``) is read off ``obsbus/run.py``
for a plain loop body (``model(x)``, loss, backward, step, without
``run.forward``/``run.loss``/``run.backward``); ``est. ns/step`` is
count x median. It is an estimate: the code is read, not instrumented.

Run: ``python bench/bench_parts.py`` (``--help`` for options). Imports only
torch, obsbus and the standard library.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import timeit
from typing import Any

import torch

import obsbus
from obsbus import Engine, Event, Logger, Run, State
from obsbus._batch import default_num_samples, default_num_tokens
from obsbus.time import Time, Timestamp, TimeUnit


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per repeat")
    parser.add_argument("--repeat", type=int, default=7, help="repeats; median and min reported")
    parser.add_argument("--steps", type=int, default=2000, help="steps of the whole-Run loop")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    state = State(run_name="bench", max_duration="1000000ba")
    logger = Logger(state, [])
    engine = Engine(state, logger, [])
    ts = Timestamp().to_next_batch(64, 0, 1e-3)
    batch = (torch.randn(64, 128), torch.randn(64, 1))
    loss = torch.randn(()).requires_grad_() * 2
    env: dict[str, Any] = {
        "Event": Event,
        "event": Event.BATCH_END,
        "run_event": engine.run_event,
        "ts": ts,
        "state": state,
        "Time": Time,
        "TimeUnit": TimeUnit,
        "batch": batch,
        "num_samples": default_num_samples,
        "num_tokens": default_num_tokens,
        "logger": logger,
        "loss": loss,
    }
    # (label, statement, times per step in a plain-body Run loop)
    pieces: list[tuple[str, str, int]] = [
        ("`Event.BATCH_END` (enum member lookup)", "Event.BATCH_END", 8),
        ("`event.value`", "event.value", 0),
        ("`engine.run_event(event)`, no handlers", "run_event(event)", 7),
        ("`Timestamp.to_next_batch(64, 0, dt)`", "ts.to_next_batch(64, 0, 1e-3)", 1),
        ("`State.is_done()` (max_duration in ba)", "state.is_done()", 1),
        ("`Time(5, TimeUnit.BATCH)`", "Time(5, TimeUnit.BATCH)", 0),
        ("`timestamp.batch` (property, builds a Time)", "ts.batch", 0),
        ("`default_num_samples((x, y))`", "num_samples(batch)", 1),
        ("`default_num_tokens((x, y))`", "num_tokens(batch)", 1),
        ("`logger.log_metrics({...})`, no destinations", "logger.log_metrics({'l': loss})", 0),
        ("`tensor.detach()`", "loss.detach()", 0),
    ]
    rows = []
    for label, stmt, per_step in pieces:
        timer = timeit.Timer(stmt, globals=env)
        timer.timeit(min(args.number, 1000))  # warm up
        per_call = [t / args.number * 1e9 for t in timer.repeat(args.repeat, args.number)]
        med = statistics.median(per_call)
        rows.append((label, med, min(per_call), per_step, med * per_step))

    data = [batch] * args.steps
    totals = []
    for _ in range(args.repeat):
        t0 = time.perf_counter_ns()
        with Run(max_duration=f"{args.steps}ba", run_name="bench") as run:
            for _ in run.train(data):
                pass
        totals.append((time.perf_counter_ns() - t0) / args.steps)

    print("# Pieces of `Run`'s per-step bookkeeping\n")
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"obsbus {obsbus.__version__}; {args.number:,} calls x {args.repeat} repeats.\n"
    )
    print("| piece | median ns/call | min ns/call | x/step | est. ns/step |")
    print("|---|---:|---:|---:|---:|")
    for label, med, low, per_step, est in rows:
        est_s = f"{est:,.0f}" if per_step else ""
        print(f"| {label} | {med:,.0f} | {low:,.0f} | {per_step or ''} | {est_s} |")
    est_total = sum(r[4] for r in rows)
    print(f"| **sum of the pieces above** | | | | **{est_total:,.0f}** |")
    print(
        f"| **whole `Run` loop, empty body** ({args.steps} steps, median) "
        f"| {statistics.median(totals):,.0f} | {min(totals):,.0f} | 1 "
        f"| {statistics.median(totals):,.0f} |"
    )


if __name__ == "__main__":
    main()
