"""Start runs of one name in one folder, once per attempt, when the parent says go.

Usage::

    race_run.py FOLDER BARRIER ATTEMPTS [slow-stat]

For attempt ``i`` the script prints ``ready i``, spins until the file
``BARRIER-i`` exists, then builds a ``Run`` named ``race`` in ``FOLDER-i``
with a FileLogger and trains 2 batches. It prints ``won i`` if that worked,
``lost i <type>: <message>`` if the run could not start. Two copies of the
script race for each folder.

``slow-stat`` makes ``Path.exists`` on the logger's files 50 ms slower (a
network file system): any gap between checking that a file is free and
creating it is then wide open.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from obsbus import Run
from obsbus.loggers import FileLogger


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def slow_stat() -> None:
    real_exists = Path.exists

    def exists(self: Path, *args: object, **kwargs: object) -> bool:
        found = real_exists(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.suffix in (".txt", ".jsonl"):
            time.sleep(0.05)
        return found

    Path.exists = exists  # type: ignore[method-assign]


def main() -> None:
    folder, barrier, attempts = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if sys.argv[4:] == ["slow-stat"]:
        slow_stat()
    for i in range(attempts):
        say(f"ready {i}")
        go = f"{barrier}-{i}"
        while not os.path.exists(go):  # spin: both copies start within microseconds
            pass
        try:
            with Run(
                max_duration="2ba",
                run_folder=f"{folder}-{i}",
                run_name="race",
                loggers=[FileLogger(write_period=0.0)],
            ) as run:
                for _ in run.train([[0]] * 2):
                    run.state.loss = float(i)
        except Exception as exc:  # the parent judges which error it was
            say(f"lost {i} {type(exc).__name__}: {exc}")
        else:
            say(f"won {i}")


if __name__ == "__main__":
    main()
