"""What obsbus adds to a training step, resolved to ~1% on a noisy machine: the reference
method for every overhead claim (issue 20).

Why this method
---------------
On these VMs a core's speed drifts by 20-30% between processes and by several
percent within a minute, so timing variant A, then variant B, compares the
machine's moods, not the code. Here every variant lives in **one process**, each
with its own model, optimizer and data, written as a generator suspended after
every training step. The variants run in **alternating chunks** of ``--chunk``
steps (50), in a freshly shuffled order each cycle, for ``--cycles`` cycles (300),
and each chunk is timed with both ``time.perf_counter`` (wall) and
``time.process_time`` (this process's CPU time: what another tenant's load on the
core does not add). Drift then hits every variant alike. A variant's ratio is its
total time over ``bare``'s total; the spread is the 10th-90th percentile of the
per-cycle ratios (each cycle's chunk time over the same cycle's bare chunk), and
``--processes`` repeats the whole thing in fresh processes to show the spread
between them. ``bare_b`` is the same loop as ``bare``: the **A/A control**. A
ratio is resolved when it is further from 1 than ``bare_b`` is.

The job (issue 20's): an MLP 64 -> 256 -> 256 -> 10 (ReLU), batch 64,
cross-entropy, SGD with momentum 0.9, CPU, ``torch.set_num_threads(1)``, ~1 ms a
step, on 64 pre-generated batches iterated epoch after epoch. Every loop reads the
loss on the host every 10 steps (``loss.item()``), as a training script prints it.

Variants (``--variants`` picks; the default is all):

- ``bare``, ``bare_b``: plain PyTorch;
- ``run``: :class:`obsbus.Run` with no plug-ins, the README's loop
  (``run.forward``, ``run.loss``, ``run.backward``); ``run_plain``: the bare body
  inside ``run.train`` with ``run.state.loss = loss``;
- ``mem``: ``run`` plus an :class:`~obsbus.loggers.InMemoryLogger` (it gets the
  loss every step);
- ``mem+Speed``, ``mem+Memory``, ``mem+NaN``, ``mem+LR``, ``mem+Optimizer``: one
  default monitor alone at ``"10ba"``;
- ``stack``: all five at ``"10ba"`` plus the InMemoryLogger (issue 20's default stack);
- ``trainer``: :class:`obsbus.Trainer` with no plug-ins; ``trainer_stack``: with the stack.

Reported per variant: the wall and CPU ratios against ``bare`` (and, for the
plug-in variants, against ``run``: ``stack / run`` is the stack's own target),
µs a step, and the per-cycle spread. ``--hooks`` adds, from one more interleaved
pass, each plug-in hook's time per call on log steps (every 10th) and on the
others, timed inside the engine (item 2 of issue 20).

Run: ``.venv/bin/python bench/bench_overhead.py`` (~3 min with the defaults;
``--cycles 100`` for a quick look). Imports only torch, obsbus and the standard library.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

import obsbus
from obsbus import Callback, Event, Run, Trainer
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.loggers import InMemoryLogger

Batch = tuple[torch.Tensor, torch.Tensor]
Step = Iterator[None]
INTERVAL = 10
MONITORS: dict[str, Callable[[], Callback]] = {
    "Speed": lambda: SpeedMonitor(log_interval=f"{INTERVAL}ba"),
    "Memory": lambda: MemoryMonitor(log_interval=f"{INTERVAL}ba"),
    "NaN": lambda: NaNMonitor(check_interval=f"{INTERVAL}ba"),
    "LR": lambda: LRMonitor(log_interval=f"{INTERVAL}ba"),
    "Optimizer": lambda: OptimizerMonitor(log_interval=f"{INTERVAL}ba"),
}


class Job:
    """One variant's own model, optimizer and data (the same seeds for every variant)."""

    #: Set by ``--device``: where the model and the batches live.
    device = "cpu"

    def __init__(self, n_batches: int = 64, batch: int = 64) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 10),
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        gen = torch.Generator().manual_seed(1)
        self.data: list[Batch] = [
            (torch.randn(batch, 64, generator=gen), torch.randint(0, 10, (batch,), generator=gen))
            for _ in range(n_batches)
        ]
        if self.device != "cpu":
            self.model.to(self.device)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
            self.data = [(x.to(self.device), y.to(self.device)) for x, y in self.data]


