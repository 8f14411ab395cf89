"""Composer's ``composer.core`` names, where obsbus has them: ``from obsbus.core import State``.

The objects are obsbus's own (``obsbus.core.Callback is obsbus.Callback``);
this package only gives Composer's import paths, module by module
(``obsbus.core.time``, ``obsbus.core.state``, ...). Like ``import obsbus`` it
imports no torch. What ``composer.core`` has and obsbus does not (algorithms,
data specs, evaluators, precision contexts) is listed, with what to write
instead, in the README's "Coming from Composer" section.

Example:
    >>> import obsbus
    >>> from obsbus.core import Callback, Engine, Event, State, Time, Timestamp, TimeUnit
    >>> Callback is obsbus.Callback and Time is obsbus.Time
    True
"""

from __future__ import annotations

from obsbus.core.callback import Callback
from obsbus.core.engine import Engine
from obsbus.core.event import Event
from obsbus.core.state import State
from obsbus.core.time import Time, Timestamp, TimeUnit, ensure_time

__all__ = [
    "Callback",
    "Engine",
    "Event",
    "State",
    "Time",
    "TimeUnit",
    "Timestamp",
    "ensure_time",
]
