"""The interface between the Profiler and whatever stores its trace."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from obsbus.callback import Callback
from obsbus.time import Timestamp

__all__ = ["TraceHandler"]


class TraceHandler(Callback):
    """Receives every event a :class:`~obsbus.profiler.Profiler` records.

    A trace handler is a callback too (it sees ``batch_end``, ``fit_end``,
    ``close``, ...), so it decides when to write: the JSON trace handler
    writes a file at each ``active_and_save`` batch. Every method is a no-op;
    override what you store. Times are wall-clock nanoseconds
    (``time.time_ns()``), the training ``timestamp`` is the run's progress when
    the event happened. The methods and their parameters are Composer's (the
    profiler passes them by position, so a subclass may name them as it likes).

    Example:
        >>> class Count(TraceHandler):
        ...     def __init__(self):
        ...         self.spans = 0
        ...     def process_duration_event(self, name, categories, is_start, timestamp, wall_ns):
        ...         self.spans += is_start
        >>> from obsbus.profiler import Profiler, ProfilerAction
        >>> handler = Count()
        >>> profiler = Profiler(lambda state: ProfilerAction.ACTIVE, [handler])
        >>> from obsbus import Run
        >>> with Run(max_duration="2ba", profiler=profiler) as run:
        ...     for batch in run.train([[1], [2]]):
        ...         with profiler.marker("my_step"):
        ...             pass
        >>> handler.spans > 2
        True
    """

    def process_duration_event(
        self,
        name: str,
        categories: Sequence[str],
        is_start: bool,
        timestamp: Timestamp,
        wall_clock_time_ns: int,
    ) -> None:
        """A span begins (``is_start``) or ends."""

    def process_instant_event(
        self, name: str, categories: Sequence[str], timestamp: Timestamp, wall_clock_time_ns: int
    ) -> None:
        """Something happened at one moment."""

    def process_counter_event(
        self,
        name: str,
        categories: Sequence[str],
        timestamp: Timestamp,
        wall_clock_time_ns: int,
        values: Mapping[str, float],
    ) -> None:
        """Counter values at one moment (CPU %, memory, ...)."""

    def process_chrome_json_trace_file(self, file_path: Path) -> None:
        """A Chrome trace written by someone else (``torch.profiler``) to merge or keep."""
