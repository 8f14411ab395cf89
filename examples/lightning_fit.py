"""Keep your Lightning ``Trainer``; get obsbus's monitors and destinations.

One ``ObsbusCallback`` in ``callbacks=[...]`` runs obsbus's monitors inside
Lightning's loop (batches count optimizer steps, here 2 microbatches each),
and its ``lightning_logger`` in ``logger=...`` sends ``self.log(...)`` values to
the same destinations. The metrics land in the run folder: FileLogger's JSON
Lines and TensorBoard event files.

Usage:
    python examples/lightning_fit.py [--workspace runs] [--run-name lightning-demo]
"""

from __future__ import annotations

import argparse
import warnings

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from obsbus import RunFolder
from obsbus.callbacks import LRMonitor, NaNMonitor, SpeedMonitor
from obsbus.integrations.lightning import ObsbusCallback
from obsbus.loggers import FileLogger, TensorboardLogger


class Regressor(pl.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train/mse", loss)  # reaches FileLogger and TensorBoard via ObsbusLogger
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/mse", F.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main(
    workspace: str = "runs", run_name: str = "lightning-demo", epochs: int = 3
) -> ObsbusCallback:
    torch.manual_seed(0)
    x = torch.randn(1024, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.randn(1024, 1)
    train = DataLoader(TensorDataset(x[:896], y[:896]), batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(x[896:], y[896:]), batch_size=64)
    folder = RunFolder.from_parts(workspace=workspace, exp_name=run_name)
    bus = ObsbusCallback(
        callbacks=[SpeedMonitor(window_size=5), LRMonitor(), NaNMonitor()],
        loggers=[FileLogger(), TensorboardLogger()],
        run_folder=folder,
        run_name=run_name,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        accumulate_grad_batches=2,
        callbacks=[bus],
        logger=bus.lightning_logger,
        log_every_n_steps=5,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        trainer.fit(Regressor(), train, val)
    print(f"Run folder: {folder.root}")
    return bus


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default="runs")
    parser.add_argument("--run-name", default="lightning-demo")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    main(args.workspace, args.run_name, args.epochs)
