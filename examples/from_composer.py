"""Composer's Callbacks documentation example, ported to obsbus.

Source: mosaicml/composer docs/source/trainer/callbacks.rst ("Using Callbacks" and
"Custom Callbacks"; https://docs.mosaicml.com/projects/composer/en/latest/trainer/callbacks.html).
What changed for obsbus, and nothing else:

- ``composer`` became ``obsbus`` in the imports;
- the ``ComposerModel`` became a plain ``torch.nn.Module`` plus ``loss_fn=`` (a
  ``ComposerClassifier``'s loss is a cross entropy of the module's outputs);
- the page's ``model`` and ``train_dataloader`` are a small classifier on random data, so
  the example runs in seconds on a CPU.

W&B runs with ``WANDB_MODE=disabled`` unless you set ``WANDB_MODE`` yourself (``offline``
writes under the run folder's ``wandb/``), as Composer's own docs test does; without
``pip install 'obsbus[wandb]'`` the example says so and goes on without it. An
``InMemoryLogger`` is added so the example can print what SpeedMonitor and LRMonitor logged.

Usage:
    python examples/from_composer.py
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from obsbus import Callback, Event, Logger, MissingExtraError, State, Trainer
from obsbus.callbacks import LRMonitor, SpeedMonitor
from obsbus.loggers import InMemoryLogger, WandBLogger


# Custom Callbacks: a callback that runs on EPOCH_START and prints the epoch number.
class EpochMonitor(Callback):
    def epoch_start(self, state: State, logger: Logger):
        print(f"Epoch: {state.timestamp.epoch}")


# The equivalent implementation that overrides run_event (it runs at every event).
class RunEventEpochMonitor(Callback):
    def run_event(self, event: Event, state: State, logger: Logger):
        if event == Event.EPOCH_START:
            print(f"Epoch: {state.timestamp.epoch}")


def main() -> InMemoryLogger:
    os.environ.setdefault("WANDB_MODE", "disabled")
    torch.manual_seed(0)
    x, y = torch.randn(128, 16), torch.randint(0, 4, (128,))
    train_dataloader = DataLoader(TensorDataset(x, y), batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    try:
        loggers = [WandBLogger()]
    except MissingExtraError as exc:
        print(f"(no W&B: {exc})")
        loggers = []
    memory = InMemoryLogger()

    # Using Callbacks: SpeedMonitor and LRMonitor say *what* is logged, loggers *where*.
    trainer = Trainer(
        model=model,
        loss_fn=F.cross_entropy,
        train_dataloader=train_dataloader,
        eval_dataloader=None,
        max_duration="1ep",
        callbacks=[SpeedMonitor(window_size=4), LRMonitor()],
        loggers=[*loggers, memory],
    )
    trainer.fit()
    trainer.close()
    throughput = memory.get_timeseries("throughput/samples_per_sec")["throughput/samples_per_sec"]
    lr_key = next(k for k in memory.data if k.startswith("lr-"))
    print(
        f"{len(throughput)} throughput values, last {throughput[-1]:.0f} samples/s; "
        f"{lr_key} = {memory.most_recent_values[lr_key]}"
    )

    # The new callback can then be provided to the trainer, in either form.
    for monitor in (EpochMonitor(), RunEventEpochMonitor()):
        trainer = Trainer(
            model=model,
            loss_fn=F.cross_entropy,
            train_dataloader=train_dataloader,
            max_duration="2ep",
            callbacks=[monitor],
        )
        trainer.fit()
        trainer.close()
    return memory


if __name__ == "__main__":
    main()
