"""Composer's Logging and File Uploading documentation pages, ported to obsbus.

Sources: mosaicml/composer docs/source/trainer/logging.rst and
docs/source/trainer/file_uploading.rst at commit 6405188805a0054b4551ec49e4919c54c971d0e8
(https://docs.mosaicml.com/projects/composer/en/latest/trainer/logging.html,
.../trainer/file_uploading.html). The pages' ``model``, ``train_dataloader`` and
``eval_dataloader`` are ``tests.common.SimpleModel`` and ``RandomClassificationDataset``
in memory; the code is the pages' with ``composer`` changed to ``obsbus`` in the imports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.composer_port._common import loss_fn, random_classification_data, simple_model


@pytest.fixture
def model():
    return simple_model()


@pytest.fixture
def train_dataloader():
    return random_classification_data(size=16, batch_size=4)


@pytest.fixture
def eval_dataloader():
    return random_classification_data(size=8, batch_size=4, seed=1)


def test_log_to_console(model, train_dataloader, eval_dataloader, capsys):
    """Source: logging.rst, the ``log_to_console``/``console_log_interval`` testcode.

    The page builds the trainer without ``max_duration``; here it is then trained with
    Composer's ``trainer.fit(duration=...)``. Console lines go to stderr (Composer's
    ``console_stream`` default).
    """
    from obsbus import Trainer

    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=train_dataloader,
        eval_dataloader=eval_dataloader,
        log_to_console=True,
        progress_bar=False,
        console_log_interval="100ba",
    )
    trainer.fit(duration="1ep")
    trainer.close()
    err = capsys.readouterr().err
    assert "Train" in err and "Eval" in err


@pytest.mark.long
def test_trackers_and_file_logger(model, train_dataloader, eval_dataloader, monkeypatch):
    """Source: logging.rst, the W&B + CometML + MLflow + Neptune + FileLogger testcode, with
    its testsetup (environment) and testcleanup (``trainer.engine.close()``, remove the log).

    Deliberate difference (README "Coming from Composer"): a relative ``filename`` resolves
    against the run folder, so the cleanup removes ``trainer.state.run_folder.resolve("log.txt")``
    where Composer removes ``"log.txt"`` in the working directory.

    Under ``-m long``: about a minute, most of it Comet waiting ``close_timeout`` (30 s) for
    its server (the page's fake ``COMET_API_KEY``, no network) and MLflow creating its SQLite
    store.
    """
    import logging

    logging.getLogger("neptune").setLevel(logging.CRITICAL)

    monkeypatch.setenv("NEPTUNE_MODE", "debug")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("COMET_API_KEY", "<comet_api_key>")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")

    from obsbus import Trainer
    from obsbus.loggers import CometMLLogger, FileLogger, MLFlowLogger, NeptuneLogger, WandBLogger

    wandb_logger = WandBLogger()
    cometml_logger = CometMLLogger()
    mlflow_logger = MLFlowLogger()
    neptune_logger = NeptuneLogger()
    file_logger = FileLogger(filename="log.txt")

    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=train_dataloader,
        eval_dataloader=eval_dataloader,
        loggers=[wandb_logger, cometml_logger, mlflow_logger, neptune_logger, file_logger],
    )

    trainer.engine.close()
    os.remove(trainer.state.run_folder.resolve("log.txt"))


def test_logging_additional_data():
    """Source: logging.rst, "Logging Additional Data": EpochMonitor logs ``Epoch`` at
    ``epoch_end``; the page's testcleanup calls ``run_event(Event.EPOCH_END, state, logger)``
    on it directly."""
    from obsbus import Callback, Event, State
    from obsbus.loggers import InMemoryLogger, Logger

    class EpochMonitor(Callback):
        def epoch_end(self, state: State, logger: Logger):
            logger.log_metrics({"Epoch": int(state.timestamp.epoch)})

    state = State(run_name="docs")
    memory = InMemoryLogger()
    logger = Logger(state, [memory])
    epoch_monitor = EpochMonitor()
    epoch_monitor.run_event(Event.EPOCH_END, state, logger)
    assert memory.most_recent_values == {"Epoch": 0}


def test_custom_logger_destination(model, train_dataloader):
    """Source: logging.rst, "Custom Logger Destinations": DictionaryLogger, with the page's
    own import lines. (The page's ``log_metrics`` loops over ``self.data`` instead of
    ``metrics``, so it records nothing, in Composer as here; it is ported as written.)"""
    from typing import Any, Optional

    from obsbus.core.state import State
    from obsbus.core.time import Timestamp
    from obsbus.loggers.logger_destination import LoggerDestination

    class DictionaryLogger(LoggerDestination):
        def __init__(self):
            # Dictionary to store logged data
            self.data = {}

        def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None):  # noqa: UP045
            for k, v in self.data.items():
                if k not in self.data:
                    self.data[k] = []
                self.data[k].append((state.timestamp, v))  # noqa: F821 (as on the page)

    from obsbus import Trainer

    # Construct a trainer using this logger
    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=train_dataloader,
        max_duration="1ep",
        loggers=[DictionaryLogger()],
    )

    # Train!
    trainer.fit()
    trainer.close()
    assert State.__name__ == "State" and Timestamp.__name__ == "Timestamp" and Any
    assert trainer.state.timestamp.batch == 4


def test_saving_custom_files(model, train_dataloader, tmp_path):
    """Source: file_uploading.rst, "Saving custom files": ``trainer.logger.upload_file``
    before ``fit``, received by a destination that overrides ``upload_file`` (as Composer's
    own tests' ``FileUploaderTracker`` does, without ``can_upload_files``)."""
    from obsbus import Trainer
    from obsbus.loggers import LoggerDestination

    class FileUploaderTracker(LoggerDestination):
        def __init__(self) -> None:
            self.uploaded_files = []

        def upload_file(self, state, remote_file_name, file_path, *, overwrite):
            del state, overwrite  # unused
            self.uploaded_files.append((remote_file_name, file_path))

    hparams_file = tmp_path / "hparams.yaml"
    hparams_file.write_text("lr: 0.1\n")
    tracker = FileUploaderTracker()

    # Construct the trainer
    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=train_dataloader,
        max_duration="1ep",
        loggers=[tracker],
    )

    # Upload a custom file, such as a configuration YAML
    trainer.logger.upload_file(
        remote_file_name="hparams.yaml",
        file_path=str(hparams_file),
    )

    # Train!
    trainer.fit()
    trainer.close()
    assert [(name, Path(path)) for name, path in tracker.uploaded_files] == [
        ("hparams.yaml", hparams_file)
    ]
