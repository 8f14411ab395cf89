"""What obsbus adds to a training step, resolved to ~1% on a noisy machine: the reference
method for every overhead claim (issue 20).

Why this method
---------------
On these VMs a core's speed drifts by 20-30% between processes and by several
percent within a minute, so timing variant A, then variant B, compares the
machine's moods, not the code. Here every variant lives in **one process**, written
as a generator suspended after every training step. The variants run in
**alternating chunks** of ``--chunk`` steps (50), in a freshly shuffled order each
cycle, for ``--cycles`` cycles (300), and each chunk is timed with both
``time.perf_counter`` (wall) and ``time.process_time`` (this process's CPU time).
Drift then hits every variant alike. A variant's ratio is the **median of its
per-cycle ratios** (each cycle's chunk time over the same cycle's ``bare`` chunk): a
burst of another tenant's load slows one chunk, which moves a total but not a median.
The spread is the 10th-90th percentile of the per-cycle ratios, and ``--processes``
repeats the whole thing in fresh processes to show the spread between them.
``bare_b`` is the same loop as ``bare``: the **A/A control**. A ratio is resolved when
it is further from 1 than ``bare_b`` is.

By default every variant trains **one shared** model, optimizer and data set, so
every variant's tensors sit in the same places in memory (which stay put for the whole
process). On 2026-12-03, three processes each: A/A 0.998-1.000 and ``floor``
0.999-1.004 shared, against 0.994-0.997 and 0.994-1.015 with a job each
(``--own-jobs``). Nothing in obsbus registers hooks on a model or optimizer, and the
harness checks that none did.

Each variant also times, step by step, what it spends **outside its step body**
(obsbus's own code and the generator step every variant pays) and the body itself:
Python run between two torch steps costs several times what ``timeit`` says, and
code outside the body can slow the body after it, so both are reported.

The job (issue 20's): an MLP 64 -> 256 -> 256 -> 10 (ReLU), batch 64,
cross-entropy, SGD with momentum 0.9, CPU, ``torch.set_num_threads(1)``, ~1 ms a
step, on 64 pre-generated batches iterated epoch after epoch. Every loop reads the
loss on the host every 10 steps (``loss.item()``), as a training script prints it.

Variants (``--variants`` picks; the default is all):

- ``bare``, ``bare_b``: plain PyTorch;
- ``floor``: the least a generator-based run can do per step, written inline (time the
  step, count the batch and its samples, check for the end, two generator levels);
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

    #: Set by ``--own-jobs``: each variant builds its own job (else they share one).
    own = False
    _shared: Job | None = None

    @classmethod
    def get(cls) -> Job:
        """The job a variant trains: the one shared by every variant, unless ``--own-jobs``."""
        if cls.own:
            return cls()
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def check_no_hooks(self) -> None:
        """A shared job must stay plain: a hook one variant put on it would cost them all."""
        hooks = [
            name
            for module in self.model.modules()
            for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
            if getattr(module, name)
        ]
        hooks += [
            h
            for h in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")
            if getattr(self.opt, h, None)
        ]
        if hooks:
            raise RuntimeError(
                f"a variant registered hooks on the shared job ({hooks}): rerun with --own-jobs"
            )


class Split:
    """Times what a variant spends outside its step body (obsbus's own time, plus the
    generator step every variant pays) and inside it, step by step."""

    def __init__(self) -> None:
        self.outside: list[float] = []
        self.body: list[float] = []
        self._left: float | None = None
        self._entered = 0.0

    def enter(self) -> None:
        now = time.perf_counter()
        if self._left is not None:
            self.outside.append(now - self._left)
        self._entered = now

    def leave(self) -> None:
        self._left = now = time.perf_counter()
        self.body.append(now - self._entered)

    def reset(self) -> None:
        """Forget the warm-up."""
        self.outside.clear()
        self.body.clear()
        self._left = None

    def pause(self) -> None:
        """The generator is suspended between chunks: that gap is not the variant's."""
        self._left = None


#: Per variant, its Split (filled by the generators; one per process).
SPLITS: dict[str, Split] = {}


