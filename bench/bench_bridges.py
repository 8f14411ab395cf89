"""Per-step cost of obsbus's trainer bridges, against the same trainer without them.

What is measured
----------------
A tiny GPT-2 built from a config (``--layers`` 2, ``--embd`` 32, 2 heads,
vocabulary ``--vocab`` 128, ``--seq`` 32 tokens, batch ``--batch`` 4; no hub
download), trained with AdamW on synthetic tokens on the CPU with
``torch.set_num_threads(--threads)`` (1 by default: the machine this was
written on has two cores, and the second one is left for everything else,
FileLogger's writer thread included). That is about 10 ms a step there.
Three hosts, each in four variants:

- ``hf``: ``transformers.Trainer(...).train()`` (``max_steps=--steps``,
  ``logging_steps=--interval``, no eval, no saving, ``report_to="none"``);
- ``lightning``: ``lightning.pytorch.Trainer(...).fit()`` (``max_steps``,
  ``logger=False``, no checkpointing, progress bar or sanity check);
- ``accelerate``: a hand-written loop over ``accelerator.prepare``'d model,
  optimizer and dataloader with ``accelerator.backward``.

Variants, per host:

- ``base``: the host alone;
- ``base_b``: the host alone again, the A/A control: how far two identical
  runs differ on this machine (``--no-aa`` leaves it out);
- ``bridge``: the obsbus bridge with no plug-ins (the bare bridge):
  ``obsbus.integrations.transformers.ObsbusCallback`` plus ``wrap(trainer)``
  (which gives obsbus the loss); ``obsbus.integrations.lightning.ObsbusCallback``;
  the loop inside ``obsbus.Run(backward=accelerator.backward)`` through
  ``run.forward``/``run.loss``/``run.backward``;
- ``bridge+plugins``: the same with ``SpeedMonitor``, ``LRMonitor`` and
  ``NaNMonitor`` at ``--interval`` batches, and a ``FileLogger`` (text and
  JSON Lines, ``log_interval=--interval``) into a temporary run folder. For
  Accelerate, the loop also calls ``accelerator.log({"train/loss": loss})``
  every ``--interval`` steps, in every variant, and this variant's
  Accelerator has an ``ObsbusTracker`` on the ``Run`` (``log_with``), so
  those values reach the FileLogger too.

Every run folder (the bridges write their run record at ``init``) and the
hosts' output folders are in one temporary folder, removed at the end.

How it is timed
---------------
Each fit carries a step clock in the host's own hook (an HF ``TrainerCallback``
with ``on_step_end``, a Lightning ``Callback`` with ``on_train_batch_end``,
the end of the Accelerate loop body), identical in every variant, that
appends ``time.perf_counter()`` once per optimizer step. A fit's step time is
``(mark[steps - 1] - mark[warmup - 1]) / (steps - warmup)``: the steady-state
mean over every step after ``--warmup`` steps, log steps included, with the
trainer's construction, the bridge's ``init`` and ``close`` left out. Those
one-off costs are reported apart: the fit's whole wall time (construction
included) minus ``steps`` times its step time, as a difference from ``base``.

One untimed warm-up fit of each variant comes first. Then ``--repeats``
rounds: each round runs every variant of every host once, the hosts in
turn, the variants of a host back to back in an order rotated every round
(so no variant always follows another), with a ``gc.collect()`` before each
fit. Reported per variant: the median and minimum step time over the
rounds, the median of the per-round differences from ``base`` (µs a step),
and the per-round ratios to ``base`` (each variant against the ``base`` fit of
its own round, so slow drift of the machine cancels): their median and their
minimum and maximum. ``base_b``'s ratios are the noise floor.

obsbus's own time: in the bridged variants every obsbus entry point is
wrapped with a ``perf_counter`` timer (:class:`OwnTimer`, outermost calls
only, the timer's own cost subtracted): the HF ``ObsbusCallback``'s hooks and
the ``_microbatch``/``_record_loss``/``_sync_control`` calls of ``wrap``'s
shims plus its ``engine.run_event``; every hook of the Lightning
``ObsbusCallback``; ``Run``'s ``engine.run_event``, ``_set_batch``,
``_end_batch`` and ``ObsbusTracker.log`` (``Run``'s generator frames are not
covered). Summed over the same steps and divided by them, that is far less
noisy than a difference of two ~10 ms steps. It counts work the bridge moves
rather than adds (an object it is the last to release) and the cold caches
of the first Python after a torch op, so it is not a strict lower bound.

``--clock cpu`` makes the step clock ``time.process_time`` (this process,
all threads) instead of wall time, which ignores time the process spent
waiting for a core.

Target (issue 15): a bridge with its plug-ins adds under 2% to a ~10 ms step.
The verdict per host and variant says MISSED when obsbus's own time alone is
2% of the median base step or more, MET when it is not and the median
per-round ratio is under 1.02, UNCLEAR otherwise (end to end over, own time
under: the noise of the machine, or costs outside the timed entry points).

``--profile HOST`` then runs one ``bridge+plugins`` fit of that host under
:mod:`cProfile` and prints obsbus's functions by own time.

Run: ``python bench/bench_bridges.py [--steps N] [--repeats R]`` from the
repository root (``--help`` for the options); about 4 minutes with the
defaults on two busy cores. Imports torch, transformers, lightning,
accelerate and obsbus.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import gc
import io
import logging
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import obsbus
from obsbus import Run
from obsbus.callbacks import LRMonitor, NaNMonitor, SpeedMonitor

TARGET = 0.02
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter  # the step clock; --clock cpu: this process's CPU time, all threads
HOSTS = ("hf", "lightning", "accelerate")
VARIANTS = ("base", "base_b", "bridge", "bridge+plugins")


@dataclass
class Setup:
    """What every fit of one benchmark invocation shares."""

    steps: int
    warmup: int
    interval: int
    batch: int
    seq: int
    vocab: int
    layers: int
    embd: int
    lr: float
    folder: Path
    fits: int = 0

    def new_folder(self, label: str) -> Path:
        self.fits += 1
        path = self.folder / f"{self.fits:04d}-{label.replace('+', '_')}"
        path.mkdir(parents=True)
        return path

    def model(self) -> Any:
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        config = GPT2Config(
            n_layer=self.layers,
            n_embd=self.embd,
            n_head=2,
            vocab_size=self.vocab,
            n_positions=self.seq,
            bos_token_id=0,
            eos_token_id=0,
            loss_type="ForCausalLMLoss",
        )
        return GPT2LMHeadModel(config)

    def dataset(self) -> Tokens:
        return Tokens(self.steps * self.batch, self.seq, self.vocab)

    def loader(self) -> torch.utils.data.DataLoader[dict[str, torch.Tensor]]:
        return torch.utils.data.DataLoader(self.dataset(), batch_size=self.batch)

    def plugins(self) -> tuple[list[Any], list[Any]]:
        from obsbus.loggers import FileLogger

        every = f"{self.interval}ba"
        callbacks = [
            SpeedMonitor(log_interval=every),
            LRMonitor(log_interval=every),
            NaNMonitor(check_interval=every),
        ]
        return callbacks, [FileLogger(log_interval=every)]


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Synthetic token sequences, as a causal LM's ``input_ids``/``labels``."""

    def __init__(self, n: int, seq: int, vocab: int) -> None:
        gen = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, vocab, (n, seq), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Marks:
    """One reading per optimizer step: the step clock's, and ``perf_counter``'s."""

    def __init__(self) -> None:
        self.clock: list[float] = []
        self.wall: list[float] = []

    def tick(self) -> None:
        self.wall.append(time.perf_counter())
        self.clock.append(_clock())

    def __len__(self) -> int:
        return len(self.clock)


