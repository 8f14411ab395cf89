"""Profiler smoke test: a tiny CPU run profiled by obsbus and torch.profiler, traces checked.

Trains a small model for 8 batches (one epoch) with
``cyclic_schedule(wait=0, warmup=1, active=2, repeat=2)``, a JSONTraceHandler
and ``torch.profiler`` (``torch_prof_folder``), in a temporary folder, with no
network. Two windows are recorded: batches 1-2 and 4-5 (0-based; 0 and 3 warm
up, 6 and 7 are skipped); the obsbus trace holds the warm-up batch too (markers
record in warm-up batches, as Composer's do). Checks that each window's obsbus trace and
torch.profiler trace exist, and the merged trace; that every file parses as a
Chrome trace, holds only documented event phases, and that every ``B`` has its
``E`` on the same pid/tid with ``ts`` never going back. Prints one line per
check and exits non-zero if any fails.

Usage:
    python scripts/profiler_smoke.py [--keep]     # --keep: leave the run folder and print it
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from obsbus import Trainer
from obsbus.profiler.json_trace_handler import JSONTraceHandler
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.schedule import cyclic_schedule

BATCHES = 8
# batches done at the save -> the batches torch.profiler records (after its warm-up batch)
WINDOWS = {3: (1, 2), 6: (4, 5)}
#: The batches in the obsbus trace of each window: the warm-up batch, then the recorded ones.
MARKED = {done: (recorded[0] - 1, *recorded) for done, recorded in WINDOWS.items()}
# The phases of the Trace Event Format (duration, complete, instant, counter, async,
# flow, sample, object, metadata, memory dump, mark, context).
PHASES = frozenset("BEXiICbnestfPNODMVvRc()")


def run(folder: Path) -> Profiler:
    torch.manual_seed(0)
    data = [(torch.randn(4, 4), torch.randn(4, 1)) for _ in range(BATCHES)]
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    profiler = Profiler(
        cyclic_schedule(wait=0, warmup=1, active=2, repeat=2),
        [JSONTraceHandler()],
        torch_prof_folder="torch_traces",
    )
    with Trainer(
        model,
        data,
        "1ep",
        loss_fn=F.mse_loss,
        run_name="smoke",
        run_folder=folder,
        device="cpu",
        profiler=profiler,
    ) as trainer:
        trainer.fit()
    return profiler


def load(path: Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace, after checking its shape, phases and B/E pairs."""
    if not path.is_file():
        raise AssertionError(f"missing: {path}")
    doc = json.loads(path.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    assert isinstance(events, list) and events, f"{path.name}: no traceEvents"
    phases = {e.get("ph") for e in events}
    assert phases <= PHASES, f"{path.name}: undocumented phases {sorted(phases - PHASES)}"
    stacks: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    last: dict[tuple[Any, Any], float] = {}
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0, f"{path.name}: negative duration {e}"
        if e["ph"] not in ("B", "E"):
            continue
        row = (e["pid"], e["tid"])
        assert e["ts"] >= last.get(row, float("-inf")), f"{path.name}: ts goes back at {e}"
        last[row] = e["ts"]
        if e["ph"] == "B":
            stacks.setdefault(row, []).append(e)
            continue
        assert stacks.get(row), f"{path.name}: an E without its B on pid/tid {row}: {e}"
        begin = stacks[row].pop()
        assert e.get("name", begin["name"]) == begin["name"], f"{path.name}: {begin} ended by {e}"
    open_spans = [b["name"] for row in stacks.values() for b in row]
    assert not open_spans, f"{path.name}: B without E: {open_spans}"
    return events


def steps(events: list[dict[str, Any]]) -> list[int]:
    prefix = "ProfilerStep#"
    return sorted(int(e["name"][len(prefix) :]) for e in events if e["name"].startswith(prefix))


def checks(folder: Path, profiler: Profiler) -> dict[str, Callable[[], str]]:
    traces, torch_traces = folder / "traces", folder / "torch_traces"

    def check_json() -> str:
        counts = []
        for done, recorded in MARKED.items():
            events = load(traces / f"ep1-ba{done}-rank0.json")
            batches = sorted(
                e["args"]["batch"] for e in events if e["name"] == "event/batch" and e["ph"] == "B"
            )
            assert batches == list(recorded), f"ba{done}: recorded batches {batches}"
            counts.append(len(events))
        return f"2 windows (ep1-ba3, ep1-ba6), {counts} events, B/E paired"

    def check_torch() -> str:
        counts = []
        for done, recorded in WINDOWS.items():
            events = load(torch_traces / f"rank0.{done}.pt.trace.json")
            assert steps(events) == list(recorded), f"rank0.{done}: steps {steps(events)}"
            assert any(e.get("cat") == "cpu_op" for e in events), f"rank0.{done}: no operators"
            counts.append(len(events))
        tp = profiler.torch_profiler
        assert tp is not None and not tp.failed
        return f"2 windows (rank0.3, rank0.6), {counts} events, CPU operators"

    def check_merged() -> str:
        events = load(traces / "merged_trace.json")
        assert {e["pid"] for e in events} == {0}, "merged: expected one rank row"
        assert steps(events) == [1, 2, 4, 5], f"merged: torch steps {steps(events)}"
        spans = sum(e["name"] == "event/batch" and e["ph"] == "B" for e in events)
        assert spans == 6, f"merged: {spans} event/batch spans"
        return f"{len(events)} events: obsbus spans and torch.profiler steps on rank 0"

    return {
        "JSON traces": check_json,
        "torch.profiler traces": check_torch,
        "merged trace": check_merged,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check the profiler's traces on a tiny run.")
    parser.add_argument("--keep", action="store_true", help="keep the run folder")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="obsbus-profiler-smoke-"))
    failures = 0
    try:
        profiler = run(folder)
        for name, check in checks(folder, profiler).items():
            try:
                print(f"ok    {name}: {check()}")
            except Exception as exc:  # report every check, then fail
                failures += 1
                print(f"FAIL  {name}: {exc}"[:2000])
    finally:
        if args.keep:
            print(f"run folder: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print("profiler smoke: " + ("all traces ok" if not failures else f"{failures} failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
