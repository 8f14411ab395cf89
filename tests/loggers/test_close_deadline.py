"""The end of a run is bounded by one deadline that every destination shares.

Before: each hung tracker waited ``close_timeout`` at ``fit_end`` and again
at ``close``, one tracker after another (two hung trackers at 1 s: 4 s), the
message counted queued calls while ``undelivered_writes`` counted rows, and
two instances of one class had one name in every message.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import pytest

from obsbus import Run
from obsbus._deadline import SharedDeadline
from obsbus.loggers import FileLogger, InMemoryLogger

from .test_tracker_base import FakeTracker

TIMEOUT = 1.0


class Hung(FakeTracker):
    """A client whose every metrics call blocks until released."""

    def __init__(self, release: threading.Event, **kwargs: Any) -> None:
        super().__init__(log_env=False, log_git=False, close_timeout=TIMEOUT, **kwargs)
        self.release = release

    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        self.release.wait(60)


def _not_delivered(caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    counts = {}
    for record in caplog.records:
        found = re.search(
            r"obsbus: (\S+)'s client did not finish.*; (\d+) write\(s\) were not",
            record.getMessage(),
        )
        if found:
            counts[found[1]] = int(found[2])
    return counts


@pytest.mark.parametrize("ending", ["fit_end", "exception"])
def test_two_hung_trackers_cost_one_close_timeout_in_all(caplog, ending):
    release = threading.Event()
    first, second = Hung(release), Hung(release)
    memory = InMemoryLogger()
    try:
        with caplog.at_level(logging.ERROR, logger="obsbus"):
            started = None
            try:
                with Run(max_duration="30ba", loggers=[first, second, memory]) as run:
                    for i, _ in enumerate(run.train([[0]] * 30)):
                        run.state.loss = float(i)
                    started = time.monotonic()
                    if ending == "exception":
                        raise RuntimeError("the run fails here")
            except RuntimeError:
                pass
            elapsed = time.monotonic() - started
        # One shared deadline (1 s) for fit_end (or exception), one for close, and a tracker
        # that already timed out does not wait again: about 1 s, where it was 4.
        assert elapsed < 2.5 * TIMEOUT, f"the end of the run took {elapsed:.1f}s"
        assert [first.name, second.name] == ["Hung", "Hung#2"]
        # The message's count is the attribute's: rows, not queued calls.
        assert _not_delivered(caplog) == {
            "Hung": first.undelivered_writes,
            "Hung#2": second.undelivered_writes,
        }
        assert first.undelivered_writes >= 29  # every row after the one that hangs
        # The other destination got everything.
        assert memory.get_timeseries("loss/train/total")["step"] == list(range(1, 31))
    finally:
        release.set()


def test_two_file_loggers_are_named_apart_in_failures(tmp_path):
    a = FileLogger("a.txt", "a.jsonl")
    b = FileLogger("b.txt", "b.jsonl")
    with Run(max_duration="1ba", run_folder=tmp_path, loggers=[a, b]) as run:
        for _ in run.train([[0]]):
            run.state.loss = 0.0
        assert (a.name, b.name) == ("FileLogger", "FileLogger#2")
        assert {t.name for t in threading.enumerate()} >= {
            "obsbus-writer-FileLogger",
            "obsbus-writer-FileLogger#2",
        }


def test_the_shared_deadline_cuts_each_wait_to_what_is_left():
    deadline = SharedDeadline()
    assert deadline.left(5.0) == 5.0
    deadline.begin(0.3)
    deadline.begin(100.0)  # a step already ending keeps its deadline
    assert 0.0 < deadline.left(5.0) <= 0.3
    assert deadline.left(0.1) == 0.1
    time.sleep(0.35)
    assert deadline.left(5.0) == 0.0
    deadline.end()
    assert not deadline.active and deadline.left(5.0) == 5.0
