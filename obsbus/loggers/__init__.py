"""Logger destinations: where metrics, hyperparameters and files go."""

from obsbus.loggers.console_logger import ConsoleLogger
from obsbus.loggers.in_memory_logger import InMemoryLogger

__all__ = ["ConsoleLogger", "InMemoryLogger"]
