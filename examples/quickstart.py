"""Quickstart: train a small classifier on synthetic data with obsbus watching.

Runs in a few seconds on a CPU, needs no network, and writes a run folder:

    runs/default/<user>/<run_name>/
        report.html           the run at a glance: open it in a browser (RunReport;
                              needs obsbus[report])
        metrics-rank0.jsonl   one JSON object per logged call: step, epoch, batch,
                              wall_time and the metrics (pandas.read_json(path, lines=True))
        logs-rank0.txt        FileLogger's text log: metrics, hyperparameters
        tensorboard/          TensorBoard event files (when tensorboard is installed)
        traces/               the profiler's Chrome/Perfetto trace of batches 21-24
        config/               the run's own record: plug-ins, hparams, env, git, packages
        logs/train/rank-0/    the application log (loguru): debug/info/warning/error.log

The default monitor stack watches it: throughput (SpeedMonitor), memory
(MemoryMonitor: host memory on a CPU), learning rate (LRMonitor), NaN
(NaNMonitor) and gradient norm (OptimizerMonitor). A progress bar shows on
stderr (plain lines when stderr is not a terminal), and a metrics line goes to
the log every 50 batches. It ends by printing the run folder and the report.

Usage:
    python examples/quickstart.py [--epochs 3] [--workspace runs] [--run-name NAME]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from obsbus import LoggerDestination, RunFolder, Trainer
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.errors import MissingExtraError
from obsbus.log import reset_logging, setup_logging
from obsbus.loggers import FileLogger, InMemoryLogger, LoguruLogger, ProgressBarLogger
from obsbus.profiler import JSONTraceHandler, Profiler, cyclic_schedule
from obsbus.state import default_run_name


def optional_destinations() -> tuple[list[LoggerDestination], list[str]]:
    """TensorBoard and the report when their extras are installed; a hint for each missing."""
    found: list[LoggerDestination] = []
    missing = []
    try:
        from obsbus.loggers import TensorboardLogger

        found.append(TensorboardLogger(log_env=False))
    except MissingExtraError:
        missing.append("tensorboard (pip install 'obsbus[tensorboard]')")
    try:
        from obsbus.loggers import RunReport

        found.append(RunReport())
    except MissingExtraError:
        missing.append("the report (pip install 'obsbus[report]')")
    return found, missing


def synthetic_classification(batches: int, batch_size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Four Gaussian blobs in 16 dimensions; the label is the blob."""
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(4, 16, generator=torch.Generator().manual_seed(0)) * 2
    data = []
    for _ in range(batches):
        y = torch.randint(0, 4, (batch_size,), generator=gen)
        x = centers[y] + 2.5 * torch.randn(batch_size, 16, generator=gen)
        data.append((x, y))
    return data


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workspace", default="runs")
    parser.add_argument("--run-name", default=None)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 4),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    train, val = synthetic_classification(100, 64, seed=1), synthetic_classification(10, 64, seed=2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(train))
    memory = InMemoryLogger()
    run_name = args.run_name or default_run_name()
    folder = RunFolder.from_parts(workspace=args.workspace, exp_name=run_name)
    log = setup_logging(folder, module="train")
    log.info("quickstart: {} epochs of a 16-64-64-4 MLP on synthetic blobs", args.epochs)
    extra, missing = optional_destinations()
    for what in missing:
        log.warning("quickstart: without {}", what)
    # One short window: skip 20 batches, warm up 1, record 4; a Chrome/Perfetto trace.
    profiler = Profiler(cyclic_schedule(skip_first=20, wait=0, warmup=1, active=4, repeat=1),
                        [JSONTraceHandler()])

    with Trainer(
        model,
        train,
        max_duration=f"{args.epochs}ep",
        optimizers=optimizer,
        schedulers=scheduler,
        loss_fn=F.cross_entropy,
        eval_dataloader=val,
        eval_interval="1ep",
        callbacks=[SpeedMonitor(window_size=20), MemoryMonitor(), LRMonitor(), NaNMonitor(),
                   OptimizerMonitor(log_interval="10ba")],
        loggers=[ProgressBarLogger(), LoguruLogger(log_interval="50ba"), FileLogger(), memory,
                 *extra],
        profiler=profiler,
        run_name=run_name,
        run_folder=folder,
        device="cpu",
        hparams={"model": "mlp-16-64-64-4", "lr": 3e-3, "batch_size": 64},
    ) as trainer:
        trainer.fit()

    final = memory.get_timeseries("metrics/eval/loss")["metrics/eval/loss"][-1]
    print(f"\nTrained {trainer.state.timestamp.batch} in {trainer.state.timestamp.total_wct:.1f}s; "
          f"final eval loss {final:.4f}.")
    print(f"Run folder: {folder.root}")
    report = folder.root / "report.html"
    if report.is_file():
        print(f"Report: {report}  (open it in a browser)")
    reset_logging()
    return folder.root


if __name__ == "__main__":
    main()
