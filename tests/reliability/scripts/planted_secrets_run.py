"""A small run through every local destination and offline tracker, with secrets planted.

Usage: planted_secrets_run.py CONFIG.json [--api-key=<secret> --token <secret> ...]

The parent (tests/reliability/test_secrets_scan.py) plants secrets in the
environment, in this command line and in CONFIG.json (outside the folders it
scans): the hyperparameters, a W&B ``config=``, a bucket URI for the Profiler
and a secret pattern to add. This script holds no secret itself. It then scans
everything this run wrote, and this process's stdout and stderr.

Every tracker waits up to CONFIG's ``close_timeout`` for its client at the end
(on a loaded machine starting four tracker clients takes longer than the 30 s
default, and what the deadline cuts off never reaches the store); the last line
before ``done`` is ``undelivered {name: count}``, each tracker's
``undelivered_writes``.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path

import torch

from obsbus import Run
from obsbus.log import reset_logging, setup_logging
from obsbus.loggers import (
    CometMLLogger,
    ConsoleLogger,
    FileLogger,
    LoguruLogger,
    MLFlowLogger,
    NeptuneLogger,
    ProgressBarLogger,
    TensorboardLogger,
    WandBLogger,
)
from obsbus.masking import add_secret_pattern
from obsbus.profiler import Profiler, cyclic_schedule

config = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
folder = Path(config["run_folder"])
add_secret_pattern(config["pattern"])
log = setup_logging(folder, module="train")
try:  # a user's typo: the error quotes the URI, and the user prints it
    Profiler(cyclic_schedule(), [], torch_prof_remote_file_name=config["profiler_uri"])
except ValueError:
    traceback.print_exc()
    logging.getLogger("obsbus").exception("profiler refused")
with (
    open(folder / "console.txt", "w", encoding="utf-8") as console,
    open(folder / "progress.txt", "w", encoding="utf-8") as bar,
):
    wait = float(config.get("close_timeout", 30.0))
    trackers = [
        TensorboardLogger(close_timeout=wait),
        WandBLogger(project="secrets", mode="offline", init_kwargs={"config": config["wandb"]},
                    close_timeout=wait),
        MLFlowLogger(close_timeout=wait),
        CometMLLogger(online=False, close_timeout=wait),
        NeptuneLogger(mode="offline", project="ws/secrets", close_timeout=wait),
    ]  # fmt: skip
    loggers = [
        FileLogger(),
        ConsoleLogger(stream=console),
        ProgressBarLogger(stream=bar),
        LoguruLogger(),
        *trackers,
    ]
    with Run(max_duration="3ba", run_folder=folder, hparams=config["hparams"],
             loggers=loggers, run_name="scan") as run:  # fmt: skip
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(float(i))
reset_logging()
lost = {t.name: t.undelivered_writes for t in trackers}
print("undelivered " + json.dumps(lost))
print("done")