# ------------------------------------------------------------------ variants as generators
def bare(steps: int) -> Step:
    job = Job()
    model, opt, data = job.model, job.opt, job.data
    n = len(data)
    for i in range(steps):
        x, y = data[i % n]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        if (i + 1) % INTERVAL == 0:
            loss.item()
        yield


def _plugins(monitors: tuple[str, ...], memory: bool) -> dict[str, Any]:
    return {
        "callbacks": [MONITORS[name]() for name in monitors],
        "loggers": [InMemoryLogger()] if memory else [],
    }


def run_api(steps: int, monitors: tuple[str, ...] = (), memory: bool = False) -> Step:
    job = Job()
    model, opt = job.model, job.opt
    kwargs = _plugins(monitors, memory)
    with Run(model=model, optimizers=opt, max_duration=f"{steps}ba", run_name="b", **kwargs) as run:
        for i, (x, y) in enumerate(run.train(job.data)):
            opt.zero_grad(set_to_none=True)
            out = run.forward(model, x)
            loss = run.loss(F.cross_entropy, out, y)
            run.backward(loss)
            opt.step()
            if (i + 1) % INTERVAL == 0:
                loss.item()
            yield


def run_plain(steps: int) -> Step:
    job = Job()
    model, opt = job.model, job.opt
    with Run(model=model, optimizers=opt, max_duration=f"{steps}ba", run_name="b") as run:
        for i, (x, y) in enumerate(run.train(job.data)):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            run.state.loss = loss
            if (i + 1) % INTERVAL == 0:
                loss.item()
            yield


class _ReadEvery(Callback):
    """Reads the loss every 10 steps in the Trainer, as the other loops do."""

    def batch_end(self, state: Any, logger: Any) -> None:
        if state.timestamp._batch % INTERVAL == 0 and state.loss is not None:
            state.loss.item()


def trainer(steps: int, monitors: tuple[str, ...] = (), memory: bool = False) -> Step:
    job = Job()
    kwargs = _plugins(monitors, memory)
    kwargs["callbacks"].append(_ReadEvery())
    t = Trainer(
        job.model,
        job.data,
        max_duration=f"{steps}ba",
        optimizers=job.opt,
        loss_fn=F.cross_entropy,
        device=Job.device,
        run_name="b",
        progress_bar=False,
        **kwargs,
    )
    # Trainer.fit's own body, suspended after each step.
    with t, t._run.fitting():
        for batch in t._run.train(t.train_dataloader):
            t._train_batch(batch)
            yield


STACK = tuple(MONITORS)
VARIANTS: dict[str, Callable[[int], Step]] = {
    "bare": bare,
    "bare_b": bare,
    "run": run_api,
    "run_plain": run_plain,
    "mem": lambda n: run_api(n, memory=True),
    **{f"mem+{m}": (lambda n, m=m: run_api(n, (m,), memory=True)) for m in MONITORS},
    "stack": lambda n: run_api(n, STACK, memory=True),
    "trainer": trainer,
    "trainer_stack": lambda n: trainer(n, STACK, memory=True),
}
#: What each variant's second ratio is against.
OVER = {
    **{f"mem+{m}": "mem" for m in MONITORS},
    "mem": "run",
    "stack": "run",
    "trainer_stack": "trainer",
}


