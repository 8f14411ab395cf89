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
count x median. It is an estimate: the code is read, not instrumented. Rows
with no count are for reference (a piece no longer on the path, or one that
contains other rows). The generator row stands in for ``Run.train`` resuming
``Run.epoch`` with two plain generators of the same shape.

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
    # A Run that is built but never entered: its private per-step helpers only
    # need the state and the time mark. Closed at the end.
    helper_run = Run(run_name="bench", max_duration="1000000ba")
    helper_run._mark = time.perf_counter()

    def _epoch_like() -> Any:  # stands in for Run.epoch: one generator frame per step
        while True:
            yield batch

    def _train_like(inner: Any) -> Any:  # stands in for Run.train iterating epoch()
        for item in inner:  # noqa: UP028 - a for loop, as in Run.train, not yield from
            yield item

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
        "_BATCH_END": Event.BATCH_END,
        "unit": TimeUnit.BATCH,
        "run": helper_run,
        "gen": _train_like(_epoch_like()),
    }
    # (label, statement, times per step in a plain-body Run loop)
    # Counts as of the hot-path fixes (commit 9ef6766): Run looks Event members up
    # through module constants (`_BATCH_END = Event.BATCH_END`), not on the class.
    pieces: list[tuple[str, str, int]] = [
        ("`Event.BATCH_END` (enum member lookup; Run no longer does it)", "Event.BATCH_END", 0),
        ("`_BATCH_END` (module constant, what Run uses)", "_BATCH_END", 7),
        ("`event.value`", "event.value", 0),
        ("`engine.run_event(event)`, no handlers", "run_event(event)", 7),
        ("`Timestamp.to_next_batch(64, 0, dt)`", "ts.to_next_batch(64, 0, 1e-3)", 1),
        ("`State.is_done()` (max_duration in ba)", "state.is_done()", 1),
        ("`timestamp.raw(unit)` (inside `is_done`)", "ts.raw(unit)", 0),
        ("`Time(5, TimeUnit.BATCH)`", "Time(5, TimeUnit.BATCH)", 0),
        ("`Time(5, 'ba')` (str unit: validating path)", "Time(5, 'ba')", 0),
        ("`timestamp.batch` (property, builds a Time)", "ts.batch", 0),
        ("`default_num_samples((x, y))`", "num_samples(batch)", 1),
        ("`default_num_tokens((x, y))`", "num_tokens(batch)", 1),
        ("`run._elapsed()` (perf_counter, move the mark)", "run._elapsed()", 1),
        ("resume two nested generators (`train` -> `epoch`)", "next(gen)", 1),
        ("`logger.log_metrics({...})`, no destinations", "logger.log_metrics({'l': loss})", 0),
        ("`tensor.detach()`", "loss.detach()", 0),
        (
            "`run._end_batch()`, empty body (holds 3 run_event, to_next_batch, _elapsed)",
            "run._end_batch()",
            0,
        ),
        ("`run._set_batch(batch)` (holds the two counts)", "run._set_batch(batch)", 0),
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
    helper_run.close()

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