@dataclass
class Fit:
    """One timed fit: its per-step marks, its whole wall time and obsbus's timed calls."""

    marks: Marks
    wall: float
    own: OwnTimer | None = None

    def step_time(self, warmup: int) -> float:
        clock = self.marks.clock
        if len(clock) <= warmup:
            raise RuntimeError(f"only {len(clock)} steps ran; warm-up is {warmup}")
        return (clock[-1] - clock[warmup - 1]) / (len(clock) - warmup)

    def own_time(self, warmup: int, floor: float) -> float | None:
        """obsbus's wall time a step over the same steps, or None for a host alone."""
        if self.own is None:
            return None
        wall = self.marks.wall
        return self.own.per_step(wall[warmup - 1], wall[-1], len(wall) - warmup, floor)


class OwnTimer:
    """Wall time spent inside obsbus's entry points, outermost calls only.

    ``wrap(obj, name)`` shadows a bound method on the instance with a timed
    one; a call made while another timed call runs (a hook firing an event)
    is not counted twice. Each outermost call is kept as ``(start, duration)``
    so the fit's own time can be summed over the same steps as its step time.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []
        self._depth = 0

    def wrap(self, obj: Any, name: str) -> None:
        method = getattr(obj, name)
        calls, clock = self.calls, time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return method(*args, **kwargs)
            self._depth = 1
            start = clock()
            try:
                return method(*args, **kwargs)
            finally:
                calls.append((start, clock() - start))
                self._depth = 0

        setattr(obj, name, timed)

    def per_step(self, begin: float, end: float, steps: int, floor: float) -> float:
        """Seconds a step inside obsbus between two ``perf_counter`` readings, less the timer."""
        inside = [d for start, d in self.calls if begin <= start < end]
        return max(0.0, sum(inside) - floor * len(inside)) / steps


def _timer_floor() -> float:
    """Seconds one timed call of an empty method costs more than the call itself."""

    class Empty:
        def hook(self) -> None:
            pass

    plain, timed = Empty(), Empty()
    timer = OwnTimer()
    timer.wrap(timed, "hook")
    n = 20_000
    best = []
    for obj in (plain, timed):
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(n):
                obj.hook()
            runs.append((time.perf_counter() - start) / n)
        best.append(min(runs))
    return max(0.0, best[1] - best[0])


_HF_ENTRIES = (
    "_microbatch",
    "_record_loss",
    "_sync_control",
    "on_epoch_begin",
    "on_step_begin",
    "on_substep_end",
    "on_pre_optimizer_step",
    "on_optimizer_step",
    "on_step_end",
    "on_epoch_end",
    "on_evaluate",
    "on_save",
    "on_log",
    "on_train_end",
)


# ---------------------------------------------------------------- HF Trainer
def fit_hf(s: Setup, variant: str) -> Fit:
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from obsbus.integrations.transformers import ObsbusCallback

    marks = Marks()

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            marks.tick()

    start = _clock()
    folder = s.new_folder(f"hf-{variant}")
    callbacks: list[Any] = [Clock()]
    bus = None
    own = None
    if variant.startswith("bridge"):
        plugins, loggers = s.plugins() if variant == "bridge+plugins" else ([], [])
        bus = ObsbusCallback(callbacks=plugins, loggers=loggers, run_folder=folder / "run")
        callbacks.append(bus)
        own = OwnTimer()
        for name in _HF_ENTRIES:
            if hasattr(bus, name):
                own.wrap(bus, name)
        begin = bus.on_train_begin

        def on_train_begin(*args: Any, **kwargs: Any) -> None:
            begin(*args, **kwargs)
            assert bus is not None
            assert bus.run is not None
            own.wrap(bus.run.engine, "run_event")  # wrap()'s compute_loss fires after_loss

        bus.on_train_begin = on_train_begin  # type: ignore[method-assign]
    trainer = Trainer(
        model=s.model(),
        args=TrainingArguments(
            output_dir=str(folder / "hf"),
            per_device_train_batch_size=s.batch,
            max_steps=s.steps,
            learning_rate=s.lr,
            logging_steps=s.interval,
            eval_strategy="no",
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
        ),
        train_dataset=s.dataset(),
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)  # it prints every log; not part of either side
    if bus is not None:
        bus.wrap(trainer)
    trainer.train()
    return Fit(marks, _clock() - start, own if bus is not None else None)


# ----------------------------------------------------------------- Lightning
def fit_lightning(s: Setup, variant: str) -> Fit:
    import lightning.pytorch as pl

    from obsbus.integrations.lightning import ObsbusCallback

    marks = Marks()

    class Clock(pl.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
            marks.tick()

    class LitGPT(pl.LightningModule):  # type: ignore[misc]
        def __init__(self, model: Any, lr: float) -> None:
            super().__init__()
            self.model, self.lr = model, lr

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> Any:
            return self.model(**batch).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=self.lr)

    start = _clock()
    folder = s.new_folder(f"lightning-{variant}")
    callbacks: list[Any] = [Clock()]
    own = None
    if variant.startswith("bridge"):
        plugins, loggers = s.plugins() if variant == "bridge+plugins" else ([], [])
        bus = ObsbusCallback(plugins, loggers, run_folder=folder / "run")
        own = OwnTimer()
        for name, value in vars(ObsbusCallback).items():
            if callable(value) and (name.startswith("on_") or name in ("setup", "teardown")):
                own.wrap(bus, name)
        callbacks.append(bus)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=s.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(folder / "pl"),
        callbacks=callbacks,
    )
    trainer.fit(LitGPT(s.model(), s.lr), s.loader())
    return Fit(marks, _clock() - start, own)


# ---------------------------------------------------------------- Accelerate
def _lm_loss(outputs: Any) -> Any:
    return outputs.loss


def fit_accelerate(s: Setup, variant: str) -> Fit:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState, PartialState

    from obsbus.integrations.accelerate import ObsbusTracker

    marks = Marks()
    every = s.interval
    start = _clock()
    folder = s.new_folder(f"accelerate-{variant}")
    model = s.model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=s.lr)
    try:
        if not variant.startswith("bridge"):
            accelerator = Accelerator(cpu=True)
            model, optimizer, loader = accelerator.prepare(model, optimizer, s.loader())
            for i, batch in enumerate(loader):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                if (i + 1) % every == 0:
                    accelerator.log({"train/loss": loss.detach()}, step=i + 1)
                marks.tick()
            return Fit(marks, _clock() - start)
        plugins, loggers = s.plugins() if variant == "bridge+plugins" else ([], [])
        # Accelerate on one CPU process gives the same model back and wraps the optimizer:
        # the Run is built first, so its tracker can go into Accelerator(log_with=...).
        backward: Callable[..., Any] = lambda loss, **kw: accelerator.backward(loss, **kw)  # noqa: E731
        with Run(
            model=model,
            optimizers=optimizer,
            max_duration=f"{s.steps}ba",
            callbacks=plugins,
            loggers=loggers,
            run_folder=folder / "run",
            backward=backward,
            handle_sigterm=False,
        ) as run:
            own = OwnTimer()
            for obj, name in ((run.engine, "run_event"), (run, "_set_batch"), (run, "_end_batch")):
                own.wrap(obj, name)
            trackers = [ObsbusTracker(run)] if variant == "bridge+plugins" else None
            if trackers:
                own.wrap(trackers[0], "log")
            accelerator = Accelerator(cpu=True, log_with=trackers)
            if trackers:
                accelerator.init_trackers("bench")
            model, optimizer, loader = accelerator.prepare(model, optimizer, s.loader())
            for batch in run.train(loader):
                loss = run.loss(_lm_loss, run.forward(model, **batch))
                run.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                step = run.state.timestamp._batch + 1
                if step % every == 0:
                    accelerator.log({"train/loss": loss.detach()}, step=step)
                marks.tick()
            accelerator.end_training()
        return Fit(marks, _clock() - start, own)
    finally:
        # Accelerate keeps process-wide singletons; every fit starts from none.
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        PartialState._reset_state()


FITS: dict[str, Callable[[Setup, str], Fit]] = {
    "hf": fit_hf,
    "lightning": fit_lightning,
    "accelerate": fit_accelerate,
}


# ------------------------------------------------------------------ reporting
@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The hosts' banners, advice and warnings, which are the same in every variant."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _silence_hosts() -> None:
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import transformers

    transformers.logging.set_verbosity_error()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _git_head() -> str:
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
    return f"`{head}` (+ uncommitted changes in `obsbus/`)" if dirty else f"`{head}`"


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def _versions() -> str:
    import accelerate
    import lightning
    import transformers

    return (
        f"python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, lightning {lightning.__version__}, accelerate "
        f"{accelerate.__version__}, obsbus {obsbus.__version__}"
    )


def profile_fit(s: Setup, host: str, top: int) -> list[str]:
    """One ``bridge+plugins`` fit under cProfile: obsbus's functions by own time."""
    profiler = cProfile.Profile()
    with _quiet():
        profiler.enable()
        fit = FITS[host](s, "bridge+plugins")
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(r"obsbus", top)
    lines = [f"{len(fit.marks)} steps; profiler overhead included.", "", "```"]
    body = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(body) if line.lstrip().startswith("ncalls")), 0)
    lines += [line.rstrip() for line in body[start:] if line.strip()]
    lines.append("```")
    return lines


