"""What the profiler does during a batch."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ProfilerAction"]


class ProfilerAction(StrEnum):
    """The profiler's action for a batch, chosen by its schedule.

    Example:
        >>> ProfilerAction("active_and_save") is ProfilerAction.ACTIVE_AND_SAVE
        True
    """

    SKIP = "skip"
    WARMUP = "warmup"
    ACTIVE = "active"
    ACTIVE_AND_SAVE = "active_and_save"
