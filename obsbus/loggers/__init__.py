"""Logger destinations: where metrics, hyperparameters and files go."""

from obsbus.loggers.console_logger import ConsoleLogger
from obsbus.loggers.file_logger import FileLogger
from obsbus.loggers.in_memory_logger import InMemoryLogger

__all__ = ["ConsoleLogger", "FileLogger", "InMemoryLogger"]
