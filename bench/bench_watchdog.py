"""Per-batch cost of :class:`~obsbus.callbacks.hang_watchdog.HangWatchdog`.

What is measured
----------------
The hang watchdog's promise: it costs nothing measurable per step. The
training thread pays one hook call per batch (``batch_end``: an integer
increment and an attribute store); a daemon thread wakes every
``poll_interval`` seconds to look at the counter.

1. obsbus's own time per step, no torch work: a ``Run`` loop whose body does
   nothing (timed from ``fit_start`` to close, not the ``Run``'s construction), ``--empty-steps`` batches a pass, in three variants interleaved
   pass by pass (the order turns every round, after a warm-up round):
   ``run`` (no callbacks), ``run_b`` (the same again: the A/A control),
   ``run+empty_hook`` (a callback whose ``batch_end`` does nothing: the floor
   of any per-batch hook) and ``run+watchdog`` (``HangWatchdog()``, the default 30 min timeout; its
   thread wakes every 5 s). ``added`` is the median over passes of the
   per-pass difference from ``run``, per step.
2. The same on a real CPU step (an MLP ``Linear(128, 256) - ReLU -
   Linear(256, 1)``, batch 64, SGD, ``mse_loss``, ``torch.set_num_threads(1)``,
   as in ``bench_loop.py``): ``run``, ``run_b``, ``run+watchdog``, and
   ``run+watchdog_fast`` (``timeout=1.0``: its thread wakes every 0.1 s, to
   see whether the thread's wake-ups show), ``--steps`` steps a pass; the
   median of per-round ratios against ``run``.
3. The hook alone: ``timeit`` of ``dog.batch_end(state, logger)``, and of
   ``engine.run_event(Event.BATCH_END)`` for an engine with the watchdog
   against one with no callbacks (the dispatch included).

   Then ``fit_start`` + ``fit_end`` of one watchdog: the thread's start and
   stop, paid once per fit.

Verdict: ``negligible`` when the watchdog's added time per step (1) is
within the A/A spread (``run_b`` against ``run``) or under 1 µs.

Run: ``.venv/bin/python bench/bench_watchdog.py`` (``--help`` for options;
about a minute). Imports only torch, obsbus and the standard library.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import subprocess
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import obsbus
from obsbus import Callback, Engine, Event, Logger, Run, State
from obsbus.callbacks.hang_watchdog import HangWatchdog

Batch = tuple[torch.Tensor, torch.Tensor]
Variant = Callable[[], list[Callback]]


class EmptyHook(Callback):
    """Any callback's floor: an empty ``batch_end``, dispatched by the engine."""

    def batch_end(self, state: State, logger: Logger) -> None:
        pass


EMPTY: dict[str, Variant] = {
    "run": list,
    "run_b": list,
    "run+empty_hook": lambda: [EmptyHook()],
    "run+watchdog": lambda: [HangWatchdog()],
}
TORCH: dict[str, Variant] = {
    **EMPTY,
    "run+watchdog_fast": lambda: [HangWatchdog(timeout=1.0)],
}


class Step:
    def __init__(self, steps: int) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(1)
        self.data: list[Batch] = [
            (torch.randn(64, 128, generator=gen), torch.randn(64, 1, generator=gen))
            for _ in range(steps)
        ]


def time_pass(
    callbacks: list[Callback], data: list[object], step: Step | None, folder: Path
) -> float:
    """Seconds for one fit over ``data``: ``fit_start`` to ``fit_end`` and close, not building
    the ``Run`` (its run record costs ~15 ms per plug-in class, the same with any callback)."""
    run = Run(
        max_duration=f"{len(data)}ba", callbacks=callbacks, run_folder=folder, run_name="bench"
    )
    gc.collect()
    start = time.perf_counter()
    with run:
        if step is None:
            for _ in run.train(data):
                pass
        else:
            model, opt = step.model, step.opt
            for x, y in run.train(data):
                opt.zero_grad(set_to_none=True)
                loss = F.mse_loss(model(x), y)
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                run.state.loss = loss
    return time.perf_counter() - start


