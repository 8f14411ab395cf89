"""Logger destinations: where metrics, hyperparameters and files go."""

from obsbus.loggers.console_logger import ConsoleLogger
from obsbus.loggers.file_logger import FileLogger
from obsbus.loggers.in_memory_logger import InMemoryLogger
from obsbus.loggers.loguru_logger import LoguruLogger
from obsbus.loggers.progress_bar_logger import ProgressBarLogger

__all__ = ["ConsoleLogger", "FileLogger", "InMemoryLogger", "LoguruLogger", "ProgressBarLogger"]
