"""A FileLogger run that the parent kills with SIGKILL, or that kills itself mid-line; resume.

Usage::

    killed_run.py train RUN_FOLDER STEPS
    killed_run.py torn RUN_FOLDER STEPS N
    killed_run.py resume RUN_FOLDER LAST_STEP STEPS

``train``: train until the parent sends SIGKILL. ``torn``: the ``N``-th write
to the JSON Lines file writes half of its text, reaches the OS, and then
the process sends itself SIGKILL (a kill in the middle of a line).
``resume``: ``FileLogger(resume=True)`` in the same run folder, with the
run's timestamp restored to ``LAST_STEP`` batches, then ``STEPS`` batches.

stdout protocol, one line each, flushed as written:

- ``started`` once the run is set up;
- ``logged <step> <monotonic seconds>`` at ``batch_end`` (callbacks run before
  destinations), once the step's loss was handed to the FileLogger.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from obsbus import Callback, Run, Timestamp
from obsbus.loggers import FileLogger
from obsbus.loggers import file_logger as file_logger_module

WRITE_PERIOD_S = 0.05
STEP_S = 0.02  # slow steps: a write period holds few rows, an 8 KB buffer many


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Report(Callback):
    def batch_end(self, state: Any, logger: Any) -> None:
        say(f"logged {state.timestamp.batch.value} {time.monotonic():.6f}")


class _TornOnWrite:
    """The ``n``-th write puts half its text on disk, then the process is killed."""

    def __init__(self, f: Any, n: int) -> None:
        self._f, self._n = f, n

    def write(self, text: str) -> int:
        self._n -= 1
        if self._n == 0:
            self._f.write(text[: len(text) // 2])
            self._f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return int(self._f.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def tear_the_nth_jsonl_write(n: int) -> None:
    real_open = file_logger_module._open

    def opener(path: Path, mode: str) -> Any:
        f = real_open(path, mode)
        return _TornOnWrite(f, n) if str(path).endswith(".jsonl") else f

    file_logger_module._open = opener  # type: ignore[assignment]


def main() -> None:
    mode, folder = sys.argv[1], sys.argv[2]
    start, steps = (
        (int(sys.argv[3]), int(sys.argv[4])) if mode == "resume" else (0, int(sys.argv[3]))
    )
    if mode == "torn":
        tear_the_nth_jsonl_write(int(sys.argv[4]))
    files = FileLogger(write_period=WRITE_PERIOD_S, flush_interval=10**6, resume=mode == "resume")
    run = Run(
        max_duration=f"{start + steps}ba", run_folder=folder, loggers=[files], callbacks=[Report()]
    )
    # Restoring a checkpoint's progress: there is no Run argument for it; the state's timestamp
    # is what every destination reads its step from.
    run.state.timestamp = Timestamp(batch=start, sample=start)
    with run:
        say("started")
        for i, _ in enumerate(run.train([[0]] * steps)):
            run.state.loss = float(start + i + 1)
            time.sleep(STEP_S)


if __name__ == "__main__":
    main()
