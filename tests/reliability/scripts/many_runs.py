"""Many short runs in one process, one destination each, sampling fds, threads and RSS.

Usage::

    many_runs.py CASE[,CASE...] ROOT WARMUP RUNS

First ``WARMUP + RUNS`` runs of the default stack alone (the five default
monitors, no destination: the baseline), then, for each ``CASE`` in turn,
``WARMUP + RUNS`` runs of the default stack plus a fresh destination of that
case (see :func:`_make`). Every run trains a tiny model for 4 batches, logs
hyperparameters and a metric of its own, and uploads a small file, in its
own folder ``ROOT/{phase}-{i}``.
A fresh process: in a test process, memory an earlier test freed is filled
again before RSS moves, and trackers keep process-wide state.

stdout: one JSON object a run, after it closed and after ``gc.collect()`` and
``malloc_trim``: ``phase`` (``base`` or the case), ``i``, ``folder``, ``secs``,
``rss`` (bytes), ``fds`` (what each open fd points to), ``threads``
(``[ident, name]`` of each live thread), ``children`` (``[pid, name]`` of each
child process, wandb's service among them); then ``{"network": [...]}``: the
addresses beyond the loopback anything tried to reach (none may).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.nn.functional as F

ROOT = Path(sys.argv[2]).resolve()
HOME = ROOT / "home"  # every tracker's own folders and config: nothing outside ROOT


def _offline_environment() -> None:
    """Every backend offline, quiet and in ROOT, before any of them is imported."""
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                "WANDB_ARTIFACT_DIR"):  # fmt: skip
        os.environ[var] = str(HOME / var.lower())
    env = {
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_API_KEY": "0" * 40,
        "COMET_CONFIG": str(HOME / ".comet.config"), "COMET_DISABLE_AUTO_LOGGING": "1",
        "COMET_ERROR_TRACKING_ENABLE": "false", "COMET_DISABLE_ANNOUNCEMENT": "1",
        "NEPTUNE_DATA_DIRECTORY": str(HOME / "neptune"),
        "NEPTUNE_API_TOKEN": "fake-neptune-token",
        "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost,::1",
        "OBSBUS_WEBHOOK_URL": "", "SLACK_WEBHOOK_URL": "",
    }  # fmt: skip
    os.environ.update(env)
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "COMET_API_KEY", "NEPTUNE_MODE",
                "NEPTUNE_PROJECT", "WANDB_PROJECT", "WANDB_ENTITY", "https_proxy",
                "http_proxy"):  # fmt: skip
        os.environ.pop(var, None)
    (HOME / "tmp").mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = str(HOME / "tmp")  # staging copies (MLflow, uploads) in ROOT too


_offline_environment()
NETWORK: list[str] = []
_connect = socket.socket.connect


def _loopback_only(sock: socket.socket, address: Any) -> Any:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in (
        "127.0.0.1", "::1", "localhost"):  # fmt: skip
        NETWORK.append(repr(address))
        raise OSError(f"many_runs.py is offline: {address}")
    return _connect(sock, address)


socket.socket.connect = _loopback_only  # type: ignore[method-assign]

from obsbus import Run  # noqa: E402
from obsbus.callbacks import (  # noqa: E402
    LRMonitor,
    MemoryMonitor,
    NaNMonitor,
    OptimizerMonitor,
    SpeedMonitor,
)
from obsbus.loggers import LoggerDestination  # noqa: E402

_SERVER: list[Any] = []


def _webhook_url() -> str:
    """A local server (this process) stands in for Slack and webhooks; started once."""
    if not _SERVER:
        sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
        from tests.loggers._http_server import WebhookServer

        _SERVER.append(WebhookServer("ok").start())
    return str(_SERVER[0].url("/services/T0AB12CD3/B0EF45GH6/Zq7xK2mPw9LrT4vB8nYc3hJd"))


def _alerts(kind: str) -> Callable[[Path], LoggerDestination]:
    from obsbus.loggers import SlackLogger, WebhookLogger

    os.environ["OBSBUS_WEBHOOK_URL"] = os.environ["SLACK_WEBHOOK_URL"] = _webhook_url()
    fast = {"retry_backoff": 0.01, "max_backoff": 0.05, "close_timeout": 10.0}
    if kind == "slack":
        return lambda folder: SlackLogger(**fast)  # type: ignore[arg-type]
    return lambda folder: WebhookLogger(**fast)  # type: ignore[arg-type]


def _make(case: str) -> Callable[[Path], LoggerDestination]:
    """The factory of a fresh destination of ``case`` for a run in ``folder``."""
    from obsbus import loggers as lg

    quiet = {"log_env": False, "log_git": False}
    makers: dict[str, Callable[[Path], LoggerDestination]] = {
        "file": lambda folder: lg.FileLogger(),
        "console": lambda folder: lg.ConsoleLogger(),
        "progress-bar": lambda folder: lg.ProgressBarLogger(),
        "loguru": lambda folder: lg.LoguruLogger(),
        "in-memory": lambda folder: lg.InMemoryLogger(),
        "run-report": lambda folder: lg.RunReport(),
        "tensorboard": lambda folder: lg.TensorboardLogger(**quiet),
        "wandb-offline": lambda folder: lg.WandBLogger(mode="offline", **quiet),
        "mlflow-sqlite": lambda folder: lg.MLFlowLogger(**quiet),
        "mlflow-file-store": lambda folder: lg.MLFlowLogger(
            tracking_uri=folder / "mlruns", **quiet
        ),
        "comet-offline": lambda folder: lg.CometMLLogger(
            online=False, offline_directory=str(folder / "comet"), **quiet
        ),
        "neptune-offline": lambda folder: lg.NeptuneLogger(mode="offline", **quiet),
        "remote-file-store": lambda folder: lg.RemoteUploaderDownloader((ROOT / "bucket").as_uri()),
    }
    if case in ("slack", "webhook"):
        return _alerts(case)
    return makers[case]


def _one_run(folder: Path, name: str, destination: LoggerDestination | None) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
    callbacks = [SpeedMonitor(window_size=2), MemoryMonitor(), NaNMonitor(), LRMonitor(),
                 OptimizerMonitor(log_interval="2ba")]  # fmt: skip
    notes = folder.parent / f"{folder.name}-notes.txt"
    notes.write_text("notes\n")
    loggers = [] if destination is None else [destination]
    with Run(model=model, optimizers=opt, max_duration="4ba", loggers=loggers,
             callbacks=callbacks, run_name=name, run_folder=folder,
             hparams={"lr": 0.1, "run": name}) as run:  # fmt: skip
        run.logger.upload_file(f"{name}/notes.txt", notes)
        for x, y in run.train(data):
            opt.zero_grad()
            loss = run.loss(F.mse_loss, run.forward(model, x), y)
            run.backward(loss)
            opt.step()
            run.logger.log_metrics({"extra/value": float(run.state.timestamp._batch)})


def _sample(phase: str, i: int, folder: Path, secs: float) -> None:
    gc.collect()
    gc.collect()
    # Memory a run freed goes back to the system, so RSS shows what is still held.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
    threads = [[t.ident, t.name] for t in threading.enumerate()]
    me = psutil.Process()
    children = [[c.pid, c.name()] for c in me.children(recursive=True) if c.is_running()]
    row = {"phase": phase, "i": i, "folder": str(folder), "secs": round(secs, 2),
           "rss": me.memory_info().rss, "fds": fds, "threads": threads,
           "children": children}  # fmt: skip
    print(json.dumps(row), flush=True)


def main() -> None:
    cases, warmup, runs = sys.argv[1].split(","), int(sys.argv[3]), int(sys.argv[4])
    makers = {case: _make(case) for case in cases}
    for phase in ("base", *cases):
        make = makers.get(phase)
        for i in range(warmup + runs):
            folder = ROOT / f"{phase}-{i}"
            start = time.monotonic()
            _one_run(folder, f"{phase}-{i}", None if make is None else make(folder))
            _sample(phase, i, folder, time.monotonic() - start)
    print(json.dumps({"network": NETWORK}), flush=True)


if __name__ == "__main__":
    main()
