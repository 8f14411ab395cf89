"""Per-batch overhead of the profiler on a small CPU training loop, by phase.

What is measured
----------------
The loop of ``bench_loop.py``: an MLP ``Linear(128, 256) - ReLU -
Linear(256, 1)``, batch 64, SGD, ``mse_loss``, CPU, ``torch.set_num_threads(1)``
(about 1 ms a step), on pre-generated ``(x, y)`` tensors, under
:class:`obsbus.Run` with the README's loop (``run.forward``, ``run.loss``,
``run.backward``), no monitors and no destinations. Variants, interleaved
round by round (order rotated every round) after a warm-up round, each timing
``--steps`` steps (building and closing the ``Run`` included):

- ``bare``: plain PyTorch; ``bare_b``: the same loop again (A/A control);
- ``run``: ``Run`` with no profiler;
- ``skip``: a :class:`~obsbus.profiler.Profiler` whose schedule returns
  ``skip`` for every batch, with a :class:`~obsbus.profiler.JSONTraceHandler`
  (the engine then wraps events and hooks in markers that do not record);
- ``warmup``: every batch ``warmup``;
- ``active``: every batch recorded (engine spans ``event/...`` and callback
  spans ``callback/...``: the trace handler's and SystemProfiler's own
  hooks), never saved: the cost of recording alone;
- ``active+save``: the same, with a window saved every ``--window`` batches
  (``active_and_save``; the JSON is written by the handler's background
  thread, inside the timed loop): recording and writing;
- ``active+sys``: ``active`` plus ``SystemProfiler()`` (defaults: CPU only,
  a sample every 0.5 s);
- ``active+sys_all_10ms``: ``active`` plus ``SystemProfiler`` with CPU,
  memory, disk and network, a sample every 10 ms (a stress setting: 50x the
  default rate, four sources).

Reported per variant: median and minimum µs per step, the median of the
per-round ratios against ``bare`` (each round's time over the same round's
bare time) and against ``run``, and the ratio of the minima against ``run``.

Then obsbus's own time per step with no torch work in the step (``run.forward``
around a function that returns its input, ``run.loss`` returning a constant,
``run.backward`` on an object whose ``backward`` does nothing), for ``run``,
``skip``, ``skip+sys`` (``skip`` plus ``SystemProfiler()``, its thread
idle), ``warmup``, ``active``, ``active+sys`` and ``active+save``: the added µs per step is
paid on every step, and far less noisy than a difference of two ~1 ms times.
``--profile`` (on by default) runs the empty ``skip`` loop under
:mod:`cProfile` and lists the obsbus functions by own time: where the skip
phase's cost goes.

Last, one ``before_forward`` + ``after_forward`` pair on a bare ``Engine``
(one callback overriding ``after_forward``), timed with :mod:`timeit` with no
profiler, in ``skip``, ``warmup``, and ``active`` without and with a
``JSONTraceHandler``: the engine's per-event cost by phase, without a step
around it.

Run: ``.venv/bin/python bench/bench_profiler.py`` (``--help`` for options;
about 110 s with the defaults on two busy cores). Imports only torch, obsbus,
psutil (obsbus's dependency) and the standard library.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import obsbus
from obsbus import Callback, Engine, Event, Logger, Run, State
from obsbus.profiler.json_trace_handler import JSONTraceHandler
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.system_profiler import SystemProfiler

Batch = tuple[torch.Tensor, torch.Tensor]
Loop = Callable[["Setup", list[Batch]], None]


# ------------------------------------------------------ model and data (as bench_loop.py)
class Setup:
    """A model and its optimizer, kept across rounds."""

    def __init__(self, in_features: int, hidden: int, lr: float) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(in_features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr)


def make_data(steps: int, batch: int, in_features: int, seed: int = 1) -> list[Batch]:
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, in_features, generator=gen), torch.randn(batch, 1, generator=gen))
        for _ in range(steps)
    ]


# ------------------------------------------------------------------ configurations
class Always:
    """A schedule: the same action for every batch (``window`` > 0: save every that many)."""

    def __init__(self, action: ProfilerAction, window: int = 0) -> None:
        self.action, self.window = action, window

    def __call__(self, state: Any) -> ProfilerAction:
        if self.window and (state.timestamp._batch + 1) % self.window == 0:
            return ProfilerAction.ACTIVE_AND_SAVE
        return self.action


class Config:
    """What a ``Run`` gets: a profiler (or none), and a SystemProfiler (or none)."""

    def __init__(
        self,
        action: ProfilerAction | None,
        window: int,
        system: dict[str, Any] | None,
        folder: Path,
    ) -> None:
        self.action, self.window, self.system, self.folder = action, window, system, folder

    def run(self, steps: int, s: Setup) -> Run:
        profiler, callbacks = None, []
        if self.action is not None:
            handler = JSONTraceHandler(overwrite=True, merged_trace_filename=None)
            # A Profiler records CPU counters by default (Composer's sys_prof_cpu=True): off here,
            # so "active" is the profiler alone; "+sys" adds a SystemProfiler, which replaces it.
            own_sys = {} if self.system is not None else {"sys_prof_cpu": False}
            profiler = Profiler(Always(self.action, self.window), [handler], **own_sys)
        if self.system is not None:
            callbacks.append(SystemProfiler(**self.system))
        return Run(model=s.model, optimizers=s.opt, max_duration=f"{steps}ba", run_name="bench",
                   run_folder=self.folder, callbacks=callbacks, profiler=profiler)  # fmt: skip


# ------------------------------------------------------------------ loop bodies
def loop_bare(s: Setup, data: list[Batch]) -> None:
    model, opt = s.model, s.opt
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()


def make_run_loop(config: Config) -> Loop:
    def loop_run(s: Setup, data: list[Batch]) -> None:
        model, opt = s.model, s.opt
        with config.run(len(data), s) as run:
            for x, y in run.train(data):
                opt.zero_grad(set_to_none=True)
                out = run.forward(model, x)
                loss = run.loss(F.mse_loss, out, y)
                run.backward(loss)
                opt.step()

    return loop_run


class _FakeLoss:
    def backward(self) -> None:
        pass


_FAKE, _CONST = _FakeLoss(), torch.zeros(())


def make_empty_loop(config: Config) -> Loop:
    def loop_empty(s: Setup, data: list[Batch]) -> None:
        with config.run(len(data), s) as run:
            for x, y in run.train(data):
                out = run.forward(lambda v: v, x)
                run.loss(lambda o, t: _CONST, out, y)
                run.backward(_FAKE)

    return loop_empty


def timed(fn: Loop, s: Setup, data: list[Batch]) -> float:
    """Seconds per step of one call of ``fn`` (gc collected before, left on)."""
    gc.collect()
    t0 = time.perf_counter_ns()
    fn(s, data)
    return (time.perf_counter_ns() - t0) / 1e9 / len(data)


def profile_table(fn: Loop, s: Setup, data: list[Batch], top: int) -> list[str]:
    prof = cProfile.Profile()
    prof.enable()
    fn(s, data)
    prof.disable()
    stats = pstats.Stats(prof)
    package = os.sep + "obsbus" + os.sep
    rows = []
    for (filename, line, func), (_, calls, own, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        if package in filename:
            where = filename[filename.rindex(package) + 1 :]
            rows.append((own, cum, calls, f"{where}:{line}({func})"))
    rows.sort(reverse=True)
    steps = len(data)
    lines = [
        "| function | calls/step | own µs/step | cumulative µs/step |",
        "|---|---:|---:|---:|",
    ]
    for own, cum, calls, name in rows[:top]:
        lines.append(
            f"| `{name}` | {calls / steps:.2f} | {own / steps * 1e6:.2f} | {cum / steps * 1e6:.2f} |"
        )
    lines.append(
        f"| **all obsbus functions** | | **{sum(r[0] for r in rows) / steps * 1e6:.2f}** | |"
    )
    return lines


# ------------------------------------------------------------------ one event pair, isolated
class _Noop(Callback):
    def after_forward(self, state: State, logger: Logger) -> None:
        pass


def isolated_table(number: int) -> list[str]:
    """µs for ``before_forward`` + ``after_forward`` on a bare Engine with one callback hook."""
    cases: list[tuple[str, ProfilerAction | None, bool]] = [
        ("no profiler", None, False),
        ("skip", ProfilerAction.SKIP, False),
        ("warmup", ProfilerAction.WARMUP, False),
        ("active, no trace handler", ProfilerAction.ACTIVE, False),
        ("active, JSONTraceHandler", ProfilerAction.ACTIVE, True),
    ]
    lines = ["| profiler | µs per event pair (min of 5) |", "|---|---:|"]
    before, after = Event.BEFORE_FORWARD, Event.AFTER_FORWARD
    for label, action, json_handler in cases:
        state = State(run_name="bench")
        engine = Engine(state, Logger(state, []), [_Noop()])
        if action is not None:
            handlers = [JSONTraceHandler(merged_trace_filename=None)] if json_handler else []
            profiler = Profiler(Always(action), handlers, sys_prof_cpu=False)
            engine.attach_profiler(profiler)
            profiler.action = action
        run = engine.run_event

        def pair(run: Callable[[Event], None] = run) -> None:
            run(before)
            run(after)

        best = min(timeit.repeat(pair, number=number, repeat=5)) / number
        lines.append(f"| {label} | {best * 1e6:.2f} |")
    return lines


# ------------------------------------------------------------------ main
def _git_head() -> str:
    root = Path(__file__).resolve().parent.parent

    def git(*cmd: str) -> str:
        return subprocess.run(
            ["git", *cmd], capture_output=True, text=True, check=True, cwd=root
        ).stdout.strip()

    try:
        head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "obsbus")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}` (+ uncommitted changes in `obsbus/`)" if dirty else f"{head}`"


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds; medians reported")
    parser.add_argument("--window", type=int, default=10, help="active: save every N batches")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--profile-top", type=int, default=12)
    parser.add_argument("--isolated-number", type=int, default=5000, help="event pairs per timing")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--in-features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args(argv)

    started, load_before = datetime.datetime.now(datetime.UTC), _load()
    torch.set_num_threads(args.threads)
    data = make_data(args.steps, args.batch, args.in_features)
    folder = Path(tempfile.mkdtemp(prefix="obsbus-bench-profiler-"))
    try:
        _main(args, data, folder, started, load_before)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _main(
    args: argparse.Namespace,
    data: list[Batch],
    folder: Path,
    started: datetime.datetime,
    load_before: str,
) -> None:
    A, S, W = ProfilerAction.ACTIVE, ProfilerAction.SKIP, ProfilerAction.WARMUP
    w = args.window
    default_sys: dict[str, Any] = {}
    all_10ms = {"profile_memory": True, "profile_disk": True, "profile_net": True,
                "stats_thread_interval_seconds": 0.01}  # fmt: skip

    def config(
        name: str, action: ProfilerAction | None, system: dict[str, Any] | None, window: int = 0
    ) -> Config:
        return Config(action, window, system, folder / name)

    empty_only = {"skip+sys": config("skip+sys", S, default_sys)}
    configs = {
        "run": config("run", None, None),
        "skip": config("skip", S, None),
        "warmup": config("warmup", W, None),
        "active": config("active", A, None),
        "active+save": config("active+save", A, None, w),
        "active+sys": config("active+sys", A, default_sys),
        "active+sys_all_10ms": config("active+sys_all_10ms", A, all_10ms),
    }
    variants: dict[str, Loop] = {"bare": loop_bare, "bare_b": loop_bare}
    variants.update({name: make_run_loop(c) for name, c in configs.items()})
    every = {**configs, **empty_only}
    empty_names = ("run", "skip", "skip+sys", "warmup", "active", "active+sys", "active+save")
    empties = {f"{n}_empty": make_empty_loop(every[n]) for n in empty_names}

    def new_setup() -> Setup:
        return Setup(args.in_features, args.hidden, 0.01)

    setups = {name: new_setup() for name in [*variants, *empties]}
    warm = data[: max(w, min(100, args.steps // 5))]
    for name, fn in {**variants, **empties}.items():
        fn(setups[name], warm)

    times: dict[str, list[float]] = {name: [] for name in [*variants, *empties]}
    names = list(variants)
    t_start = time.perf_counter()
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in [*names[shift:], *names[:shift]]:
            times[name].append(timed(variants[name], setups[name], data))
        for name, fn in empties.items():
            times[name].append(timed(fn, setups[name], data))
    rounds_s = time.perf_counter() - t_start
    load_after = _load()

    def ratio(name: str, ref: str) -> tuple[float, float]:
        per_round = statistics.median(a / b for a, b in zip(times[name], times[ref], strict=True))
        return per_round, min(times[name]) / min(times[ref])

    bare_med = statistics.median(times["bare"])
    print("# obsbus: profiler overhead per batch\n")
    print(
        f"{started:%Y-%m-%d %H:%M} UTC, commit `{_git_head()}; python "
        f"{platform.python_version()}, torch {torch.__version__}, obsbus {obsbus.__version__}; "
        f"{os.cpu_count()} CPUs, load average {load_before} before and {load_after} after the "
        f"rounds ({rounds_s:.0f} s).\n"
    )
    print(
        f"MLP {args.in_features}->{args.hidden}->1, batch {args.batch}, SGD, CPU, torch threads "
        f"{args.threads}; {args.steps} steps x {args.rounds} rounds, interleaved, order rotated "
        f"every round; active+save: a window saved every {w} batches.\n"
    )
    print(f"Bare PyTorch step (median): **{bare_med * 1e6:.0f} µs**.\n")
    print(
        "| variant | median µs/step | min µs/step | per-round ratio vs bare "
        "| per-round ratio vs run | ratio of mins vs run |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in variants:
        t = times[name]
        vs_bare = ratio(name, "bare")[0]
        vs_run = ratio(name, "run") if name in configs and name != "run" else None
        cells = (f"{vs_run[0]:.4f}", f"{vs_run[1]:.4f}") if vs_run else ("", "")
        print(
            f"| {name} | {statistics.median(t) * 1e6:.1f} | {min(t) * 1e6:.1f} | {vs_bare:.4f} "
            f"| {cells[0]} | {cells[1]} |"
        )

    print("\nobsbus's own time per step (empty step body):\n")
    print("| variant | median µs/step | min µs/step | added µs/step (median) | over |")
    print("|---|---:|---:|---:|---|")
    base = {"skip+sys_empty": "skip_empty", "active+sys_empty": "active_empty",
            "active+save_empty": "active_empty"}  # fmt: skip
    for name in empties:
        med = statistics.median(times[name])
        ref = None if name == "run_empty" else base.get(name, "run_empty")
        added = f"{(med - statistics.median(times[ref])) * 1e6:+.1f}" if ref else ""
        print(
            f"| {name} | {med * 1e6:.1f} | {min(times[name]) * 1e6:.1f} | {added} | {ref or ''} |"
        )

    print(
        "\n## One event pair in isolation (`before_forward` + `after_forward`, one callback "
        "overriding `after_forward`; the engine's span path without the rest of a step)\n"
    )
    print("\n".join(isolated_table(args.isolated_number)))

    if args.profile:
        print(f"\n## cProfile of one empty `skip` loop ({args.steps} steps)\n")
        lines = profile_table(empties["skip_empty"], new_setup(), data, args.profile_top)
        print("\n".join(lines))


if __name__ == "__main__":
    main()
