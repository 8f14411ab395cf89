"""Composer's ``composer.core.time`` path to obsbus's ``obsbus.time``."""

from __future__ import annotations

from obsbus.time import Time, Timestamp, TimeUnit, ensure_time

__all__ = ["Time", "TimeUnit", "Timestamp", "ensure_time"]
