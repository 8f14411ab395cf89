"""Composer's module path for :class:`~obsbus.LoggerDestination`
(``composer.loggers.logger_destination``); the class lives in :mod:`obsbus.logger`."""

from obsbus.logger import LoggerDestination

__all__ = ["LoggerDestination"]
