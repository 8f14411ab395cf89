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

``ladder``: from ``floor`` up to ``run``, one piece of ``Run``'s per-step contract at a
time, each rung with the ones below it: ``+ts`` a new :class:`~obsbus.Timestamp` every
step (``to_next_batch``, as ``Run`` builds it); ``+state`` the state's batch fields
written and the seven events' ``handles`` lookups; ``+detach`` the loss detached and
kept; ``+calls`` the step body through three methods shaped like ``run.forward``,
``run.loss`` and ``run.backward`` (two ``handles`` lookups each). What is left between
the top rung and ``run`` is ``Run``'s own code around those pieces.

``least``: the least the default stack's work can cost with its contract kept: one
callback (``mem+Least``) doing only what the five monitors must do to log their keys at
``"10ba"``. Every batch, keep the 0-d loss (NaNMonitor checks every loss) and note the
batch's seconds and samples (SpeedMonitor's window); every 10th, one fused
``_foreach_norm`` over the gradients read with ``item()`` and combined by ``hypot``
(OptimizerMonitor's CPU path), one ``item()`` and ``isfinite`` per kept loss, the two
host readings (``pread`` of ``/proc/self/statm``, ``getrusage``), the learning rate, the
window's sums, and one ``log_metrics`` with the stack's keys. It merges five plug-ins
into one, so it is below what five separate ones can reach.

``keep``: what an :class:`~obsbus.loggers.InMemoryLogger` costs when it keeps
every step's 0-d loss tensor (``keep``, what it does), when it keeps a float
instead (``drop``: the same appends, no tensor kept alive), and when it does
nothing (``noop``). One mode per process; run the three alternately.

Usage::

    .venv/bin/python bench/overhead_probes.py body --seed 3
    .venv/bin/python bench/overhead_probes.py hooks --seed 5
    .venv/bin/python bench/overhead_probes.py ladder --seed 7
    .venv/bin/python bench/overhead_probes.py least --seed 8
    for m in keep drop noop keep drop noop; do
        .venv/bin/python bench/overhead_probes.py keep --mode $m --seed 2
    done
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_overhead as b
import torch

from obsbus import Callback, Event, LogInterval, Timestamp, at_interval
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


_PARTS = ("Speed", "NaN", "Memory", "LR", "Optimizer")


class Least(Callback):
    """The least work that logs the default stack's keys, in one plug-in (``least``).

    ``parts`` says which monitors' work it does (all five by default), ``log=False`` only
    the every-batch part. NaNMonitor logs nothing; its part is the check.
    """

    #: Each log step's parts, µs, over every instance (printed by ``least``).
    spent: ClassVar[dict[str, list[float]]] = {}

    def __init__(self, parts: tuple[str, ...] = _PARTS, log: bool = True) -> None:
        self.speed, self.nan, self.log = "Speed" in parts, "NaN" in parts, log
        self.memory, self.lr, self.norm = "Memory" in parts, "LR" in parts, "Optimizer" in parts
        self.losses: list[Any] = []
        self.seconds: list[float] = []
        self.samples: list[int] = []
        self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        self.page = os.sysconf("SC_PAGE_SIZE")
        if not self.nan:  # the engine then never calls it
            self.after_train_batch = super().after_train_batch  # type: ignore[method-assign]

    def after_train_batch(self, state: Any, logger: Any) -> None:
        self.losses.append(state.loss)

    def batch_end(self, state: Any, logger: Any) -> None:
        ts = state.timestamp
        if self.speed:
            self.seconds.append(ts._batch_wct)
            self.samples.append(state.batch_num_samples)
        if ts._batch % b.INTERVAL or not self.log:
            if len(self.seconds) > 200 or len(self.losses) > 20:
                del self.seconds[:-100], self.samples[:-100], self.losses[:-10]
            return
        ns, spent, metrics = time.perf_counter_ns, self.spent, {}
        t0 = ns()
        if self.norm:
            grads = [p.grad for p in state.model.parameters() if p.grad is not None]
            norm = math.hypot(*(n.item() for n in torch._foreach_norm(grads)))
            metrics["l2_norm/grad/global"] = norm
        t1 = ns()
        if self.nan:
            if not all(math.isfinite(loss.item()) for loss in self.losses):
                raise RuntimeError("a NaN loss")
            self.losses.clear()
        t2 = ns()
        if self.memory:
            rss = int(os.pread(self.fd, 128, 0).split()[1]) * self.page
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            metrics["memory/host_rss_mem"] = rss / 1e9
            metrics["memory/host_peak_rss_mem"] = peak / 1e9
        if self.lr:
            metrics["lr-SGD/group0"] = state.optimizers[0].param_groups[0]["lr"]
        t3 = ns()
        if self.speed:
            del self.seconds[:-100], self.samples[:-100]
            seconds, samples, wct = sum(self.seconds), sum(self.samples), ts._total_wct
            batches = len(self.seconds) / seconds
            metrics["throughput/batches_per_sec"] = batches
            metrics["throughput/samples_per_sec"] = samples / seconds
            metrics["throughput/device/batches_per_sec"] = batches
            metrics["throughput/device/samples_per_sec"] = samples / seconds
            metrics["time/train"] = metrics["time/total"] = wct / 3600
            metrics["time/val"] = metrics["time/eval"] = 0.0
        t4 = ns()
        if metrics:
            logger.log_metrics(metrics)
        t5 = ns()
        if self.norm and self.nan and self.memory and self.speed:  # the whole stack's
            for key, a, z in (("norm", t0, t1), ("losses", t1, t2), ("host and lr", t2, t3),
                              ("window", t3, t4), ("log_metrics", t4, t5)):  # fmt: skip
                spent.setdefault(key, []).append((z - a) / 1e3)


def _add_least() -> list[str]:
    """``mem+Least`` (all five), ``mem+LeastQuiet`` (its every-batch part), one per monitor."""
    made = {
        "mem+Least": lambda: Least(),
        "mem+LeastQuiet": lambda: Least(log=False),
        **{f"mem+Least{m}": (lambda m=m: Least((m,))) for m in _PARTS},
    }
    for variant, factory in made.items():
        name = variant.removeprefix("mem+")
        b.MONITORS[name] = factory
        b.VARIANTS[variant] = lambda n, s, m=name: b.run_api(n, s, (m,), memory=True)
        b.OVER[variant] = "mem"
    return list(made)


def _add_empty_variants() -> list[str]:
    names = []
    for name, cls in (("Empty", Empty), ("Empty2", Empty2), ("Gated", Gated)):
        b.MONITORS[name] = cls
        variant = f"mem+{name}"
        b.VARIANTS[variant] = lambda n, s, m=name: b.run_api(n, s, (m,), memory=True)
        b.OVER[variant] = "mem"
        names.append(variant)
    return names


class _Handles(dict):  # type: ignore[type-arg]
    """What ``Engine.handles`` is for a run with no plug-ins: every event maps to False."""


class _Lean:
    """The pieces of ``Run``'s per-step contract the ``ladder`` rungs add, one flag each."""

    def __init__(
        self, ts: bool, state: bool, detach: bool, calls: bool, late: bool = False
    ) -> None:
        self.ts, self.state, self.detach, self.calls = ts, state, detach, calls
        self.late = late  # the loss detached at the batch end, not in the body
        self.handles = _Handles(dict.fromkeys(Event, False))
        self.loss: Any = None
        self.outputs: Any = None
        self.batch: Any = None
        self.batch_num_samples = self.batch_num_tokens = 0
        self.batch_num_flops: Any = None
        self.parts: list[Any] = []

    # run.forward / run.loss / run.backward, shaped as Run's (two handles lookups each)
    def forward(self, fn: Any, *args: Any) -> Any:
        if self.handles[Event.BEFORE_FORWARD]:
            pass
        self.outputs = fn(*args)
        if self.handles[Event.AFTER_FORWARD]:
            pass
        return self.outputs

    def loss_of(self, fn: Any, *args: Any) -> Any:
        if self.handles[Event.BEFORE_LOSS]:
            pass
        self.loss = fn(*args)
        if self.handles[Event.AFTER_LOSS]:
            pass
        loss = self.loss
        self.parts.append((loss if self.late else loss.detach(), None))
        return loss

    def backward(self, loss: Any) -> None:
        if self.handles[Event.BEFORE_BACKWARD]:
            pass
        loss.backward()
        if self.handles[Event.AFTER_BACKWARD]:
            pass

    def train(self, data: list[Any], steps: int) -> Iterator[Any]:
        clock, handles, tensor = time.perf_counter, self.handles, torch.Tensor
        mark, seconds, batches, samples = clock(), 0.0, 0, 0
        stamp = Timestamp()
        e = Event

        def epoch() -> Iterator[Any]:
            yield from data

        while True:
            for batch in epoch():
                if self.state:
                    if handles[e.BEFORE_DATALOADER] or handles[e.AFTER_DATALOADER]:
                        pass
                    if type(batch) in (tuple, list) and batch and type(batch[0]) is tensor:
                        self.batch_num_samples, self.batch_num_tokens = batch[0].shape[0], 0
                        self.batch_num_flops, self.batch = None, batch
                    if handles[e.BATCH_START] or handles[e.BEFORE_TRAIN_BATCH]:
                        pass
                    self.loss, self.outputs, self.parts = None, None, []
                yield batch
                if self.detach and not self.calls:
                    self.loss = self.loss.detach()
                elif self.calls:
                    self.loss = self.parts[0][0].detach() if self.late else self.parts[0][0]
                if self.state and handles[e.AFTER_TRAIN_BATCH]:
                    pass
                now = clock()
                if self.ts:
                    stamp = stamp.to_next_batch(batch[0].shape[0], 0, now - mark)
                    mark = now
                    done = stamp._batch >= steps
                else:
                    seconds, mark = seconds + (now - mark), now
                    batches, samples = batches + 1, samples + batch[0].shape[0]
                    done = batches >= steps
                if self.state and (handles[e.BATCH_END] or handles[e.BATCH_CHECKPOINT]):
                    pass
                if done:
                    return


def _rung(ts: bool, state: bool, detach: bool, calls: bool, late: bool = False) -> Any:
    def variant(steps: int, split: b.Split) -> b.Step:
        job = b.Job.get()
        model, opt = job.model, job.opt
        lean = _Lean(ts, state, detach, calls, late)
        for i, (x, y) in enumerate(lean.train(job.data, steps)):
            split.enter()
            opt.zero_grad(set_to_none=True)
            if calls:
                out = lean.forward(model, x)
                loss = lean.loss_of(b.F.cross_entropy, out, y)
                lean.backward(loss)
            else:
                loss = b.F.cross_entropy(model(x), y)
                loss.backward()
                lean.loss = loss
            opt.step()
            if (i + 1) % b.INTERVAL == 0:
                loss.item()
            split.leave()
            yield

    return variant


def _add_ladder() -> list[str]:
    rungs = {
        "floor_lean": (False, False, False, False),
        "+ts": (True, False, False, False),
        "+state": (True, True, False, False),
        "+detach": (True, True, True, False),
        "+calls": (True, True, True, True),
        "+calls_late": (True, True, True, True, True),
    }
    for name, flags in rungs.items():
        b.VARIANTS[name] = _rung(*flags)
    return list(rungs)


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
    parser.add_argument("probe", choices=["body", "hooks", "ladder", "least", "keep"])
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
    if args.probe == "ladder":
        _print(_rows(["bare", "bare_b", "floor", *_add_ladder(), "run"], args.cycles, args.seed))
        return
    if args.probe == "least":
        variants = ["bare", "bare_b", "run", "mem", *_add_least(), "stack"]
        _print(_rows(variants, args.cycles, args.seed))
        parts = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in Least.spent.items())
        print(f"\n`mem+Least`'s log step, median µs in the loop: {parts}")
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
