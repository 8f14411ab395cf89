"""Composer's ``composer.core.callback`` path to obsbus's ``obsbus.callback``."""

from __future__ import annotations

from obsbus.callback import Callback

__all__ = ["Callback"]
