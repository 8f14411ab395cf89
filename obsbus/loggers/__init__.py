"""Logger destinations: where metrics, hyperparameters and files go.

The tracker destinations (TensorBoard, W&B, Comet, Neptune, MLflow) and the
object stores behind RemoteUploaderDownloader import their client only when
constructed; each needs its extra, e.g. ``pip install 'obsbus[wandb]'``.
:class:`~obsbus.Logger` and :class:`~obsbus.LoggerDestination` are here too,
as in Composer (``from obsbus.loggers import Logger, LoggerDestination``).
"""

from obsbus.logger import Logger, LoggerDestination
from obsbus.loggers.alerts import SlackLogger, WebhookLogger
from obsbus.loggers.comet_ml_logger import CometMLLogger
from obsbus.loggers.console_logger import ConsoleLogger
from obsbus.loggers.file_logger import FileLogger
from obsbus.loggers.in_memory_logger import InMemoryLogger
from obsbus.loggers.loguru_logger import LoguruLogger
from obsbus.loggers.mlflow_logger import MLFlowLogger
from obsbus.loggers.neptune_logger import NeptuneLogger
from obsbus.loggers.progress_bar_logger import ProgressBarLogger
from obsbus.loggers.remote_uploader_downloader import (
    RemoteUploaderDownloader,
    UploadError,
    maybe_create_remote_uploader_downloader_from_uri,
)
from obsbus.loggers.run_report import RunReport
from obsbus.loggers.tensorboard_logger import TensorboardLogger
from obsbus.loggers.wandb_logger import WandBLogger

__all__ = [
    "CometMLLogger",
    "ConsoleLogger",
    "FileLogger",
    "InMemoryLogger",
    "Logger",
    "LoggerDestination",
    "LoguruLogger",
    "MLFlowLogger",
    "NeptuneLogger",
    "ProgressBarLogger",
    "RemoteUploaderDownloader",
    "RunReport",
    "SlackLogger",
    "TensorboardLogger",
    "UploadError",
    "WandBLogger",
    "WebhookLogger",
    "maybe_create_remote_uploader_downloader_from_uri",
]
