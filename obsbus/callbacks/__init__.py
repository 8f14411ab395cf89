"""Monitors: callbacks that measure a run and log what they find."""

__all__: list[str] = []
