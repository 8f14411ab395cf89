"""MLflow for the tracker benchmark: obsbus's MLFlowLogger next to MlflowClient called directly.

Both use a SQLite store in ``tmp`` (MLFlowLogger's default kind of store;
MLflow 3 refuses the file store unless ``MLFLOW_ALLOW_FILE_STORE=true``).
Nothing here reaches the network; telemetry is switched off.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable
from typing import Any


def _offline() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "true")


def make_destination(tmp: pathlib.Path, **kwargs: Any) -> Any:
    """An MLFlowLogger logging to ``tmp/mlflow-obsbus.db`` (one batch per 10 s, its default)."""
    _offline()
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    return MLFlowLogger(
        experiment_name="bench",
        tracking_uri=f"sqlite:///{pathlib.Path(tmp).absolute() / 'mlflow-obsbus.db'}",
        log_env=False,
        log_git=False,
        **kwargs,
    )


def make_direct(
    tmp: pathlib.Path, synchronous: bool = True
) -> tuple[Callable[[dict[str, Any], int], None], Callable[[], None]]:
    """``MlflowClient.log_batch`` per call on a SQLite store in ``tmp`` (what a user would write).

    ``synchronous=False`` uses MLflow's own async queue instead.
    """
    _offline()
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(f"sqlite:///{pathlib.Path(tmp).absolute() / 'mlflow-direct.db'}")
    experiment = client.get_experiment_by_name("bench")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("bench")
    run_id = client.create_run(experiment_id, run_name="direct").info.run_id

    def log_fn(metrics: dict[str, Any], step: int) -> None:
        now = int(time.time() * 1000)
        batch = [Metric(key, float(value), now, step) for key, value in metrics.items()]
        client.log_batch(run_id, metrics=batch, synchronous=synchronous)

    def close_fn() -> None:
        client.set_terminated(run_id)

    return log_fn, close_fn
