"""Composer's Callbacks documentation page, ported to obsbus.

Source: mosaicml/composer docs/source/trainer/callbacks.rst at commit
6405188805a0054b4551ec49e4919c54c971d0e8 (https://docs.mosaicml.com/projects/composer/en/latest/trainer/callbacks.html).
The page's ``model``/``train_dataloader`` are ``tests.common.SimpleModel`` and
``RandomClassificationDataset`` in memory (``_common``); each example's code is the page's
with ``composer`` changed to ``obsbus`` in the imports. The page only builds its
trainers; these tests also call ``trainer.fit()`` to show the examples do what the
page says.
"""

from __future__ import annotations

import pytest

from tests.composer_port._common import loss_fn, random_classification_data, simple_model


@pytest.fixture
def model():
    return simple_model()


@pytest.fixture
def train_dataloader():
    return random_classification_data(size=16, batch_size=4)


def test_using_callbacks(model, train_dataloader, monkeypatch, tmp_path):
    """Source: callbacks.rst, "Using Callbacks" (SpeedMonitor, LRMonitor and WandBLogger).

    The page logs to Weights & Biases; as the Logging page's ``testsetup`` does, W&B runs
    with ``WANDB_MODE=disabled`` (no network, no account).
    """
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))

    from obsbus import Trainer
    from obsbus.callbacks import LRMonitor, SpeedMonitor
    from obsbus.loggers import WandBLogger

    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=train_dataloader,
        eval_dataloader=None,
        max_duration="1ep",
        callbacks=[SpeedMonitor(window_size=100), LRMonitor()],
        loggers=[WandBLogger()],
    )
    trainer.fit()
    trainer.close()
    assert int(trainer.state.timestamp.epoch) == 1


def _epoch_monitor_output(monitor, model, train_dataloader, capsys) -> list[str]:
    from obsbus import Trainer

    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=train_dataloader,
        max_duration="3ep",
        callbacks=[monitor],
    )
    capsys.readouterr()
    trainer.fit()
    trainer.close()
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("Epoch: ")]


def test_custom_callback_hook(model, train_dataloader, capsys):
    """Source: callbacks.rst, "Custom Callbacks": EpochMonitor with an ``epoch_start`` hook."""
    from obsbus import Callback, Logger, State

    class EpochMonitor(Callback):
        def epoch_start(self, state: State, logger: Logger):
            print(f"Epoch: {state.timestamp.epoch}")

    lines = _epoch_monitor_output(EpochMonitor(), model, train_dataloader, capsys)
    assert len(lines) == 3
    assert lines[0] != lines[1] != lines[2]  # the epoch counts on


def test_custom_callback_run_event(model, train_dataloader, capsys):
    """Source: callbacks.rst, "Custom Callbacks": the "equivalent implementation" of
    EpochMonitor that overrides ``Callback.run_event``; it must print what the hook version
    prints."""
    from obsbus import Callback, Event, Logger, State

    class EpochMonitor(Callback):
        def run_event(self, event: Event, state: State, logger: Logger):
            if event == Event.EPOCH_START:
                print(f"Epoch: {state.timestamp.epoch}")

    class HookEpochMonitor(Callback):
        def epoch_start(self, state: State, logger: Logger):
            print(f"Epoch: {state.timestamp.epoch}")

    expected = _epoch_monitor_output(HookEpochMonitor(), simple_model(), train_dataloader, capsys)
    lines = _epoch_monitor_output(EpochMonitor(), model, train_dataloader, capsys)
    assert lines == expected and len(lines) == 3
