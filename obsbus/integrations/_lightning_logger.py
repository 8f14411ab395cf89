"""The Lightning ``Logger`` of :mod:`obsbus.integrations.lightning` (import it from there)."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from obsbus.integrations._lightning_host import import_lightning
from obsbus.logger import Logger

if TYPE_CHECKING:
    from obsbus.integrations.lightning import ObsbusCallback

pl: Any = import_lightning()

__all__ = ["ObsbusLogger"]


class ObsbusLogger(pl.loggers.Logger):  # type: ignore[misc]
    """A Lightning ``Logger`` that hands ``self.log(...)`` values to a bus's destinations.

    ``Trainer(logger=bus.lightning_logger, callbacks=[bus])``. Values are
    logged at obsbus's step (``state.timestamp.batch``: optimizer steps done,
    the step obsbus's monitors log at): Lightning's own 0-based step plus
    one, for ``training_step`` and validation values alike. Lightning has
    already turned them into floats (on its logging steps only); its
    ``epoch`` entry is left out (obsbus's timestamp has it). Hyperparameters
    (``self.save_hyperparameters()``) go to ``log_hyperparameters``.
    """

    def __init__(self, callback: ObsbusCallback) -> None:
        super().__init__()
        if not isinstance(getattr(callback, "logger", None), Logger) or not hasattr(
            callback, "state"
        ):
            raise TypeError(
                f"ObsbusLogger takes the ObsbusCallback whose destinations it logs to, got "
                f"{callback!r}. To fix, use `bus.lightning_logger` of `bus = ObsbusCallback(...)`."
            )
        self._callback = callback

    @property
    def name(self) -> str:
        return "obsbus"

    @property
    def version(self) -> str:
        return self._callback.state.run_name

    @property
    def save_dir(self) -> str:
        return str(self._callback.state.run_folder.root)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        metrics = {k: v for k, v in metrics.items() if k != "epoch"}
        if metrics:
            self._callback.logger.log_metrics(metrics)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kw: Any) -> None:
        values = vars(params) if isinstance(params, Namespace) else dict(params)
        if values:
            self._callback.logger.log_hyperparameters(values)
