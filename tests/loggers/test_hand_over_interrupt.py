"""A signal that lands inside a hand-over loses no row and writes none twice.

Python runs a signal handler in the main thread between two bytecodes, so
SIGINT's ``KeyboardInterrupt`` (or the ``TrainingTerminated`` obsbus raises
for SIGTERM) can surface at any line of a destination's hand-over, and in
anything it calls. These tests raise the exception at the first, second, ...
line executed inside the hand-over (a trace function raising is delivered
into the traced frame, as a signal would be), until one hand-over runs to
its end untouched: every position is tried. After each, the run's
``exception`` path and close must have written every row logged before the
interrupt, exactly once and in order.

Which positions exist depends on the code, so the tests count them and
require enough to have tried the hand-over's inside (a run that never
fired would prove nothing).
"""

from __future__ import annotations

import json
import linecache
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import obsbus
from obsbus import Run, TrainingTerminated
from obsbus.loggers import FileLogger

from .test_tracker_base import FakeTracker

#: Only obsbus's own lines are interrupted: the standard library's locks and queues are
#: Python's to make signal-safe (a trace function can raise at points a signal never reaches).
OBSBUS = str(Path(obsbus.__file__).parent)
LOGGED = 9  # rows held when the interrupt comes: the loss of batches 1..9


class Interrupt:
    """Raises ``exc`` at the ``n``-th obsbus line executed inside the wrapped call (from 1)."""

    def __init__(self, n: int, exc: Callable[[], BaseException]) -> None:
        self.n, self.exc = n, exc
        self.lines = 0
        self.fired = False
        self._seen: set[tuple[int, int]] = set()

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and not self.fired and frame.f_code.co_filename.startswith(OBSBUS):
            where = (id(frame), frame.f_lineno)
            if where in self._seen and _is_with(frame):
                # Python reports a with-statement's exit (the __exit__ call) as its line
                # again, before the call, where no signal is delivered (it is checked after
                # calls): raising there would leak the lock, which no signal can.
                return self._trace
            self._seen.add(where)
            self.lines += 1
            if self.lines == self.n:
                self.fired = True
                raise self.exc()
        return self._trace

    def wrap(self, fn: Callable[[], None]) -> Callable[[], None]:
        def traced() -> None:
            sys.settrace(self._trace)
            try:
                fn()
            finally:
                sys.settrace(None)

        return traced


def _is_with(frame: Any) -> bool:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip().startswith("with ")


EXCEPTIONS = [
    pytest.param(KeyboardInterrupt, id="SIGINT-KeyboardInterrupt"),
    pytest.param(lambda: TrainingTerminated(15), id="SIGTERM-TrainingTerminated"),
]


def _run_interrupted(dest: Any, folder: Path, interrupt: Interrupt) -> None:
    """Train; after batch 9's loss is held, force a hand-over that ``interrupt`` breaks."""
    with (
        pytest.raises((KeyboardInterrupt, SystemExit)),
        Run(max_duration="20ba", run_folder=folder, loggers=[dest]) as run,
    ):
        for i, _ in enumerate(run.train([[0]] * 20)):
            run.state.loss = torch.tensor(float(i))
            if i == LOGGED:
                interrupt.wrap(dest._hand_over)()
                if not interrupt.fired:
                    raise KeyboardInterrupt  # the signal came just after the hand-over


def _every_position(
    make: Callable[[], Any], written: Callable[[Any, Path], list[int]], tmp_path: Path, exc: Any
) -> int:
    """Interrupt at every line of the hand-over in turn; returns how many positions there were."""
    n = 0
    while True:
        n += 1
        dest, folder = make(), tmp_path / f"at-line-{n}"
        interrupt = Interrupt(n, exc)
        _run_interrupted(dest, folder, interrupt)
        steps = written(dest, folder)
        assert steps == list(range(1, LOGGED + 1)), (
            f"interrupted at line {n} of the hand-over: rows written {steps}"
        )
        if not interrupt.fired:
            return n - 1
        assert n < 2000, "the hand-over never ran to its end"


def _jsonl_steps(dest: FileLogger, folder: Path) -> list[int]:
    lines = (folder / "metrics-rank0.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


@pytest.mark.parametrize("exc", EXCEPTIONS)
def test_file_logger_hand_over_loses_and_repeats_nothing_at_any_line(tmp_path, exc):
    positions = _every_position(
        lambda: FileLogger(write_period=3600.0), _jsonl_steps, tmp_path, exc
    )
    assert positions >= 10  # the hand-over's inside was really tried


def _client_steps(dest: FakeTracker, folder: Path) -> list[int]:
    return [step for step, values in dest.of("metrics") if "loss/train/total" in values]


@pytest.mark.parametrize("exc", EXCEPTIONS)
def test_tracker_hand_over_loses_and_repeats_nothing_at_any_line(tmp_path, exc):
    positions = _every_position(
        lambda: FakeTracker(write_period=3600.0, log_env=False, log_git=False),
        _client_steps,
        tmp_path,
        exc,
    )
    assert positions >= 10


def test_rows_written_after_an_interrupted_hand_over_keep_their_order(tmp_path):
    """A row logged by the exception path itself follows the rows of the broken hand-over."""
    files = FileLogger(write_period=3600.0)
    interrupt = Interrupt(10**9, KeyboardInterrupt)  # never fires: the hand-over completes
    folder = tmp_path / "run"
    with (
        pytest.raises(KeyboardInterrupt),
        Run(max_duration="20ba", run_folder=folder, loggers=[files]) as run,
    ):
        for i, _ in enumerate(run.train([[0]] * 20)):
            run.state.loss = torch.tensor(float(i))
            if i == LOGGED:
                interrupt.wrap(files._hand_over)()
                run.log_metrics({"last": 1.0}, step=99)
                raise KeyboardInterrupt
    assert _jsonl_steps(files, folder) == [*range(1, LOGGED + 1), 99]
