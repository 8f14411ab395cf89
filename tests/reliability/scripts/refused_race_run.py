"""Start runs of one name in one folder, once per attempt, when the parent says go.

Usage::

    refused_race_run.py FOLDER BARRIER ATTEMPTS

As ``race_run.py``, but the run has a RunReport and its process id in its
hyperparameters, so the parent can tell whose run record and status file the
folder holds: the loser's must be nowhere. For attempt ``i`` the script prints
``ready i``, spins until ``BARRIER-i`` exists, runs 2 batches in
``FOLDER-i`` and prints ``won i PID`` or ``lost i PID <type>: <message>``.
"""

from __future__ import annotations

import os
import sys

from obsbus import Run
from obsbus.loggers import FileLogger, RunReport


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    folder, barrier, attempts = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pid = os.getpid()
    for i in range(attempts):
        say(f"ready {i}")
        go = f"{barrier}-{i}"
        while not os.path.exists(go):  # spin: both copies start within microseconds
            pass
        try:
            # RunReport first: it writes its status file at init, before FileLogger's turn.
            with Run(
                max_duration="2ba",
                run_folder=f"{folder}-{i}",
                run_name="race",
                hparams={"pid": pid},
                loggers=[RunReport(), FileLogger(write_period=0.0)],
            ) as run:
                for _ in run.train([[0]] * 2):
                    run.state.loss = float(i)
        except Exception as exc:  # the parent judges which error it was
            say(f"lost {i} {pid} {type(exc).__name__}: {exc}")
        else:
            say(f"won {i} {pid}")


if __name__ == "__main__":
    main()
