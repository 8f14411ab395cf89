"""A small run through every local destination and offline tracker, with secrets planted.

Usage: planted_secrets_run.py RUN_FOLDER --api-key=<secret> --token <secret> [more args]

The parent (tests/reliability/test_secrets_scan.py) plants secrets in the
environment (a secret-named variable, a token-shaped value under an innocent
name, a database URL), in this command line, and here in the hyperparameters
(SECRETS_HPARAMS, JSON) and in a bucket URI given to the Profiler. It then
scans everything this run wrote.
"""

from __future__ import annotations

import json
import os
import sys

import torch

from obsbus import Run
from obsbus.log import setup_logging
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
from obsbus.profiler import Profiler, cyclic_schedule

folder = sys.argv[1]
hparams = json.loads(os.environ["SECRETS_HPARAMS"])
console = open(os.path.join(folder, "console.txt"), "w", encoding="utf-8")  # noqa: SIM115
bar = open(os.path.join(folder, "progress.txt"), "w", encoding="utf-8")  # noqa: SIM115
log = setup_logging(folder, module="train")
try:
    Profiler(
        cyclic_schedule(),
        [],
        torch_prof_folder="t",
        torch_prof_remote_file_name=os.environ["SECRETS_URI"],
    )
except ValueError as exc:
    log.error("profiler refused: {}", exc)
    print(f"profiler refused: {exc}", file=sys.stderr)
loggers = [
    FileLogger(),
    ConsoleLogger(stream=console),
    ProgressBarLogger(stream=bar),
    LoguruLogger(),
    TensorboardLogger(),
    WandBLogger(
        project="secrets",
        mode="offline",
        init_kwargs={"config": {"init_url": hparams["db"]["url"]}},
    ),
    MLFlowLogger(),
    CometMLLogger(online=False),
    NeptuneLogger(mode="offline", project="ws/secrets"),
]
with Run(max_duration="3ba", run_folder=folder, hparams=hparams, loggers=loggers) as run:
    for i, _ in enumerate(run.train([[0]] * 3)):
        run.state.loss = torch.tensor(float(i))
console.close()
bar.close()
print("done")