def rounds(
    variants: dict[str, Variant],
    data: list[object],
    step: Step | None,
    n: int,
    repeats: int,
    folder: Path,
) -> dict[str, list[float]]:
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(n + 1):  # round 0 warms up
        order = names[r % len(names) :] + names[: r % len(names)]
        for _ in range(repeats):
            for name in order:
                t = time_pass(variants[name](), data, step, folder)
                if r:
                    times[name].append(t)
    return times


def report_added(times: dict[str, list[float]], steps: int) -> dict[str, float]:
    base = times["run"]
    print(f"{'variant':<20} {'median us/step':>15} {'min us/step':>12} {'added us/step':>14}")
    added: dict[str, float] = {}
    for name, ts in times.items():
        diffs = [(t - b) / steps * 1e6 for t, b in zip(ts, base, strict=True)]
        added[name] = statistics.median(diffs)
        print(
            f"{name:<20} {statistics.median(ts) / steps * 1e6:>15.2f} "
            f"{min(ts) / steps * 1e6:>12.2f} {added[name]:>+14.3f}"
        )
    return added


def report_ratios(times: dict[str, list[float]], steps: int) -> None:
    base = times["run"]
    print(f"{'variant':<20} {'median us/step':>15} {'min us/step':>12} {'ratio (median)':>15}")
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base, strict=True))
        print(
            f"{name:<20} {statistics.median(ts) / steps * 1e6:>15.1f} "
            f"{min(ts) / steps * 1e6:>12.1f} {ratio:>15.4f}"
        )


def hook_alone(number: int) -> None:
    state = State(run_name="bench")
    logger = Logger(state)
    dog = HangWatchdog()
    hook = timeit.repeat(lambda: dog.batch_end(state, logger), number=number, repeat=7)
    with_dog = Engine(state, logger, [dog])
    without = Engine(state, logger, [])
    run_with = timeit.repeat(lambda: with_dog.run_event(Event.BATCH_END), number=number, repeat=7)
    run_without = timeit.repeat(lambda: without.run_event(Event.BATCH_END), number=number, repeat=7)
    ns = 1e9 / number
    print(f"dog.batch_end(state, logger):            {min(hook) * ns:7.1f} ns (best of 7)")
    print(f"engine.run_event(BATCH_END), watchdog:   {min(run_with) * ns:7.1f} ns")
    print(f"engine.run_event(BATCH_END), nobody:     {min(run_without) * ns:7.1f} ns")
    added = (min(run_with) - min(run_without)) * ns
    print(f"dispatch + hook, added per batch:        {added:7.1f} ns")
    fits = []
    for _ in range(20):
        dog = HangWatchdog()
        start = time.perf_counter()
        dog.fit_start(state, logger)
        dog.fit_end(state, logger)
        fits.append(time.perf_counter() - start)
    print(
        f"fit_start + fit_end (thread start, stop): {statistics.median(fits) * 1e6:7.1f} us "
        "(median of 20; once per fit)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--empty-steps", type=int, default=5000)
    parser.add_argument("--empty-rounds", type=int, default=12)
    parser.add_argument("--empty-repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "?"
    print(
        f"bench_watchdog.py at {commit}, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} "
        f"UTC; Python {platform.python_version()}, torch {torch.__version__}, "
        f"obsbus {getattr(obsbus, '__version__', '?')}, {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(
            f"\n1. obsbus's own time, empty body, {args.empty_steps} steps a pass, "
            f"{args.empty_rounds} rounds x {args.empty_repeats}"
        )
        empty = rounds(
            EMPTY, [[0.0]] * args.empty_steps, None, args.empty_rounds, args.empty_repeats, folder
        )
        added = report_added(empty, args.empty_steps)
        print(f"\n2. a real CPU step, {args.steps} steps a pass, {args.rounds} rounds")
        step = Step(args.steps)
        real = rounds(TORCH, list(step.data), step, args.rounds, 1, folder)
        report_ratios(real, args.steps)
    print(f"\n3. the hook alone ({args.number} calls, best of 7)")
    hook_alone(args.number)
    spread = abs(added["run_b"])
    verdict = "negligible" if added["run+watchdog"] <= max(spread, 1.0) else "measurable"
    print(
        f"\nverdict: {verdict} (watchdog {added['run+watchdog']:+.3f} us/step; A/A "
        f"{added['run_b']:+.3f} us/step)"
    )


if __name__ == "__main__":
    main()