def run_rounds(s: Setup, hosts: list[str], variants: list[str], repeats: int) -> dict[str, Any]:
    """Warm every variant up once, then ``repeats`` interleaved rounds; times per variant."""
    with _quiet():
        warm = Setup(**{**s.__dict__, "steps": max(s.warmup + 2, min(s.steps, 40))})
        for host in hosts:
            for variant in variants:
                FITS[host](warm, variant)
    s.fits = max(s.fits, warm.fits)
    floor = statistics.median(_timer_floor() for _ in range(3))
    keys = [f"{h}/{v}" for h in hosts for v in variants]
    steps: dict[str, list[float]] = {key: [] for key in keys}
    walls: dict[str, list[float]] = {key: [] for key in keys}
    own: dict[str, list[float]] = {key: [] for key in keys}
    for r in range(repeats):
        for host in hosts:
            shift = r % len(variants)
            for variant in [*variants[shift:], *variants[:shift]]:
                gc.collect()
                with _quiet():
                    fit = FITS[host](s, variant)
                key = f"{host}/{variant}"
                if len(fit.marks) != s.steps:
                    raise RuntimeError(f"{key}: {len(fit.marks)} of {s.steps} steps ran")
                steps[key].append(fit.step_time(s.warmup))
                walls[key].append(fit.wall)
                inside = fit.own_time(s.warmup, floor)
                if inside is not None:
                    own[key].append(inside)
    return {"steps": steps, "walls": walls, "own": own, "floor": floor}


