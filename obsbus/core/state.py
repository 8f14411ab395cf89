"""Composer's ``composer.core.state`` path to obsbus's ``obsbus.state``."""

from __future__ import annotations

from obsbus.state import State

__all__ = ["State"]
