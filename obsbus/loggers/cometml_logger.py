"""Composer's module path for :class:`~obsbus.loggers.CometMLLogger`
(``composer.loggers.cometml_logger``); the class lives in
:mod:`obsbus.loggers.comet_ml_logger`."""

from obsbus.loggers.comet_ml_logger import CometMLLogger

__all__ = ["CometMLLogger"]
