"""What EarlyStopper and ThresholdStopper share: when an eval metric is checked. Not API."""

from __future__ import annotations

import warnings

from typing_extensions import override

from obsbus.callback import Callback
from obsbus.callbacks._metric_lookup import MetricRef, unevaluated_label
from obsbus.errors import ObsbusWarning
from obsbus.logger import Logger
from obsbus.state import State

__all__ = ["MetricStopper"]


class MetricStopper(Callback):
    """A stopper of one metric (``ref``): checked at ``eval_end`` of its eval label.

    A label that evaluation never ran on is warned about once, at
    ``eval_after_all``. A subclass sets ``ref`` and ``_warned_label = False``,
    and decides in :meth:`_check`, and when a train metric is checked.
    """

    _name = "MetricStopper"
    ref: MetricRef
    _warned_label: bool

    def _owner(self) -> str:
        """How messages name this stopper: ``EarlyStopper(monitor=..., dataloader_label=...)``."""
        return f"{self._name}(monitor={self.ref.name!r}, dataloader_label={self.ref.label!r})"

    def _check(self, state: State) -> None:
        raise NotImplementedError

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        if not self.ref.is_train and state.dataloader_label == self.ref.label:
            self._check(state)

    @override
    def eval_after_all(self, state: State, logger: Logger) -> None:
        if self.ref.is_train or self._warned_label:
            return
        message = unevaluated_label(state, self.ref, self._owner())
        if message is not None:
            self._warned_label = True
            warnings.warn(message, ObsbusWarning, stacklevel=2)
