"""What a destination holds is bounded on every ``log_metrics`` path, and a run's files are its own.

- Memory: FileLogger and the trackers hold rows until a hand-over, which
  used to come only at a batch boundary; a loop that logs without one (a
  long ``run.eval``, a loop that never calls ``run.train``) held every row
  until close (+1.4 KB a call, all lost on kill -9).
- Ownership: two runs started at the same instant in one folder both passed
  FileLogger's "does the file exist" check and one overwrote the other's
  metrics; the files are now created exclusively.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from obsbus import Run
from obsbus._held import MAX_HELD_ROWS
from obsbus.loggers import FileLogger

from .test_tracker_base import FakeTracker

CALLS = 5 * MAX_HELD_ROWS + 7


def _log_without_a_batch_boundary(run: Run, calls: int, held: list[int], dest: object) -> None:
    for i in range(calls):
        run.log_metrics({"eval/score": float(i)}, step=i)
        held.append(len(dest._held))  # type: ignore[attr-defined]


@pytest.mark.parametrize("inside", ["eval", "no-train"])
def test_file_logger_holds_at_most_the_cap_without_batch_boundaries(tmp_path, inside):
    files = FileLogger(write_period=3600.0)
    held: list[int] = []
    with Run(max_duration="1ba", run_folder=tmp_path, loggers=[files]) as run:
        if inside == "eval":
            for _ in run.eval([[0]]):
                _log_without_a_batch_boundary(run, CALLS, held, files)
        else:
            _log_without_a_batch_boundary(run, CALLS, held, files)
        run.state.loss = 0.0
    assert max(held) < MAX_HELD_ROWS
    rows = [json.loads(line) for line in (tmp_path / "metrics-rank0.jsonl").open()]
    scores = [r["eval/score"] for r in rows if "eval/score" in r]
    assert scores == [float(i) for i in range(CALLS)]  # every one written, once, in order


def test_tracker_holds_at_most_the_cap_without_batch_boundaries(tmp_path):
    tracker = FakeTracker(write_period=3600.0, log_env=False, log_git=False)
    held: list[int] = []
    with Run(max_duration="1ba", run_folder=tmp_path, loggers=[tracker]) as run:
        _log_without_a_batch_boundary(run, CALLS, held, tracker)
        run.state.loss = 0.0
    assert max(held) < MAX_HELD_ROWS
    scores = [v["eval/score"] for _, v in tracker.of("metrics") if "eval/score" in v]
    assert scores == [float(i) for i in range(CALLS)]


def test_a_file_that_appears_after_the_check_is_not_overwritten(tmp_path, monkeypatch):
    """The race: another run creates the file between FileLogger's check and its open."""
    other = tmp_path / "metrics-rank0.jsonl"
    real_exists = pathlib.Path.exists

    def exists_then_taken(self: pathlib.Path) -> bool:
        result = real_exists(self)
        if self == other and not result:
            other.write_text('{"step": 1, "the other run": 1}\n')  # it wins the race now
        return result

    monkeypatch.setattr(pathlib.Path, "exists", exists_then_taken)
    with (
        pytest.raises(FileExistsError, match=r"metrics-rank0.jsonl' already exists. To fix"),
        Run(max_duration="1ba", run_folder=tmp_path, loggers=[FileLogger()]) as run,
    ):
        for _ in run.train([[0]]):
            run.state.loss = 0.0
    assert other.read_text() == '{"step": 1, "the other run": 1}\n'  # the other run's, intact
    assert not (tmp_path / "logs-rank0.txt").exists()  # ours, made a moment before, removed
