"""obsbus: a trainer-agnostic event bus for PyTorch training observability.

``import obsbus`` is light: it imports neither torch nor any tracker. The
names that need torch (``Trainer``) load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from obsbus.callback import Callback
from obsbus.engine import Engine
from obsbus.errors import MissingExtraError, ObsbusError, ObsbusWarning, TrainingTerminated
from obsbus.event import Event
from obsbus.interval import LogInterval, at_interval
from obsbus.logger import Logger, LoggerDestination
from obsbus.naming import format_name
from obsbus.run import Run
from obsbus.run_folder import RunFolder
from obsbus.state import State
from obsbus.time import Time, Timestamp, TimeUnit
from obsbus.writer import BackgroundWriter

if TYPE_CHECKING:
    from obsbus.registry import build_callback, build_logger
    from obsbus.trainer import Trainer

__version__ = "0.1.0"

__all__ = [
    "BackgroundWriter",
    "Callback",
    "Engine",
    "Event",
    "LogInterval",
    "Logger",
    "LoggerDestination",
    "MissingExtraError",
    "ObsbusError",
    "ObsbusWarning",
    "Run",
    "RunFolder",
    "State",
    "Time",
    "TimeUnit",
    "Timestamp",
    "Trainer",
    "TrainingTerminated",
    "at_interval",
    "build_callback",
    "build_logger",
    "format_name",
]

_LAZY = {
    "Trainer": "obsbus.trainer",
    "build_callback": "obsbus.registry",
    "build_logger": "obsbus.registry",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'obsbus' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
