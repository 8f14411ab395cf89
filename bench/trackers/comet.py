"""Comet for the tracker benchmark: obsbus's destination, and the client called directly.

Both are offline (an ``OfflineExperiment`` writing its zip under ``tmp``) with
comet's automatic logging off, as the destination sets it; comet's settings
are kept away from the user's (``COMET_CONFIG`` in ``tmp``) and it reports
nothing home.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any


def _quiet_comet(tmp: pathlib.Path) -> None:
    os.environ.setdefault("COMET_CONFIG", str(tmp / ".comet.config"))
    os.environ.setdefault("COMET_DISABLE_AUTO_LOGGING", "1")
    os.environ.setdefault("COMET_ERROR_TRACKING_ENABLE", "false")
    os.environ.setdefault("COMET_DISABLE_ANNOUNCEMENT", "1")


def make_destination(tmp: pathlib.Path, **kwargs: Any) -> Any:
    from obsbus.loggers.comet_ml_logger import CometMLLogger

    _quiet_comet(tmp)
    return CometMLLogger(online=False, offline_directory=tmp / "comet", **kwargs)


def make_direct(tmp: pathlib.Path) -> tuple[Callable[[dict, int], None], Callable[[], None]]:
    _quiet_comet(tmp)
    import comet_ml

    from obsbus.loggers.comet_ml_logger import CometMLLogger

    switches = CometMLLogger(online=False).exp_kwargs  # the same switches as the destination's
    (tmp / "direct").mkdir(parents=True, exist_ok=True)
    experiment = comet_ml.OfflineExperiment(
        project_name="bench", offline_directory=str(tmp / "direct"), **switches
    )

    def log(metrics: dict, step: int) -> None:
        experiment.log_metrics(metrics, step=step)

    return log, experiment.end
