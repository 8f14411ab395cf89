"""Composer's ``composer.core.event`` path to obsbus's ``obsbus.event``."""

from __future__ import annotations

from obsbus.event import Event

__all__ = ["Event"]