def _range(values: list[float]) -> str:
    return f"{min(values) - 1:+.2%} to {max(values) - 1:+.2%}"


def report(s: Setup, hosts: list[str], variants: list[str], times: dict[str, Any]) -> list[str]:
    steps, walls, own = times["steps"], times["walls"], times["own"]
    lines = [
        "| host | variant | median ms/step | min ms/step | added µs/step (median) "
        "| ratio vs base (median) | ratio range, min to max | obsbus own µs/step (median) "
        "| own share of base step | one-off ms (setup+close) |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    verdicts = []
    for host in hosts:
        base, base_wall = steps[f"{host}/base"], walls[f"{host}/base"]
        base_med = statistics.median(base)
        for variant in variants:
            key = f"{host}/{variant}"
            t, wall = steps[key], walls[key]
            cells = ["", "", "", "", "", ""]
            if variant != "base":
                ratios = [v / b for v, b in zip(t, base, strict=True)]
                added = statistics.median(v - b for v, b in zip(t, base, strict=True))
                once = statistics.median(
                    (w - s.steps * v) - (bw - s.steps * b)
                    for v, w, b, bw in zip(t, wall, base, base_wall, strict=True)
                )
                cells[:3] = [
                    f"{added * 1e6:+.0f}",
                    f"{statistics.median(ratios):.4f}",
                    f"{min(ratios):.4f} to {max(ratios):.4f}",
                ]
                cells[5] = f"{once * 1e3:+.0f}"
            if own[key]:
                inside = statistics.median(own[key])
                cells[3:5] = [f"{inside * 1e6:.0f}", f"{inside / base_med:.2%}"]
            lines.append(
                f"| {host} | {variant} | {statistics.median(t) * 1e3:.2f} | {min(t) * 1e3:.2f} "
                f"| {' | '.join(cells)} |"
            )
        for variant in ("bridge", "bridge+plugins"):
            key = f"{host}/{variant}"
            ratios = [v / b for v, b in zip(steps[key], base, strict=True)]
            med = statistics.median(ratios)
            share = statistics.median(own[key]) / base_med
            if share >= TARGET:
                verdict = "MISSED (obsbus's own time alone is over the target)"
            elif med < 1 + TARGET:
                verdict = "MET"
            else:
                verdict = "UNCLEAR (end to end over, obsbus's own time under the target: noise?)"
            verdicts.append(
                f"- `{host}` `{variant}`: obsbus's own time {share:.2%} of the "
                f"{base_med * 1e3:.1f} ms base step; end to end {med - 1:+.2%} (median "
                f"per-round ratio, rounds {_range(ratios)}) -> **{verdict}**"
            )
        if "base_b" in variants:
            aa = [v / b for v, b in zip(steps[f"{host}/base_b"], base, strict=True)]
            verdicts.append(
                f"- `{host}` A/A control `base_b`: {statistics.median(aa) - 1:+.2%} "
                f"(rounds {_range(aa)})"
            )
    return [
        *lines,
        "",
        f"Timer cost subtracted from the own time: {times['floor'] * 1e9:.0f} ns a timed call.",
        "",
        f"Target: a bridge adds under {TARGET:.0%} to the step.",
        "",
        *verdicts,
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per fit")
    parser.add_argument("--warmup", type=int, default=20, help="first steps of a fit not timed")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds; medians reported")
    parser.add_argument("--interval", type=int, default=10, help="log interval, batches")
    parser.add_argument(
        "--hosts", default=",".join(HOSTS), help=f"comma-separated, of {', '.join(HOSTS)}"
    )
    parser.add_argument("--no-aa", action="store_true", help="leave out the A/A control base_b")
    parser.add_argument("--profile", choices=HOSTS, action="append", default=[])
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="the step clock: wall time, or this process's CPU time (all threads)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--embd", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args(argv)
    hosts = [h for h in args.hosts.split(",") if h]
    if unknown := sorted(set(hosts) - set(HOSTS)):
        parser.error(f"unknown hosts {unknown}; choose from {', '.join(HOSTS)}")
    if args.steps <= args.warmup or args.warmup < 1:
        parser.error(f"need 1 <= --warmup < --steps, got {args.warmup} and {args.steps}")
    variants = [v for v in VARIANTS if not (args.no_aa and v == "base_b")]

    global _clock
    _clock = CLOCKS[args.clock]
    started = datetime.datetime.now(datetime.UTC)
    load_before = _load()
    torch.set_num_threads(args.threads)
    _silence_hosts()
    folder = Path(tempfile.mkdtemp(prefix="obsbus-bench-bridges-"))
    s = Setup(
        args.steps,
        args.warmup,
        args.interval,
        args.batch,
        args.seq,
        args.vocab,
        args.layers,
        args.embd,
        args.lr,
        folder,
    )
    try:
        t0 = time.perf_counter()
        times = run_rounds(s, hosts, variants, args.repeats) if args.repeats > 0 else None
        elapsed = time.perf_counter() - t0
        print("# obsbus: cost of the trainer bridges per step\n")
        print(
            f"{started:%Y-%m-%d %H:%M} UTC, commit {_git_head()}; {_versions()}; "
            f"{os.cpu_count()} CPUs, torch threads {args.threads}; load average {load_before} "
            f"before and {_load()} after ({elapsed:.0f} s).\n"
        )
        print(
            f"GPT-2 {args.layers} layers, n_embd {args.embd}, vocab {args.vocab}, batch "
            f"{args.batch} x {args.seq} tokens, AdamW, CPU; {args.steps} steps a fit, the first "
            f"{args.warmup} untimed; {args.repeats} rounds, variants interleaved (order rotated "
            f"every round); step clock `{args.clock}`; plug-ins: SpeedMonitor, LRMonitor, "
            f"NaNMonitor, FileLogger, interval {args.interval} batches.\n"
        )
        if times is not None:
            print("\n".join(report(s, hosts, variants, times)))
        for host in args.profile:
            print(f"\n## cProfile: one `{host}` `bridge+plugins` fit, obsbus functions\n")
            print("\n".join(profile_fit(s, host, args.profile_top)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
