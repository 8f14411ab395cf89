"""A run with FileLogger and TensorBoard that the parent stops with a signal, or races.

Usage:
    signalled_run.py train RUN_FOLDER STEPS   -- train; print ``logged <step>`` per step
    signalled_run.py race RUN_FOLDER BARRIER  -- wait for BARRIER to exist, then start a run
                                                 named "race" in RUN_FOLDER; print ``won``

``logged <step>`` is printed (flushed) right after the step's loss was handed
to the destinations (at ``batch_end``), so every step printed must be on disk
after the process ends, whatever signal ended it.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from obsbus import Callback, Run
from obsbus.loggers import FileLogger, TensorboardLogger


class Report(Callback):
    def batch_end(self, state, logger):
        print(f"logged {state.timestamp.batch.value}", flush=True)


mode, folder = sys.argv[1], sys.argv[2]
if mode == "train":
    steps = int(sys.argv[3])
    loggers = [FileLogger(write_period=0.05), TensorboardLogger(write_period=0.05)]
    with Run(
        max_duration=f"{steps}ba", run_folder=folder, loggers=loggers, callbacks=[Report()]
    ) as run:
        print("started", flush=True)
        for i, _ in enumerate(run.train([[0]] * steps)):
            run.state.loss = torch.tensor(float(i))
            time.sleep(0.001)
else:
    barrier = sys.argv[3]
    while not os.path.exists(barrier):
        time.sleep(0.0005)
    with Run(max_duration="2ba", run_folder=folder, run_name="race", loggers=[FileLogger()]) as run:
        for _ in run.train([[0]] * 2):
            run.state.loss = 0.0
    print("won", flush=True)
