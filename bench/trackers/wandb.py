"""W&B for the tracker benchmark: obsbus's WandBLogger next to ``wandb.Run.log`` called directly.

Both run offline (``run-*.wandb`` under ``tmp``) with wandb's default settings
and ``reinit="create_new"``, as the destination starts its run; nothing
reaches the network.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any


def make_destination(tmp: pathlib.Path, **kwargs: Any) -> Any:
    from obsbus.loggers.wandb_logger import WandBLogger

    return WandBLogger(project="bench", mode="offline", save_dir=tmp, **kwargs)


def make_direct(tmp: pathlib.Path) -> tuple[Callable[[dict, int], None], Callable[[], None]]:
    import wandb

    tmp.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project="bench", mode="offline", dir=str(tmp), reinit="create_new")

    def log(metrics: dict, step: int) -> None:
        run.log(metrics, step=step)

    return log, run.finish
