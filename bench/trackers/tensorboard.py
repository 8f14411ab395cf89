"""TensorBoard for the tracker benchmark: obsbus's destination, and the client called directly.

The direct client is ``torch.utils.tensorboard.SummaryWriter`` (what a training
loop calls by hand), one ``add_scalar`` per metric, with Primus's queue size.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any


def make_destination(tmp: pathlib.Path, **kwargs: Any) -> Any:
    from obsbus.loggers.tensorboard_logger import TensorboardLogger

    return TensorboardLogger(log_dir=tmp / "tensorboard", **kwargs)


def make_direct(tmp: pathlib.Path) -> tuple[Callable[[dict, int], None], Callable[[], None]]:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp / "direct"), max_queue=1000)

    def log(metrics: dict, step: int) -> None:
        for key, value in metrics.items():
            writer.add_scalar(key, value, step)

    return log, writer.close
