"""Hung and raising destinations: training finishes, and the end of the run is bounded once.

One run holds the trouble at once: two instances of one hung tracker (a
:class:`~obsbus.loggers._tracker.TrackerDestination` whose client blocks in
``_client_log_metrics`` on an Event), a destination whose ``log_metrics``
raises, and, in the ``trackers+FileLogger`` variant, a FileLogger whose file
writes block too (its writer thread hangs, as on a dead network mount); all
with ``close_timeout=2``. An InMemoryLogger beside them must get every step.

The attack is on the end of the run: ``fit_end`` (or ``exception``) and
``close`` must share one deadline among all destinations, so the whole end
costs about one ``close_timeout``, not one per hung destination and per step
(before: each tracker waited at ``fit_end`` and again at ``close``, one after
another, 4 timeouts for two; the FileLogger waited 60 s twice). The error a
hung tracker gets at close must count what its ``undelivered_writes`` counts
(it counted queued calls), and the two trackers must be named apart (``Hung``,
``Hung#2``). The hung threads are released at the end of each test.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from obsbus import LoggerDestination, Run
from obsbus.loggers import FileLogger, InMemoryLogger
from obsbus.loggers import file_logger as file_logger_module
from obsbus.loggers._tracker import RunInfo, TrackerDestination

TIMEOUT = 2.0
BATCHES = 40
#: One close_timeout plus a second of margin for a noisy 2-core machine. A destination that
#: waits at fit_end and again at close takes 2 timeouts (4 s); unshared waits took 8 s and more.
BOUND_S = 1.5 * TIMEOUT


class Hung(TrackerDestination):
    """A tracker whose client blocks on every metrics call until released."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__(log_env=False, log_git=False, close_timeout=TIMEOUT, write_period=0.0)
        self.release = release

    def _client_start(self, info: RunInfo) -> None:
        pass

    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        self.release.wait(120)

    def _client_finish(self, failed: bool) -> None:
        pass


class Raising(LoggerDestination):
    """A destination whose every ``log_metrics`` raises, on the training thread."""

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        raise OSError("the tracker's server said 500")


class _BlockingFile:
    """A file whose writes block until ``release`` is set (a hung mount), then go through."""

    def __init__(self, f: Any, release: threading.Event) -> None:
        self._f, self._release = f, release

    def write(self, text: str) -> int:
        self._release.wait(120)
        return int(self._f.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _hang_file_writes(monkeypatch: pytest.MonkeyPatch, release: threading.Event, where: Path):
    real_open = file_logger_module._open

    def opener(path: Path, mode: str) -> Any:
        f = real_open(path, mode)
        return _BlockingFile(f, release) if Path(path).is_relative_to(where) else f

    monkeypatch.setattr(file_logger_module, "_open", opener)


def _undelivered(records: list[logging.LogRecord]) -> dict[str, int]:
    """``{name: count}`` from the close errors that say what was not delivered."""
    counts: dict[str, int] = {}
    for record in records:
        found = re.search(
            r"obsbus: (\S+?)(?:'s client)? did not finish.*?(\d+) write\(s\) were not delivered",
            record.getMessage(),
        )
        if found:
            counts[found[1]] = counts.get(found[1], 0) + int(found[2])
    return counts


@pytest.mark.parametrize("hung_files", [False, True], ids=["trackers", "trackers+FileLogger"])
@pytest.mark.parametrize("ending", ["fit_end", "exception"])
def test_hung_and_raising_destinations_cost_one_close_timeout_in_all(
    tmp_path, monkeypatch, caplog, ending, hung_files
):
    release = threading.Event()
    hung_folder = tmp_path / "hung"
    if hung_files:
        _hang_file_writes(monkeypatch, release, hung_folder)
    first, second = Hung(release), Hung(release)
    files, raising, memory = FileLogger(write_period=0.0), Raising(), InMemoryLogger()
    started = float("nan")  # set after the last batch; nan fails the bound if never reached
    try:
        with caplog.at_level(logging.WARNING, logger="obsbus"):
            try:
                with Run(
                    max_duration=f"{BATCHES}ba",
                    run_folder=hung_folder,
                    loggers=[first, files, raising, second, memory],
                ) as run:
                    for i, _ in enumerate(run.train([[0]] * BATCHES)):
                        run.state.loss = float(i)
                    started = time.monotonic()
                    if ending == "exception":
                        raise RuntimeError("the run fails after its last batch")
            except RuntimeError:
                pass
            elapsed = time.monotonic() - started
        messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        # Training went on through all of it, and the healthy destination has every step.
        assert memory.get_timeseries("loss/train/total")["step"] == list(range(1, BATCHES + 1))
        assert elapsed < BOUND_S, (
            f"the end of the run took {elapsed:.1f}s with close_timeout={TIMEOUT}s: "
            "the destinations' waits are not one shared deadline"
        )
        # Two of one class, named apart, each with its own count, which is the attribute's.
        assert (first.name, second.name) == ("Hung", "Hung#2")
        counts = {k: v for k, v in _undelivered(caplog.records).items() if k.startswith("Hung")}
        assert counts == {"Hung": first.undelivered_writes, "Hung#2": second.undelivered_writes}, (
            messages
        )
        assert first.undelivered_writes >= BATCHES - 1  # every row after the one that hangs
        # The raising destination is reported once, by name, and counted.
        raised = [m for m in messages if m.startswith("obsbus: Raising.log_metrics failed")]
        assert len(raised) == 1, messages
        summary = [r.getMessage() for r in caplog.records if "Raising failed" in r.getMessage()]
        assert summary == [
            f"obsbus: Raising failed {BATCHES} time(s); first: log_metrics: "
            'OSError("the tracker\'s server said 500")'
        ]
    finally:
        release.set()  # the hung writer threads finish and exit
