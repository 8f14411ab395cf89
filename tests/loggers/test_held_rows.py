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
import threading
import time

import pytest

from obsbus import Run
from obsbus._held import MAX_HELD_ROWS
from obsbus.loggers import FileLogger, TensorboardLogger

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


def _train_against_a_blocked_writer(
    tmp_path: pathlib.Path, dest: object, batches: int, gate: threading.Event
) -> int:
    """Train ``batches`` one-row batches in a thread while ``gate`` holds ``dest``'s writer.

    Returns how many batches ran before training waited for the writer (all
    of them when it never did); then opens the gate and lets the run finish.
    """
    logged = [0]

    def train() -> None:
        with Run(max_duration=f"{batches}ba", run_folder=tmp_path, loggers=[dest]) as run:
            for i, _ in enumerate(run.train([[0]] * batches)):
                run.log_metrics({"train/score": float(i)})
                logged[0] = i + 1

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    last, still_since = -1, time.monotonic()
    while thread.is_alive() and time.monotonic() - still_since < 1.0:
        time.sleep(0.05)
        if logged[0] != last:
            last, still_since = logged[0], time.monotonic()
    ran = logged[0]
    gate.set()
    thread.join(120)
    assert not thread.is_alive()
    return ran


def _gate(obj: object, method: str) -> threading.Event:
    """Make ``obj.method`` wait for the returned event before it runs."""
    gate, original = threading.Event(), getattr(obj, method)

    def gated(*args: object) -> object:
        gate.wait(120)
        return original(*args)

    setattr(obj, method, gated)
    return gate


BLOCKED_BATCHES = 20 * MAX_HELD_ROWS
#: A writer that falls behind has at most two capped hand-overs queued, plus one being gathered.
MAX_QUEUED_ROWS = 4 * MAX_HELD_ROWS


def test_file_logger_queues_a_bounded_number_of_rows_for_a_slow_writer(tmp_path):
    """Hand-overs every 100 batches: a writer queue bounded in calls held every row.

    Before, the queue (1000 calls) took hundreds of hand-overs of 100 rows:
    every row of this run waited in memory for a writer that wrote none
    (+409 MB over 1e6 calls handed over every 1000 batches).
    """
    files = FileLogger(write_period=3600.0, flush_interval=100)
    ran = _train_against_a_blocked_writer(
        tmp_path, files, BLOCKED_BATCHES, _gate(files, "_write_metrics")
    )
    assert ran <= MAX_QUEUED_ROWS, f"{ran} rows queued for a writer that wrote none"
    rows = [json.loads(line) for line in (tmp_path / "metrics-rank0.jsonl").open()]
    scores = [r["train/score"] for r in rows if "train/score" in r]
    assert scores == [float(i) for i in range(BLOCKED_BATCHES)]


def test_tracker_queues_a_bounded_number_of_rows_for_a_slow_client(tmp_path):
    """TensorBoard hands over at every ``flush_interval``: the same bound as FileLogger's."""
    tracker = TensorboardLogger(write_period=3600.0, flush_interval=100, close_timeout=120)
    gate = _gate(tracker, "_client_log_metrics")
    written: list[float] = []
    client_log = tracker._client_log_metrics

    def record(values: dict[str, object], step: int) -> None:
        client_log(values, step)
        if "train/score" in values:
            written.append(values["train/score"])  # type: ignore[arg-type]

    tracker._client_log_metrics = record  # type: ignore[method-assign]
    ran = _train_against_a_blocked_writer(tmp_path, tracker, BLOCKED_BATCHES, gate)
    assert ran <= MAX_QUEUED_ROWS, f"{ran} rows queued for a client that took none"
    assert written == [float(i) for i in range(BLOCKED_BATCHES)]
