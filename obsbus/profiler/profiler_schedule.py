"""Composer's module path for :func:`~obsbus.profiler.cyclic_schedule`
(``composer.profiler.profiler_schedule``); it lives in :mod:`obsbus.profiler.schedule`."""

from obsbus.profiler.schedule import cyclic_schedule

__all__ = ["cyclic_schedule"]