# ------------------------------------------------------------------ variants as generators
def _step(job: Job, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The step body every bare-bodied variant runs."""
    job.opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(job.model(x), y)
    loss.backward()  # type: ignore[no-untyped-call]
    job.opt.step()
    return loss


def bare(steps: int, split: Split) -> Step:
    job = Job.get()
    data = job.data
    n = len(data)
    for i in range(steps):
        split.enter()
        x, y = data[i % n]
        loss = _step(job, x, y)
        if (i + 1) % INTERVAL == 0:
            loss.item()
        split.leave()
        yield


def floor(steps: int, split: Split) -> Step:
    """The least any generator-based run can do per step, written inline: time the step,
    count the batch and its samples, check for the end, and two generator levels (train and
    epoch), as ``Run`` has. No events, no timestamp object, no state."""
    job = Job.get()

    def train(data: list[Batch]) -> Iterator[Batch]:
        clock = time.perf_counter
        mark, seconds, batches, samples = clock(), 0.0, 0, 0

        def epoch() -> Iterator[Batch]:
            yield from data

        while True:
            for batch in epoch():
                yield batch
                now = clock()
                seconds, mark = seconds + (now - mark), now
                batches, samples = batches + 1, samples + batch[0].shape[0]
                if batches >= steps:
                    return

    for i, (x, y) in enumerate(train(job.data)):
        split.enter()
        loss = _step(job, x, y)
        if (i + 1) % INTERVAL == 0:
            loss.item()
        split.leave()
        yield


def _plugins(monitors: tuple[str, ...], memory: bool) -> dict[str, Any]:
    return {
        "callbacks": [MONITORS[name]() for name in monitors],
        "loggers": [InMemoryLogger()] if memory else [],
    }


def run_api(steps: int, split: Split, monitors: tuple[str, ...] = (), memory: bool = False) -> Step:
    job = Job.get()
    model, opt = job.model, job.opt
    kwargs = _plugins(monitors, memory)
    with Run(model=model, optimizers=opt, max_duration=f"{steps}ba", run_name="b", **kwargs) as run:
        for i, (x, y) in enumerate(run.train(job.data)):
            split.enter()
            opt.zero_grad(set_to_none=True)
            out = run.forward(model, x)
            loss = run.loss(F.cross_entropy, out, y)
            run.backward(loss)
            opt.step()
            if (i + 1) % INTERVAL == 0:
                loss.item()
            split.leave()
            yield


def run_plain(steps: int, split: Split) -> Step:
    job = Job.get()
    with Run(model=job.model, optimizers=job.opt, max_duration=f"{steps}ba", run_name="b") as run:
        for i, (x, y) in enumerate(run.train(job.data)):
            split.enter()
            loss = _step(job, x, y)
            run.state.loss = loss
            if (i + 1) % INTERVAL == 0:
                loss.item()
            split.leave()
            yield


def trainer(steps: int, split: Split, monitors: tuple[str, ...] = (), memory: bool = False) -> Step:
    job = Job.get()
    kwargs = _plugins(monitors, memory)
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
    # Trainer.fit's own body, suspended after each step. The body here is the Trainer's
    # whole batch (its own code included): "outside" is only its Run's loop.
    with t, t._run.fitting():
        for i, batch in enumerate(t._run.train(t.train_dataloader)):
            split.enter()
            t._train_batch(batch)
            if (i + 1) % INTERVAL == 0:  # the loss read the other loops make
                t.state.loss.item()
            split.leave()
            yield


STACK = tuple(MONITORS)
VARIANTS: dict[str, Callable[[int, Split], Step]] = {
    "bare": bare,
    "bare_b": bare,
    "floor": floor,
    "run": run_api,
    "run_plain": run_plain,
    "mem": lambda n, s: run_api(n, s, memory=True),
    **{f"mem+{m}": (lambda n, s, m=m: run_api(n, s, (m,), memory=True)) for m in MONITORS},
    "stack": lambda n, s: run_api(n, s, STACK, memory=True),
    "trainer": trainer,
    "trainer_stack": lambda n, s: trainer(n, s, STACK, memory=True),
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
    SPLITS.clear()
    SPLITS.update({name: Split() for name in names})
    gens = {name: VARIANTS[name](total, SPLITS[name]) for name in names}
    for name, gen in gens.items():  # warm-up: build, first steps, caches
        for _ in range(warmup):
            next(gen)
        SPLITS[name].reset()
    if not Job.own and Job._shared is not None:
        Job._shared.check_no_hooks()
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
            SPLITS[name].pause()
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
                # The median of the per-cycle ratios: a burst of another tenant's load
                # slows one chunk, which moves a total but not a median (A/A: total
                # 0.977-1.010, median 0.997-1.003 in the same runs; bench/RESULTS.md).
                row[f"{ref_key}_{clock}"] = statistics.median(per_cycle)
                row[f"{ref_key}_{clock}_total"] = sum(ts) / sum(base)
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
        for _ in run_api(steps, Split(), STACK, memory=True):
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
        f"\nOne value per process (the median of the per-cycle ratios: each cycle's chunk "
        f"time over the same cycle's reference chunk), then the 10th-90th percentile of the "
        f"per-cycle ratios over all processes in brackets; {cycles} cycles of {chunk} "
        "steps per variant per process. Total time over the reference's total, wall: "
        + "; ".join(
            f"{name} " + " / ".join(f"{r[name]['bare_wall_total']:.3f}" for r in results)
            for name in names
            if name != "bare"
        )
        + "."
    )
    lines += [
        "",
        "| variant | outside the body, µs/step (median) | outside, mean | body, median | "
        "body - bare's body, median |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in names:
        rows = [r[name] for r in results]
        if "outside_med" not in rows[0]:
            continue
        bare_body = [r["bare"]["body_med"] for r in results]

        def per_process(key: str, rows: list[dict[str, Any]] = rows) -> str:
            return " / ".join(f"{r[key]:.1f}" for r in rows)

        extra = " / ".join(
            f"{r['body_med'] - b:+.1f}" for r, b in zip(rows, bare_body, strict=True)
        )
        lines.append(
            f"| `{name}` | {per_process('outside_med')} | {per_process('outside_mean')} | "
            f"{per_process('body_med')} | {extra} |"
        )
    lines.append(
        "\nOutside the body: from the end of one step body to the start of the next (the "
        "loop's own code: obsbus's, the generator step every variant pays, and on log steps "
        "the monitors'); body: the step body itself (for the Trainer, its whole batch)."
    )
    return lines


def _child(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    torch.set_num_threads(1)
    Job.device = args.device
    gc.collect()
    Job.own = args.own_jobs
    times = interleave(args.variants, args.chunk, args.cycles, args.warmup, args.seed)
    rows = summarize(times, args.chunk)
    for name, split in SPLITS.items():
        rows[name]["outside_med"] = statistics.median(split.outside) * 1e6
        rows[name]["outside_mean"] = statistics.fmean(split.outside) * 1e6
        rows[name]["body_med"] = statistics.median(split.body) * 1e6
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the same job on a GPU)")
    parser.add_argument(
        "--own-jobs",
        action="store_true",
        help="each variant trains its own model (default: all train one shared model)",
    )
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
        cmd += ["--own-jobs"] if args.own_jobs else []
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
