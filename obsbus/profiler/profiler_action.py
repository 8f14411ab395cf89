"""What the profiler does during a batch."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ProfilerAction"]


class ProfilerAction(StrEnum):
    """The profiler's action for a batch, chosen by its schedule before the batch runs.

    The value is the lower-case name, so an action compares equal to its string
    and round-trips through a config file.

    Attributes:
        SKIP: record nothing new. A span opened while recording still records
            its end, so no span is left half-open.
        WARMUP: get ready to record (a backend that needs a warm-up step, such
            as ``torch.profiler``, starts here); markers with the default
            ``actions`` do not record yet.
        ACTIVE: record every marker, event span and counter.
        ACTIVE_AND_SAVE: record, and have the trace handlers write the trace at
            the end of the batch. A schedule gives it to the last recorded batch
            of a window.

    Example:
        >>> ProfilerAction("active_and_save") is ProfilerAction.ACTIVE_AND_SAVE
        True
        >>> ProfilerAction.WARMUP == "warmup", [a.value for a in ProfilerAction]
        (True, ['skip', 'warmup', 'active', 'active_and_save'])
    """

    SKIP = "skip"
    WARMUP = "warmup"
    ACTIVE = "active"
    ACTIVE_AND_SAVE = "active_and_save"
