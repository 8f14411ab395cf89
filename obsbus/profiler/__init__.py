"""Profiling: a schedule picks a window of batches; markers and the engine record spans in it."""

from obsbus.profiler.json_trace_handler import JSONTraceHandler
from obsbus.profiler.marker import Marker
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.schedule import Schedule, cyclic_schedule, step_window_schedule
from obsbus.profiler.system_profiler import SystemProfiler
from obsbus.profiler.torch_profiler import TorchProfiler
from obsbus.profiler.trace_handler import TraceHandler

__all__ = [
    "JSONTraceHandler",
    "Marker",
    "Profiler",
    "ProfilerAction",
    "Schedule",
    "SystemProfiler",
    "TorchProfiler",
    "TraceHandler",
    "cyclic_schedule",
    "step_window_schedule",
]
