"""Composer's ``composer.core.engine`` path to obsbus's ``obsbus.engine``."""

from __future__ import annotations

from obsbus.engine import Engine

__all__ = ["Engine"]
