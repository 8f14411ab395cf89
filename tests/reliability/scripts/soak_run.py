"""Make many ``run.log_metrics`` calls through FileLogger and TensorBoard, sampling RSS.

Usage::

    soak_run.py RUN_FOLDER CALLS SHAPE FLUSH_INTERVAL

``SHAPE`` is ``batches`` (one call per training batch), ``inside-eval`` (every
call inside one ``run.eval`` batch: no boundary of any kind) or
``no-train-loop`` (calls inside ``with Run`` with no ``run.train``). A fresh
process, so its resident memory is this run's alone (in a test process,
memory an earlier test freed is filled again before RSS moves).

stdout: ``rss <calls made> <bytes>`` ten times during the calls, once before
(``rss 0``) and once after the last.
"""

from __future__ import annotations

import sys

import psutil

from obsbus import Run
from obsbus.loggers import FileLogger, TensorboardLogger


def main() -> None:
    folder, calls, shape, flush_interval = (
        sys.argv[1],
        int(sys.argv[2]),
        sys.argv[3],
        int(sys.argv[4]),
    )
    proc = psutil.Process()
    every = calls // 10
    loggers = [
        FileLogger(write_period=3600.0, flush_interval=flush_interval),
        TensorboardLogger(write_period=3600.0, flush_interval=flush_interval),
    ]

    def log(i: int) -> None:
        run.log_metrics({"soak/value": float(i), "soak/other": 1.0}, step=i)
        if i % every == 0:
            print(f"rss {i} {proc.memory_info().rss}", flush=True)

    with Run(max_duration=f"{calls}ba", run_folder=folder, loggers=loggers) as run:
        if shape == "batches":
            for i, _ in enumerate(run.train([[0]] * calls)):
                log(i)
        elif shape == "inside-eval":
            for _ in run.eval([[0]]):
                for i in range(calls):
                    log(i)
        else:
            for i in range(calls):
                log(i)
        print(f"rss {calls} {proc.memory_info().rss}", flush=True)


if __name__ == "__main__":
    main()
