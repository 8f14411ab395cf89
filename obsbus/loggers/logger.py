"""Composer's module path for :class:`~obsbus.Logger` (``composer.loggers.logger``).

``from obsbus.loggers.logger import Logger`` ports Composer code unchanged;
the class lives in :mod:`obsbus.logger`.
"""

from obsbus.logger import Logger

__all__ = ["Logger"]