# ------------------------------------------------------------------ the interleaved run
def interleave(
    names: list[str], chunk: int, cycles: int, warmup: int, seed: int
) -> dict[str, dict[str, list[float]]]:
    """Per variant, per clock, the time of each cycle's chunk (seconds)."""
    total = warmup + chunk * cycles
    gens = {name: VARIANTS[name](total) for name in names}
    for gen in gens.values():  # warm-up: build, first steps, caches
        for _ in range(warmup):
            next(gen)
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in names}
    order = list(names)
    rng = random.Random(seed)
    wall, cpu = time.perf_counter, time.process_time
    # On a GPU the steps are launched asynchronously: each chunk ends with its work done.
    sync = torch.cuda.synchronize if Job.device.startswith("cuda") else (lambda: None)
    for _ in range(cycles):
        rng.shuffle(order)
        for name in order:
            gen = gens[name]
            sync()
            w0, c0 = wall(), cpu()
            for _ in range(chunk):
                next(gen)
            sync()
            w1, c1 = wall(), cpu()
            times[name]["wall"].append(w1 - w0)
            times[name]["cpu"].append(c1 - c0)
    for gen in gens.values():  # run each to its end, so fit_end and close happen
        for _ in gen:
            pass
    return times


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(times: dict[str, dict[str, list[float]]], chunk: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, clocks in times.items():
        row: dict[str, Any] = {}
        for clock, ts in clocks.items():
            row[f"us_{clock}"] = sum(ts) / (len(ts) * chunk) * 1e6
            for ref_key, ref in (("bare", "bare"), ("over", OVER.get(name))):
                if ref is None or ref not in times:
                    continue
                base = times[ref][clock]
                per_cycle = [a / b for a, b in zip(ts, base, strict=True)]
                row[f"{ref_key}_{clock}"] = sum(ts) / sum(base)
                row[f"{ref_key}_{clock}_p10"] = _pct(per_cycle, 0.1)
                row[f"{ref_key}_{clock}_p90"] = _pct(per_cycle, 0.9)
        out[name] = row
    return out


# ------------------------------------------------------------------ hook timing (item 2)
class HookTimes:
    """Wraps every hook in an engine's dispatch table in a ``perf_counter_ns`` timer."""

    AFTER_COUNT = (Event.BATCH_END, Event.BATCH_CHECKPOINT)

    def __init__(self) -> None:
        self.ns: dict[tuple[str, str, bool], list[int]] = {}

    def instrument(self, run: Run) -> None:
        engine, state = run.engine, run.state
        table = engine._table
        for key, (cbs, dests, event, gate) in list(table.items()):
            after = event in self.AFTER_COUNT
            new_cbs = tuple(
                (cb, self._wrap(state, cb, event, hook, after), period) for cb, hook, period in cbs
            )
            new_dests = tuple(
                (d, self._wrap(state, d, event, hook, after), name, period)
                for d, hook, name, period in dests
            )
            table[key] = (new_cbs, new_dests, event, gate)

    def _wrap(
        self, state: Any, plugin: Any, event: Event, hook: Callable[..., None], after: bool
    ) -> Callable[..., None]:
        name = type(plugin).__name__
        log_key, quiet_key = (name, event.value, True), (name, event.value, False)
        self.ns.setdefault(log_key, [])
        self.ns.setdefault(quiet_key, [])
        ns = time.perf_counter_ns

        def timed(s: Any, logger: Any) -> None:
            step = state.timestamp._batch + (0 if after else 1)
            t0 = ns()
            hook(s, logger)
            self.ns[log_key if step % INTERVAL == 0 else quiet_key].append(ns() - t0)

        return timed


def hook_table(steps: int) -> list[str]:
    timer = HookTimes()
    original = Run.__enter__

    def entering(self: Run) -> Run:
        got = original(self)
        timer.instrument(self)
        return got

    Run.__enter__ = entering  # type: ignore[method-assign]
    try:
        for _ in run_api(steps, STACK, memory=True):
            pass
    finally:
        Run.__enter__ = original  # type: ignore[method-assign]
    log_steps = steps // INTERVAL
    quiet_steps = steps - log_steps
    lines = [
        "| plug-in | hook | µs/call, log step | µs/call, other steps | µs/step averaged |",
        "|---|---|---:|---:|---:|",
    ]
    rows: dict[tuple[str, str], tuple[float, float, float]] = {}
    for (plugin, hook, _), values in timer.ns.items():
        if not values or (plugin, hook) in rows:
            continue
        log_v = timer.ns.get((plugin, hook, True), [])
        quiet_v = timer.ns.get((plugin, hook, False), [])
        per_step = (sum(log_v) + sum(quiet_v)) / 1e3 / steps
        rows[(plugin, hook)] = (
            statistics.median(log_v) / 1e3 if log_v else float("nan"),
            statistics.median(quiet_v) / 1e3 if quiet_v else float("nan"),
            per_step,
        )
    for (plugin, hook), (log_us, quiet_us, per_step) in sorted(
        rows.items(), key=lambda kv: -kv[1][2]
    ):
        lines.append(f"| {plugin} | {hook} | {log_us:.2f} | {quiet_us:.2f} | {per_step:.2f} |")
    total = sum(r[2] for r in rows.values())
    lines.append(f"| all | | | | {total:.2f} |")
    lines.append(
        f"\n({steps} steps, {log_steps} log steps, {quiet_steps} others; medians per call)"
    )
    return lines


# ------------------------------------------------------------------ report
def table(results: list[dict[str, dict[str, Any]]], chunk: int, cycles: int) -> list[str]:
    names = list(results[0])
    lines = [
        "| variant | µs/step (wall) | ratio bare, wall | ratio bare, CPU | over | ratio over, wall | "
        "ratio over, CPU |",
        "|---|---:|---|---|---|---|---|",
    ]

    def cell(rows: list[dict[str, Any]], key: str) -> str:
        if key not in rows[0]:
            return ""
        vals = [r[key] for r in rows]
        lo = min(r[f"{key}_p10"] for r in rows)
        hi = max(r[f"{key}_p90"] for r in rows)
        ratios = " / ".join(f"{v:.3f}" for v in vals)
        return f"{ratios} ({lo:.3f}-{hi:.3f})"

    for name in names:
        rows = [r[name] for r in results]
        us = " / ".join(f"{r['us_wall']:.0f}" for r in rows)
        lines.append(
            f"| `{name}` | {us} | {cell(rows, 'bare_wall')} | {cell(rows, 'bare_cpu')} | "
            f"{OVER.get(name, '')} | {cell(rows, 'over_wall')} | {cell(rows, 'over_cpu')} |"
        )
    lines.append(
        f"\nOne value per process (total over bare's total), then the 10th-90th percentile "
        f"of the per-cycle ratios over all processes in brackets; {cycles} cycles of {chunk} "
        "steps per variant per process."
    )
    return lines


def _child(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    torch.set_num_threads(1)
    Job.device = args.device
    gc.collect()
    times = interleave(args.variants, args.chunk, args.cycles, args.warmup, args.seed)
    return summarize(times, args.chunk)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the same job on a GPU)")
    parser.add_argument("--hooks", type=int, default=0, metavar="STEPS", help="hook table steps")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if "bare" not in args.variants:
        parser.error("--variants must include bare (every ratio is against it)")
    if args.child:
        print(json.dumps(_child(args)))
        return
    results = []
    for i in range(args.processes):
        if args.processes == 1:
            results.append(_child(args))
            continue
        cmd = [sys.executable, __file__, "--child", "--seed", str(args.seed + i)]
        cmd += ["--chunk", str(args.chunk), "--cycles", str(args.cycles)]
        cmd += ["--warmup", str(args.warmup), "--device", args.device]
        cmd += ["--variants", *args.variants]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(
        f"obsbus {obsbus.__version__}, torch {torch.__version__}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    print("\n".join(table(results, args.chunk, args.cycles)))
    if args.hooks:
        torch.set_num_threads(1)
        Job.device = args.device
        print()
        print("\n".join(hook_table(args.hooks)))


if __name__ == "__main__":
    main()
