"""Per-step overhead of the default monitor stack on a small CPU training loop.

What is measured
----------------
The monitors issue's target: the default monitor stack, with a log interval
of 10 batches, adds under 3% to a ~1 ms training step. The stack is

    SpeedMonitor(log_interval="10ba"), MemoryMonitor(log_interval="10ba"),
    NaNMonitor(check_interval="10ba"), LRMonitor(log_interval="10ba"),
    OptimizerMonitor(log_interval="10ba")

(``--interval`` changes the 10), from :mod:`obsbus.callbacks`, under
:class:`obsbus.Run` with an :class:`~obsbus.loggers.InMemoryLogger`
destination. The loop is the one of ``bench_loop.py``: an MLP
``Linear(128, 256) - ReLU - Linear(256, 1)``, batch 64, SGD (no momentum, so
the optimizer itself never syncs), ``mse_loss``, CPU,
``torch.set_num_threads(1)``, on pre-generated ``(x, y)`` tensors. The
obsbus variants use the loop the README shows (``run.forward``,
``run.loss``, ``run.backward``), so that the loss reaches ``state.loss``
(NaNMonitor checks it, ``Run`` logs it as ``loss/train/total``) and the
forward/loss/backward events fire; ``--body plain`` uses the bare body and
sets ``run.state.loss = loss`` instead (the README's other form).

Torch variants, interleaved round by round (``--rotate``: the order turns
every round) after a warm-up round, each timing ``--steps`` steps (building
and closing the ``Run`` included):

- ``bare``: plain PyTorch (``zero_grad(set_to_none=True)``, forward, loss,
  backward, step);
- ``bare_b``: the same loop again: an A/A control, how far two identical
  loops differ on this machine;
- ``run``: the obsbus loop with no callbacks and no destinations;
- ``run+monitors``: the default stack and an ``InMemoryLogger``;
- ``run+monitors+file``: the same plus a ``FileLogger(log_interval=...)``
  at the same interval, writing into a temporary run folder (removed at the
  end).

Reported per variant: median and minimum µs per step, the median of the
per-round ratios against ``bare`` (each round's time over the same round's
bare time, which cancels slow drift), the ratio of the minima, and for the
monitor variants the same against ``run`` (the monitors' own increment).

obsbus's own time per step, with no torch work in the step body
(``run.forward`` around a function that returns its input, ``run.loss``
returning a constant 0-d tensor, ``run.backward`` on an object whose
``backward`` does nothing; the model keeps the gradients of one earlier
backward, so OptimizerMonitor has something to read), for the same
configurations and each monitor alone: ``run_empty``, ``+mem``
(InMemoryLogger), ``+mem+<Monitor>`` for each of the five, ``+mem+monitors``
and ``+mem+monitors+file``. The monitors' torch work (NaNMonitor's
stack and read of the kept losses, the norms, every interval) is
real in these rows, so they hold all of what obsbus and the monitors add to
a step, minus any effect on the torch work around them. That time is paid
on every step, so ``+mem+monitors`` over the bare step is a lower bound on
the overhead. These loops are short (15-90 ms a pass), so each runs
``--empty-repeats`` times a round, interleaved, and a row's ``added`` is
the median of its per-pass differences from the row it is over (paired in
the same pass, which cancels the machine's slow drift).

Then, outside the timed rounds:

- hook timing: one ``run+monitors+file`` loop (``--hook-rounds`` times)
  with every overridden hook of every monitor and destination (and the
  destinations' ``log_metrics``) wrapped in a ``perf_counter_ns`` timer:
  calls per step, µs per call on log steps and on the others, µs per step;
- ``--isolated`` (on by default): each monitor hook called alone with
  :mod:`timeit` on the state of a real run (quiet step and log step), and
  the per-step cost at the log interval: what the code costs without the
  cache effects of a torch step around it;
- ``--profile`` (on by default): :mod:`cProfile` of one ``run+monitors``
  loop, the obsbus functions listed by own time per step (profiler overhead
  included, so read it for ranking, not for absolute times).

Verdict: MISSED when ``+mem+monitors`` alone is 3% of the bare step or more;
MET when it is not and both the median per-round ratio and the ratio of
minima of ``run+monitors`` are under 1.03; UNCLEAR otherwise (read it with
the ``bare_b`` control).

Run: ``.venv/bin/python bench/bench_monitors.py`` (``--help`` for options;
about 110 s with the defaults on two busy cores). Imports only torch, obsbus
and the standard library.
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
from obsbus import Callback, Event, Run, Timestamp
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.engine import overrides
from obsbus.loggers import FileLogger, InMemoryLogger

TARGET = 0.03

Batch = tuple[torch.Tensor, torch.Tensor]
Loop = Callable[["Setup", list[Batch]], None]

MONITORS: dict[str, Callable[[str], Callback]] = {
    "SpeedMonitor": lambda every: SpeedMonitor(log_interval=every),
    "MemoryMonitor": lambda every: MemoryMonitor(log_interval=every),
    "NaNMonitor": lambda every: NaNMonitor(check_interval=every),
    "LRMonitor": lambda every: LRMonitor(log_interval=every),
    "OptimizerMonitor": lambda every: OptimizerMonitor(log_interval=every),
}


# ------------------------------------------------------ model and data (as bench_loop.py)
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


# ------------------------------------------------------------------ configurations
class Config:
    """What a ``Run`` gets: which monitors (names in MONITORS) and which destinations."""

    def __init__(
        self, monitors: tuple[str, ...], memory: bool, file: bool, interval: int, folder: Path
    ) -> None:
        self.monitors, self.memory, self.file = monitors, memory, file
        self.every = f"{interval}ba"
        self.folder = folder
        # Set by the hook-timing pass: called on each new plug-in before the Run is built.
        self.instrument: Callable[[Any], None] | None = None

    def plugins(self) -> tuple[list[Callback], list[Any]]:
        callbacks = [MONITORS[name](self.every) for name in self.monitors]
        loggers: list[Any] = []
        if self.memory:
            loggers.append(InMemoryLogger())
        if self.file:
            loggers.append(FileLogger(log_interval=self.every, overwrite=True))
        if self.instrument is not None:
            for plugin in [*callbacks, *loggers]:
                self.instrument(plugin)
        return callbacks, loggers

    def run(self, s: Setup, steps: int) -> Run:
        callbacks, loggers = self.plugins()
        return Run(
            model=s.model,
            optimizers=s.opt,
            max_duration=f"{steps}ba",
            run_name="bench",
            callbacks=callbacks,
            loggers=loggers,
            run_folder=self.folder,
        )


# ------------------------------------------------------------------ loop bodies
def loop_bare(s: Setup, data: list[Batch]) -> None:
    model, opt = s.model, s.opt
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = F.mse_loss(out, y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()


def make_run_loop(config: Config, body: str) -> Loop:
    if body == "api":

        def loop_run_api(s: Setup, data: list[Batch]) -> None:
            model, opt = s.model, s.opt
            with config.run(s, len(data)) as run:
                for x, y in run.train(data):
                    opt.zero_grad(set_to_none=True)
                    out = run.forward(model, x)
                    loss = run.loss(F.mse_loss, out, y)
                    run.backward(loss)
                    opt.step()

        return loop_run_api

    def loop_run_plain(s: Setup, data: list[Batch]) -> None:
        model, opt = s.model, s.opt
        with config.run(s, len(data)) as run:
            state = run.state
            for x, y in run.train(data):
                opt.zero_grad(set_to_none=True)
                out = model(x)
                loss = F.mse_loss(out, y)
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                state.loss = loss

    return loop_run_plain


class _FakeLoss:
    """Stands in for a loss in ``run.backward``: ``backward`` does nothing."""

    def backward(self) -> None:
        pass


_FAKE_LOSS = _FakeLoss()
_CONST_LOSS = torch.zeros(())  # what the empty body's "loss function" returns


def _identity(x: Any) -> Any:
    return x


def _const_loss(out: Any, y: Any) -> torch.Tensor:
    return _CONST_LOSS


def make_empty_loop(config: Config, body: str) -> Loop:
    if body == "api":

        def loop_empty_api(s: Setup, data: list[Batch]) -> None:
            with config.run(s, len(data)) as run:
                for x, y in run.train(data):
                    out = run.forward(_identity, x)
                    run.loss(_const_loss, out, y)
                    run.backward(_FAKE_LOSS)

        return loop_empty_api

    def loop_empty_plain(s: Setup, data: list[Batch]) -> None:
        with config.run(s, len(data)) as run:
            state = run.state
            for _ in run.train(data):
                state.loss = _CONST_LOSS

    return loop_empty_plain


def with_grads(s: Setup, batch: Batch) -> Setup:
    """Give the model gradients once (never zeroed), for OptimizerMonitor in the empty loops."""
    x, y = batch
    F.mse_loss(s.model(x), y).backward()  # type: ignore[no-untyped-call]
    return s


# ``--clock process``: CPU time of this process (every thread), which leaves out the time
# other processes hold the cores; on a shared, loaded machine it is far steadier than wall.
CLOCKS = {"wall": time.perf_counter_ns, "process": time.process_time_ns}
_clock = CLOCKS["wall"]


def timed(fn: Loop, s: Setup, data: list[Batch]) -> float:
    """Seconds per step of one call of ``fn`` (gc collected before, left on)."""
    gc.collect()
    t0 = _clock()
    fn(s, data)
    return (_clock() - t0) / 1e9 / len(data)


# ------------------------------------------------------------------ hook timing
_HOOKS = [event.value for event in Event]


def _overridden(plugin: Any, name: str) -> bool:
    """Whether the engine dispatches ``name`` to ``plugin`` (its own test: a plug-in may
    turn an idle hook off with an instance attribute holding the base one)."""
    return hasattr(Callback, name) and overrides(plugin, name)


class HookTimer:
    """Wraps every overridden hook of a plug-in in a timer (instance attributes).

    The engine builds its dispatch table from ``getattr(plugin, hook)`` when the
    ``Run`` is built, and the logger looks ``log_metrics`` up at each call, so
    the wrappers are what runs. ``batch_end`` calls are split into log steps
    (``batch % interval == 0``) and the others.
    """

    def __init__(self, interval: int) -> None:
        self.interval = interval
        # (plugin, hook) -> [calls, ns, log-step calls, log-step ns]
        self.rows: dict[tuple[str, str], list[int]] = {}
        self.floor_ns = self._floor()

    @staticmethod
    def _floor() -> float:
        """ns the timer itself adds inside the timed span (two clock reads), median of 5."""
        clock, runs = time.perf_counter_ns, []
        for _ in range(5):
            total = 0
            for _ in range(20_000):
                t0 = clock()
                total += clock() - t0
            runs.append(total / 20_000)
        return statistics.median(runs)

    def instrument(self, plugin: Any) -> None:
        label = type(plugin).__name__
        names = [n for n in _HOOKS if _overridden(plugin, n)]
        if hasattr(plugin, "log_metrics"):  # a destination: the logger calls it directly
            names.append("log_metrics")
        for name in names:
            setattr(plugin, name, self._wrap(getattr(plugin, name), label, name))

    def _wrap(self, hook: Callable[..., Any], label: str, name: str) -> Callable[..., Any]:
        rec = self.rows.setdefault((label, name), [0, 0, 0, 0])
        clock, interval = time.perf_counter_ns, self.interval
        split = name == "batch_end"

        def timed_hook(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return hook(*args, **kwargs)
            finally:
                dt = clock() - t0
                if split and args[0].timestamp._batch % interval == 0:
                    rec[2] += 1
                    rec[3] += dt
                else:
                    rec[0] += 1
                    rec[1] += dt

        return timed_hook


def hook_table(timer: HookTimer, steps: int) -> list[str]:
    lines = [
        "| plug-in | hook | calls/step | µs/call (quiet steps) | µs/call (log steps) | µs/step |",
        "|---|---|---:|---:|---:|---:|",
    ]
    floor = timer.floor_ns
    rows = []
    for (label, name), (calls, ns, due_calls, due_ns) in timer.rows.items():
        if calls + due_calls == 0:
            continue
        total = ns + due_ns - floor * (calls + due_calls)
        rows.append((label, name, calls, ns, due_calls, due_ns, total / steps / 1e3))
    rows.sort(key=lambda r: -r[6])
    small = [r for r in rows if abs(r[6]) < 0.05]  # fit/epoch hooks: once a loop
    for label, name, calls, ns, due_calls, due_ns, per_step in rows[: len(rows) - len(small)]:
        quiet = f"{(ns / calls - floor) / 1e3:.2f}" if calls else ""
        due = f"{(due_ns / due_calls - floor) / 1e3:.2f}" if due_calls else ""
        lines.append(
            f"| {label} | `{name}` | {(calls + due_calls) / steps:.2f} | {quiet} | {due} "
            f"| {per_step:.2f} |"
        )
    if small:
        lines.append(
            f"| {len(small)} others (once a loop) | | | | | {sum(r[6] for r in small):.2f} |"
        )
    lines.append(f"| **all hooks** | | | | | **{sum(r[6] for r in rows):.2f}** |")
    return lines


# ------------------------------------------------------------------ isolated hook costs
_STEP_HOOKS = ("after_forward", "after_loss", "after_backward", "after_train_batch")


def isolated_table(config: Config, s: Setup, data: list[Batch], interval: int) -> list[str]:
    """Each monitor's hooks called alone with :mod:`timeit`, on the state of a real run.

    A ``Run`` with the stack trains ``3 * interval`` steps (so every monitor has
    its window, flags and gradients), then, still inside the run, each hook is
    called in a tight loop with the timestamp set to a quiet step and to a log
    step. NaNMonitor's log-step ``batch_end`` only reads the flags when
    something was folded, so it is timed as ``after_loss`` + ``batch_end`` minus
    ``after_loss``. Median of 5 repeats, µs per call (a lambda call included).
    """
    callbacks, loggers = config.plugins()
    rows: list[tuple[str, str, str, float, float]] = []
    with Run(
        model=s.model,
        optimizers=s.opt,
        max_duration=f"{3 * interval}ba",
        run_name="bench",
        callbacks=callbacks,
        loggers=loggers,
        run_folder=config.folder,
    ) as run:
        model, opt = s.model, s.opt
        for x, y in run.train(data[: 3 * interval]):
            opt.zero_grad(set_to_none=True)
            out = run.forward(model, x)
            loss = run.loss(F.mse_loss, out, y)
            run.backward(loss)
            opt.step()
        state, logger = run.state, run.logger
        final = state.timestamp
        quiet, due = Timestamp(batch=3 * interval + 1), Timestamp(batch=3 * interval)

        def per_call(fn: Callable[[], Any], number: int) -> float:
            timer = timeit.Timer(fn)
            timer.timeit(min(number, 50))
            return statistics.median(t / number * 1e6 for t in timer.repeat(5, number))

        for cb in callbacks:
            label = type(cb).__name__
            state.timestamp = quiet
            for name in (*_STEP_HOOKS, "batch_end"):
                if _overridden(cb, name):
                    hook = getattr(cb, name)
                    cost = per_call(lambda h=hook: h(state, logger), 2000)  # type: ignore[misc]
                    share = 1 - 1 / interval if name == "batch_end" else 1.0
                    when = "quiet steps" if name == "batch_end" else "every step"
                    rows.append((label, name, when, cost, cost * share))
            state.timestamp = due
            if isinstance(cb, NaNMonitor):
                fold = per_call(lambda c=cb: c.after_loss(state, logger), 300)  # type: ignore[misc]
                both = per_call(
                    lambda c=cb: (c.after_loss(state, logger), c.batch_end(state, logger)), 300
                )
                cost = both - fold
            else:
                cost = per_call(lambda c=cb: c.batch_end(state, logger), 300)  # type: ignore[misc]
            rows.append((label, "batch_end", "log steps", cost, cost / interval))
        state.timestamp = quiet
        entry = {"loss/train/total": state.loss}
        cost = per_call(lambda: logger.log_metrics(entry), 2000)
        rows.append(("Run -> InMemoryLogger", "log_metrics (the loss)", "every step", cost, cost))
        state.timestamp = final
    lines = [
        "| plug-in | hook | when | µs/call | µs/step |",
        "|---|---|---|---:|---:|",
    ]
    for label, name, when, cost, per_step in sorted(rows, key=lambda r: -r[4]):
        lines.append(f"| {label} | `{name}` | {when} | {cost:.2f} | {per_step:.2f} |")
    lines.append(f"| **total** | | | | **{sum(r[4] for r in rows):.2f}** |")
    return lines


# ------------------------------------------------------------------ cProfile
def profile_table(fn: Loop, s: Setup, data: list[Batch], top: int) -> list[str]:
    prof = cProfile.Profile()
    t0 = time.perf_counter_ns()
    prof.enable()
    fn(s, data)
    prof.disable()
    wall = (time.perf_counter_ns() - t0) / 1e3 / len(data)
    stats = pstats.Stats(prof)
    root = str(Path(obsbus.__file__).resolve().parent.parent) + os.sep
    package = os.sep + "obsbus" + os.sep
    entries = []
    for (filename, line, func), (_, calls, own, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        if package in filename:
            where = filename[len(root) :] if filename.startswith(root) else filename
            entries.append((own, cum, calls, f"{where}:{line}({func})"))
    entries.sort(reverse=True)
    steps = len(data)
    lines = [
        f"Profiled step: {wall:.0f} µs (profiler overhead included). "
        f"obsbus functions by own time:\n",
        "| function | calls/step | own µs/step | cumulative µs/step |",
        "|---|---:|---:|---:|",
    ]
    for own, cum, calls, name in entries[:top]:
        lines.append(
            f"| `{name}` | {calls / steps:.2f} | {own / steps * 1e6:.2f} | {cum / steps * 1e6:.2f} |"
        )
    total_own = sum(e[0] for e in entries) / steps * 1e6
    lines.append(f"| **all obsbus functions** | | **{total_own:.2f}** | |")
    return lines


# ------------------------------------------------------------------ main
def _git_head() -> str:
    """``git rev-parse --short HEAD``, noting uncommitted changes under ``obsbus/``."""
    root = Path(__file__).resolve().parent.parent

    def git(*cmd: str) -> str:
        return subprocess.run(
            ["git", *cmd], capture_output=True, text=True, check=True, cwd=root
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "obsbus")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}` (+ uncommitted changes in `obsbus/`)" if dirty else f"{head}`"


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def _ratio(t: list[float], ref: list[float]) -> tuple[float, float]:
    """(median per-round ratio, ratio of minima)."""
    per_round = statistics.median([v / b for v, b in zip(t, ref, strict=True)])
    return per_round, min(t) / min(ref)


def _paired(t: list[float], ref: list[float]) -> float:
    """Median of the per-pass differences ``t - ref`` (both timed in the same pass)."""
    return statistics.median([v - b for v, b in zip(t, ref, strict=True)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds; medians reported")
    parser.add_argument(
        "--empty-repeats",
        type=int,
        default=5,
        help="times each empty-body loop runs per round (they are short, and noisier)",
    )
    parser.add_argument("--interval", type=int, default=10, help="log interval, batches")
    parser.add_argument(
        "--body",
        choices=("api", "plain"),
        default="api",
        help="api: run.forward/run.loss/run.backward (default); plain: the bare body and "
        "run.state.loss = loss",
    )
    parser.add_argument(
        "--rotate", action="store_true", help="rotate the order of the torch variants every round"
    )
    parser.add_argument("--no-file", action="store_true", help="leave out the FileLogger variants")
    parser.add_argument(
        "--hook-rounds", type=int, default=2, help="loops in the hook-timing pass (0: skip)"
    )
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="cProfile one run+monitors loop",
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="what the timed rounds measure: wall time, or this process's CPU time",
    )
    parser.add_argument("--profile-top", type=int, default=20)
    parser.add_argument(
        "--isolated",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time each monitor hook alone with timeit",
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--in-features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args(argv)

    started = datetime.datetime.now(datetime.UTC)
    load_before = _load()
    torch.set_num_threads(args.threads)
    data = make_data(args.steps, args.batch, args.in_features)
    folder = Path(tempfile.mkdtemp(prefix="obsbus-bench-monitors-"))
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
    global _clock
    _clock = CLOCKS[args.clock]
    every = args.interval
    stack = tuple(MONITORS)

    def config(monitors: tuple[str, ...], memory: bool, file: bool) -> Config:
        return Config(monitors, memory, file, every, folder)

    torch_configs = {
        "run": config((), False, False),
        "run+monitors": config(stack, True, False),
        "run+monitors+file": config(stack, True, True),
    }
    empty_configs = {
        "run_empty": config((), False, False),
        "+mem": config((), True, False),
        **{f"+mem+{name}": config((name,), True, False) for name in MONITORS},
        "+mem+monitors": config(stack, True, False),
        "+mem+monitors+file": config(stack, True, True),
    }
    if args.no_file:
        del torch_configs["run+monitors+file"], empty_configs["+mem+monitors+file"]

    variants: dict[str, Loop] = {"bare": loop_bare, "bare_b": loop_bare}
    variants.update({n: make_run_loop(c, args.body) for n, c in torch_configs.items()})
    empties = {n: make_empty_loop(c, args.body) for n, c in empty_configs.items()}

    def new_setup() -> Setup:
        return Setup(args.in_features, args.hidden, args.lr)

    setups = {name: new_setup() for name in variants}
    setups.update({name: with_grads(new_setup(), data[0]) for name in empties})

    warm = data[: max(1, min(200, args.steps // 5))]
    for name, fn in {**variants, **empties}.items():
        fn(setups[name], warm)

    times: dict[str, list[float]] = {name: [] for name in [*variants, *empties]}
    names = list(variants)
    t_start = time.perf_counter()
    for round_index in range(args.rounds):
        order = names
        if args.rotate:
            shift = round_index % len(names)
            order = [*names[shift:], *names[:shift]]
        for name in order:
            times[name].append(timed(variants[name], setups[name], data))
        for _ in range(args.empty_repeats):
            for name, fn in empties.items():
                times[name].append(timed(fn, setups[name], data))
    rounds_s = time.perf_counter() - t_start
    load_after = _load()

    bare = times["bare"]
    bare_med = statistics.median(bare)
    print("# obsbus: overhead of the default monitor stack\n")
    print(
        f"{started:%Y-%m-%d %H:%M} UTC, commit `{_git_head()}; python "
        f"{platform.python_version()}, torch {torch.__version__}, obsbus {obsbus.__version__}; "
        f"{os.cpu_count()} CPUs, load average {load_before} before and {load_after} after "
        f"the rounds ({rounds_s:.0f} s).\n"
    )
    print(
        f"MLP {args.in_features}->{args.hidden}->1, batch {args.batch}, SGD, CPU, torch threads "
        f"{args.threads}; loop body `{args.body}`; log interval {every} batches; "
        f"{args.steps} steps x {args.rounds} rounds, interleaved, clock `{args.clock}`"
        f"{' (order rotated every round)' if args.rotate else ''}.\n"
    )
    print(f"Bare PyTorch step (median): **{bare_med * 1e6:.0f} µs**.\n")
    print(
        "| variant | median µs/step | min µs/step | median per-round ratio vs bare "
        "| ratio of mins vs bare | vs `run`: per-round ratio | vs `run`: ratio of mins |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in variants:
        t = times[name]
        per_round, mins = _ratio(t, bare)
        vs_run = ("", "")
        if name.startswith("run+"):
            r, m = _ratio(t, times["run"])
            vs_run = (f"{r:.4f}", f"{m:.4f}")
        print(
            f"| {name} | {statistics.median(t) * 1e6:.1f} | {min(t) * 1e6:.1f} | {per_round:.4f} "
            f"| {mins:.4f} | {vs_run[0]} | {vs_run[1]} |"
        )

    print("\nobsbus's own time per step (empty step body; the monitors' torch work included):\n")
    print(
        f"({args.rounds} x {args.empty_repeats} interleaved passes; `added` is the median of "
        "each pass's difference from the row it is over, taken in the same pass.)\n"
    )
    print(
        "| variant | median µs/step | min µs/step | added µs/step (median) "
        "| over | share of the bare step |"
    )
    print("|---|---:|---:|---:|---|---:|")
    base = {
        "+mem": "run_empty",
        **{f"+mem+{name}": "+mem" for name in MONITORS},
        "+mem+monitors": "+mem",
        "+mem+monitors+file": "+mem+monitors",
    }
    for name in empties:
        t = times[name]
        med = statistics.median(t)
        ref = base.get(name)
        added = f"{_paired(t, times[ref]) * 1e6:+.1f}" if ref else ""
        print(
            f"| {name} | {med * 1e6:.1f} | {min(t) * 1e6:.1f} | {added} | {ref or ''} "
            f"| {med / bare_med:.2%} |"
        )
    singles = sum(_paired(times[f"+mem+{n}"], times["+mem"]) for n in MONITORS)
    print(f"\nSum of the five monitors alone: {singles * 1e6:+.1f} µs/step.")

    per_round, mins = _ratio(times["run+monitors"], bare)
    ctl_round, ctl_mins = _ratio(times["bare_b"], bare)
    own = statistics.median(times["+mem+monitors"]) / bare_med
    if own >= TARGET:
        verdict = "MISSED (obsbus's own time alone is over the target)"
    elif per_round < 1 + TARGET and mins < 1 + TARGET:
        verdict = "MET"
    else:
        verdict = "UNCLEAR (end to end over, obsbus's own time under the target: noise?)"
    print(
        f"\nTarget: the default stack (under `Run`, with an InMemoryLogger) adds < {TARGET:.0%} "
        f"to the bare step. Measured: end to end {per_round - 1:+.2%} (median per-round ratio), "
        f"{mins - 1:+.2%} (ratio of minima); A/A control `bare_b` {ctl_round - 1:+.2%} / "
        f"{ctl_mins - 1:+.2%}; obsbus's own time (`+mem+monitors`) {own:.2%} of the bare step "
        f"-> **{verdict}**."
    )

    if args.hook_rounds > 0:
        timer = HookTimer(every)
        name = "run+monitors+file" if "run+monitors+file" in torch_configs else "run+monitors"
        cfg = torch_configs[name]
        cfg.instrument = timer.instrument
        fn = make_run_loop(cfg, args.body)
        for _ in range(args.hook_rounds):
            fn(setups[name], data)
        cfg.instrument = None
        print(
            f"\n## Hook timing: `{name}` ({args.hook_rounds} x {args.steps} steps, full torch "
            f"step; timer floor {timer.floor_ns:.0f} ns a call subtracted)\n"
        )
        print("\n".join(hook_table(timer, args.hook_rounds * args.steps)))

    if args.isolated:
        print(
            f"\n## Hook costs in isolation (timeit on a real run's state; per step at a log "
            f"interval of {every})\n"
        )
        cfg = torch_configs["run+monitors"]
        print("\n".join(isolated_table(cfg, new_setup(), data, every)))

    if args.profile:
        print(f"\n## cProfile of one `run+monitors` loop ({args.steps} steps)\n")
        cfg = torch_configs["run+monitors"]
        lines = profile_table(make_run_loop(cfg, args.body), new_setup(), data, args.profile_top)
        print("\n".join(lines))


if __name__ == "__main__":
    main()
