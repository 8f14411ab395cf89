"""The import lines of Composer's observability material, with ``composer`` changed to ``obsbus``.

Sources (mosaicml/composer at commit 6405188805a0054b4551ec49e4919c54c971d0e8): the
documentation pages and tests ported in this folder (each line names the file it comes
from), and the Composer observability guide's smoke scripts.
"""

from __future__ import annotations

import importlib

import pytest

# (module, names, where Composer's material imports them from)
LINES = [
    (
        "obsbus",
        "Callback, Event, Logger, State, Trainer, Time, Timestamp, TimeUnit, Engine",
        "docs/source/trainer/callbacks.rst; composer/__init__.py",
    ),
    (
        "obsbus.core",
        "Callback, Event, State, Time, TimeUnit, Timestamp, Engine",
        "tests/profiler/test_profiler.py; tests/callbacks/test_runtime_estimator.py",
    ),
    ("obsbus.core.time", "Time, Timestamp, TimeUnit", "tests/test_time.py; logging.rst"),
    ("obsbus.core.state", "State", "docs/source/trainer/logging.rst"),
    (
        "obsbus.loggers",
        "Logger, LoggerDestination, InMemoryLogger, FileLogger, ConsoleLogger",
        "tests/loggers/test_file_logger.py; the smoke scripts",
    ),
    ("obsbus.loggers.logger_destination", "LoggerDestination", "docs/source/trainer/logging.rst"),
    ("obsbus.loggers.console_logger", "ConsoleLogger", "tests/loggers/test_console_logger.py"),
    (
        "obsbus.callbacks",
        "SpeedMonitor, LRMonitor, RuntimeEstimator, NaNMonitor, "
        "OptimizerMonitor, EarlyStopper, ThresholdStopper",
        "docs/source/trainer/callbacks.rst",
    ),
    ("obsbus.callbacks.early_stopper", "EarlyStopper", "tests/callbacks/test_early_stopper.py"),
    (
        "obsbus.profiler",
        "Profiler, ProfilerAction, SystemProfiler, TorchProfiler, "
        "cyclic_schedule, JSONTraceHandler, Marker, TraceHandler",
        "tests/profiler/test_profiler.py",
    ),
    ("obsbus.profiler.profiler", "Profiler", "examples/profiler_demo.py"),
    (
        "obsbus.profiler.json_trace_handler",
        "JSONTraceHandler",
        "tests/profiler/test_json_trace_handler.py",
    ),
    (
        "obsbus.profiler.profiler_schedule",
        "cyclic_schedule",
        "tests/profiler/test_json_trace_handler.py",
    ),
    ("obsbus.trainer", "Trainer", "tests/callbacks/test_speed_monitor.py"),
]


@pytest.mark.parametrize(
    ("module", "names", "source"), LINES, ids=[module for module, _, _ in LINES]
)
def test_import_line(module, names, source):
    """Source: each line's ``source`` (the same line with ``composer`` in place of ``obsbus``)."""
    mod = importlib.import_module(module)
    missing = [n for n in (x.strip() for x in names.split(",")) if not hasattr(mod, n)]
    assert not missing, f"from {module} import {names}: missing {missing} ({source})"
