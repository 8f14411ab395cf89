"""Per-step overhead of obsbus on a small CPU training loop.

What is measured
----------------
A small MLP, ``Linear(in, hidden) - ReLU - Linear(hidden, 1)`` (defaults
128 -> 256 -> 1, batch 64; about 1 ms a step on one core of a 2 GHz Xeon),
trained with SGD and ``mse_loss`` on CPU with ``torch.set_num_threads(1)``.
The data are pre-generated as a list of ``(x, y)`` tensor pairs, so the
"dataloader" costs nothing. Four variants run the same ``--steps`` steps:

- ``bare``: a plain PyTorch loop (``zero_grad(set_to_none=True)``,
  ``model(x)``, ``mse_loss``, ``backward``, ``step``);
- ``run``: the same body under ``with obsbus.Run(...) as run:
  for x, y in run.train(data):`` with no callbacks and no loggers;
- ``run_api``: as ``run``, but through ``run.forward(model, x)``,
  ``run.loss(mse_loss, out, y)`` and ``run.backward(loss)``;
- ``trainer``: ``obsbus.Trainer(model, data, ..., loss_fn=mse_loss).fit()``.

Each variant owns its model and optimizer (same initial weights). The
variants are interleaved round by round (bare, run, run_api, trainer, bare,
...) for ``--rounds`` rounds after one short warm-up round; a round times the
whole loop (for the obsbus variants including building the ``Run``/``Trainer``
and closing it) with :func:`time.perf_counter_ns` and divides by the steps.
Reported per variant: the median and minimum per-step time, the ratio of
medians against ``bare`` measured in the same process, the median of the
per-round ratios (each round's variant time over the same round's bare time,
which cancels slow drift of a noisy machine), and the ratio of the minima
(the least-disturbed rounds).

Two more rows isolate obsbus's own cost, with no torch work in the step
(so they are far less noisy than a difference of two ~1 ms times):

- ``run_empty``: ``for batch in run.train(data): pass``;
- ``run_api_empty``: the same with ``run.forward``/``run.loss``/``run.backward``
  around functions that do nothing.

Their per-step time is the bookkeeping obsbus adds to every step.

The target: ``Run`` with no callbacks adds under 2% to a ~1 ms step (the
``run`` row's ratio under 1.02). On a noisy machine that ratio can swing by
more than 2% from run to run, so the verdict also uses ``run_empty``: that
pure-Python time is paid on every step on top of the torch work, so it is a
lower bound on what ``Run`` adds; when it alone is over 2%, the target is
missed.

``--controls`` adds two control variants to the rotation: ``bare_b``, the
bare loop again (an A/A comparison: how far two identical loops differ on
this machine), and ``bare_busy``, the bare loop plus pure-Python integer
additions calibrated to last as long as ``run_empty`` (``busy_alone`` row):
how much that much Python work, with no obsbus in it, costs between torch
steps.

``--variants run,bare_b`` times only those torch variants (and ``bare``), so
more rounds fit in the same time; ``--rotate`` rotates the order of the
variants every round, so that no variant always runs right after ``bare``.

``--profile`` additionally runs the ``run_api_empty`` loop under
:mod:`cProfile` and prints the functions where the time goes.

Run: ``python bench/bench_loop.py`` (``--help`` for options). Imports only
torch, obsbus and the standard library.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import platform
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import obsbus
from obsbus import Run, Trainer

TARGET_RATIO = 1.02

Batch = tuple[torch.Tensor, torch.Tensor]


def make_model(in_features: int, hidden: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(in_features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
    )


def make_data(steps: int, batch: int, in_features: int, seed: int = 1) -> list[Batch]:
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, in_features, generator=gen), torch.randn(batch, 1, generator=gen))
        for _ in range(steps)
    ]


class Setup:
    """A model and its optimizer, kept across rounds."""

    def __init__(self, in_features: int, hidden: int, lr: float) -> None:
        self.model = make_model(in_features, hidden)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr)


# ---------------------------------------------------------------- variants
def loop_bare(s: Setup, data: list[Batch]) -> None:
    model, opt = s.model, s.opt
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.mse_loss(out, y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()


def loop_run(s: Setup, data: list[Batch]) -> None:
    model, opt = s.model, s.opt
    with Run(model=model, optimizers=opt, max_duration=f"{len(data)}ba", run_name="bench") as run:
        for x, y in run.train(data):
            opt.zero_grad(set_to_none=True)
            out = model(x)
            loss = F.mse_loss(out, y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()


def loop_run_api(s: Setup, data: list[Batch]) -> None:
    model, opt = s.model, s.opt
    with Run(model=model, optimizers=opt, max_duration=f"{len(data)}ba", run_name="bench") as run:
        for x, y in run.train(data):
            opt.zero_grad(set_to_none=True)
            out = run.forward(model, x)
            loss = run.loss(F.mse_loss, out, y)
            run.backward(loss)
            opt.step()


def loop_trainer(s: Setup, data: list[Batch]) -> None:
    with Trainer(
        s.model,
        data,
        max_duration=f"{len(data)}ba",
        optimizers=s.opt,
        loss_fn=F.mse_loss,
        device="cpu",
        run_name="bench",
    ) as trainer:
        trainer.fit()


class _FakeLoss:
    """Stands in for a loss tensor: ``detach`` and ``backward`` do nothing."""

    def detach(self) -> _FakeLoss:
        return self

    def backward(self) -> None:
        pass


_FAKE_LOSS = _FakeLoss()


def _identity(x: Any) -> Any:
    return x


def _fake_loss(out: Any, y: Any) -> _FakeLoss:
    return _FAKE_LOSS


def loop_run_empty(s: Setup, data: list[Batch]) -> None:
    with Run(model=s.model, optimizers=s.opt, max_duration=f"{len(data)}ba", run_name="b") as run:
        for _ in run.train(data):
            pass


def loop_run_api_empty(s: Setup, data: list[Batch]) -> None:
    with Run(model=s.model, optimizers=s.opt, max_duration=f"{len(data)}ba", run_name="b") as run:
        for x, y in run.train(data):
            out = run.forward(_identity, x)
            loss = run.loss(_fake_loss, out, y)
            run.backward(loss)


def busy(n: int) -> int:
    """Pure-Python work with no obsbus and no torch in it: ``n`` integer additions."""
    total = 0
    for i in range(n):
        total += i
    return total


class BusyWork:
    """``busy(n)`` with ``n`` calibrated so that one call lasts about ``seconds``."""

    def __init__(self, seconds: float) -> None:
        calls, probe = 200, 1000
        best = min(self._time(probe, calls) for _ in range(5))
        self.n = max(1, round(probe * seconds / best))

    @staticmethod
    def _time(n: int, calls: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            busy(n)
        return (time.perf_counter_ns() - t0) / 1e9 / calls


def make_bare_busy(work: BusyWork) -> Callable[[Setup, list[Batch]], None]:
    def loop_bare_busy(s: Setup, data: list[Batch]) -> None:
        model, opt, n = s.model, s.opt, work.n
        for x, y in data:
            opt.zero_grad(set_to_none=True)
            out = model(x)
            loss = F.mse_loss(out, y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            busy(n)

    return loop_bare_busy


def make_busy_alone(work: BusyWork) -> Callable[[Setup, list[Batch]], None]:
    def loop_busy_alone(s: Setup, data: list[Batch]) -> None:
        n = work.n
        for _ in data:
            busy(n)

    return loop_busy_alone


VARIANTS: dict[str, Callable[[Setup, list[Batch]], None]] = {
    "bare": loop_bare,
    "run": loop_run,
    "run_api": loop_run_api,
    "trainer": loop_trainer,
}
EMPTY_VARIANTS: dict[str, Callable[[Setup, list[Batch]], None]] = {
    "run_empty": loop_run_empty,
    "run_api_empty": loop_run_api_empty,
}


def timed(fn: Callable[[Setup, list[Batch]], None], s: Setup, data: list[Batch]) -> float:
    """Seconds per step of one call of ``fn`` (gc collected before, left on)."""
    gc.collect()
    t0 = time.perf_counter_ns()
    fn(s, data)
    return (time.perf_counter_ns() - t0) / 1e9 / len(data)


def profile_run(data: list[Batch], s: Setup, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    loop_run_api_empty(s, data)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds; medians reported")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--in-features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile the run_api_empty loop"
    )
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument(
        "--controls",
        action="store_true",
        help="add control variants: bare_b (a second bare loop, A/A) and bare_busy "
        "(bare + pure-Python work as long as run_empty's bookkeeping)",
    )
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated subset of the torch variants to time (run, run_api, trainer, "
        "and with --controls bare_b, bare_busy); bare always runs. Fewer variants leave "
        "room for more rounds, which tightens the per-round ratios. Default: all",
    )
    parser.add_argument(
        "--rotate",
        action="store_true",
        help="rotate the order of the variants every round (default: the same order every "
        "round, bare first), so that no variant always runs right after bare",
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    data = make_data(args.steps, args.batch, args.in_features)
    variants, empty_variants = dict(VARIANTS), dict(EMPTY_VARIANTS)
    setups = {
        name: Setup(args.in_features, args.hidden, args.lr)
        for name in [*variants, *empty_variants, "bare_b", "bare_busy", "busy_alone"]
    }
    warm = data[: max(1, min(200, args.steps // 10))]
    work = None
    if args.controls:
        # Calibrate the busy work to the bookkeeping of an empty Run loop.
        loop_run_empty(setups["run_empty"], warm)
        bookkeeping = min(timed(loop_run_empty, setups["run_empty"], data) for _ in range(5))
        work = BusyWork(bookkeeping)
        variants["bare_b"] = loop_bare
        variants["bare_busy"] = make_bare_busy(work)
        empty_variants["busy_alone"] = make_busy_alone(work)
    if args.variants is not None:
        wanted = {name.strip() for name in args.variants.split(",") if name.strip()}
        unknown = wanted - set(variants)
        if unknown:
            parser.error(
                f"unknown variant(s) {', '.join(sorted(unknown))}; choose from "
                f"{', '.join(variants)} (bare_b and bare_busy need --controls)"
            )
        variants = {name: fn for name, fn in variants.items() if name == "bare" or name in wanted}

    # Warm-up: every variant once on a slice of the data.
    for name, fn in {**variants, **empty_variants}.items():
        fn(setups[name], warm)

    times: dict[str, list[float]] = {name: [] for name in [*variants, *empty_variants]}
    order = list(variants)
    for round_index in range(args.rounds):
        if args.rotate:  # each variant takes each place in the rotation in turn
            shift = round_index % len(order)
            order = [*list(variants)[shift:], *list(variants)[:shift]]
        for name in order:
            times[name].append(timed(variants[name], setups[name], data))
        for name, fn in empty_variants.items():
            times[name].append(timed(fn, setups[name], data))

    bare = times["bare"]
    bare_med = statistics.median(bare)
    print("# obsbus training-loop overhead\n")
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"obsbus {obsbus.__version__}; MLP {args.in_features}->{args.hidden}->1, "
        f"batch {args.batch}, SGD, CPU, torch threads {args.threads}; "
        f"{args.steps} steps x {args.rounds} rounds, interleaved.\n"
    )
    print(f"Bare PyTorch step (median): **{bare_med * 1e6:.0f} µs**.\n")
    print(
        "| variant | median µs/step | min µs/step | ratio vs bare (medians) "
        "| median per-round ratio | ratio of mins | added µs/step |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in variants:
        t = times[name]
        med = statistics.median(t)
        ratios = [v / b for v, b in zip(t, bare, strict=True)]
        print(
            f"| {name} | {med * 1e6:.1f} | {min(t) * 1e6:.1f} | {med / bare_med:.4f} "
            f"| {statistics.median(ratios):.4f} | {min(t) / min(bare):.4f} "
            f"| {(med - bare_med) * 1e6:+.1f} |"
        )
    print("\nobsbus bookkeeping alone (no torch work in the step):\n")
    print("| variant | median µs/step | min µs/step | share of the bare step |")
    print("|---|---:|---:|---:|")
    for name in empty_variants:
        t = times[name]
        med = statistics.median(t)
        print(f"| {name} | {med * 1e6:.1f} | {min(t) * 1e6:.1f} | {med / bare_med:.2%} |")
    if work is not None:
        notes = []
        if "bare_b" in variants:
            notes.append("`bare_b` is the bare loop again (A/A: its ratio shows the noise floor)")
        if "bare_busy" in variants:
            notes.append(
                f"`bare_busy` is the bare loop plus `busy({work.n})`, pure-Python work "
                "calibrated to last as long as run_empty's bookkeeping (`busy_alone`): it shows "
                "what that much Python between torch steps costs inside a real loop"
            )
        if notes:
            print(f"\nControls: {'; '.join(notes)}.")
    if args.rotate:
        print("\nOrder rotated every round (`--rotate`): no variant always follows `bare`.")

    if "run" in times:
        run_ratio = statistics.median([v / b for v, b in zip(times["run"], bare, strict=True)])
        share = statistics.median(times["run_empty"]) / bare_med
        # The bookkeeping alone is pure Python time that every step under Run pays on
        # top of the torch work, so it is a lower bound on what Run adds: if it is
        # over the target, the target is missed whatever the noisy end-to-end ratio.
        if share >= TARGET_RATIO - 1:
            verdict = "MISSED (the bookkeeping alone is over the target)"
        elif run_ratio < TARGET_RATIO:
            verdict = "MET"
        else:
            verdict = "UNCLEAR (end-to-end ratio over, bookkeeping under the target: noise?)"
        print(
            f"\nTarget: `Run` with no callbacks adds < {TARGET_RATIO - 1:.0%} to the step. "
            f"Measured: end-to-end {run_ratio - 1:+.2%} (median per-round ratio), "
            f"bookkeeping alone (run_empty) {share:.2%} of the bare step -> {verdict}."
        )

    if args.profile:
        print(f"\n## cProfile of the run_api_empty loop ({args.steps} steps)\n")
        print("```")
        print(profile_run(data, Setup(args.in_features, args.hidden, args.lr), args.profile_top))
        print("```")


if __name__ == "__main__":
    main()
