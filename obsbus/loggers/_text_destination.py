"""What the two text destinations (console, loguru) share: the state and the hyperparameters.

Both print metric lines, and both print the hyperparameters once: at the first
``fit_start``, or as soon as they are logged while a fit is running
(hyperparameters logged before the fit wait for it, so they print next to the
run they describe, not at ``init``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import override

from obsbus.logger import Logger, LoggerDestination
from obsbus.state import State

__all__ = ["TextDestination"]


class TextDestination(LoggerDestination):
    """A destination that writes text lines, with its hyperparameters written once.

    A subclass writes them in its own format in :meth:`_write_hparams` and
    calls ``super()`` where it overrides ``fit_start`` or ``fit_end``.
    """

    def __init__(self) -> None:
        self._state: State | None = None
        self._hparams: dict[str, Any] = {}
        self._hparams_written = False
        self._fitting = False

    def _write_hparams(self, hparams: Mapping[str, Any]) -> None:
        """Write ``hparams`` (called once, with every one logged so far)."""
        raise NotImplementedError

    def _hparams_due(self) -> None:
        if self._hparams and not self._hparams_written:
            self._hparams_written = True
            self._write_hparams(dict(self._hparams))

    @override
    def init(self, state: State, logger: Logger) -> None:
        self._state = state

    @override
    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        self._hparams.update(hyperparameters)
        if self._fitting:
            self._hparams_due()

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._fitting = True
        self._hparams_due()

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._fitting = False
