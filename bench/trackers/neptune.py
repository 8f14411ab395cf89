"""Neptune for the tracker benchmark: obsbus's NeptuneLogger next to the ``neptune`` client directly.

Both run in offline mode (an operation log under ``$NEPTUNE_DATA_DIRECTORY``,
which the driver points into ``tmp``) with the client settings the
destination uses; nothing reaches the network.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any


def make_destination(tmp: pathlib.Path, **kwargs: Any) -> Any:
    from obsbus.loggers.neptune_logger import NeptuneLogger

    return NeptuneLogger(project="bench", mode="offline", **kwargs)


def make_direct(tmp: pathlib.Path) -> tuple[Callable[[dict, int], None], Callable[[], None]]:
    import neptune

    from obsbus.loggers.neptune_logger import _DEFAULTS  # the destination's client settings

    run = neptune.init_run(project="bench", mode="offline", **_DEFAULTS)

    def log(metrics: dict, step: int) -> None:
        for key, value in metrics.items():
            run[f"training/{key}"].append(value, step=step)

    return log, run.stop
