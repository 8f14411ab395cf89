"""obsbus's monitors and destinations inside a Hugging Face ``transformers.Trainer``.

A tiny GPT-2 built from a config (no hub download) trains on synthetic tokens
with gradient accumulation and an eval set. One ``ObsbusCallback`` brings
SpeedMonitor, LRMonitor, NaNMonitor, FileLogger and TensorboardLogger;
``callback.wrap(trainer)`` gives obsbus the loss tensor (no ``.item()``) and
``train()``'s exceptions. The run folder ends up as::

    runs/default/<user>/<run_name>/
        metrics-rank0.jsonl   loss/train/total, throughput/*, lr-*, hf/*, metrics/eval/*
        logs-rank0.txt
        tensorboard/events.out.tfevents.*

Usage:
    python examples/hf_trainer.py [--epochs 2] [--workspace runs] [--run-name NAME]
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from obsbus import RunFolder
from obsbus.callbacks import LRMonitor, NaNMonitor, SpeedMonitor
from obsbus.integrations.transformers import ObsbusCallback
from obsbus.loggers import FileLogger, TensorboardLogger
from obsbus.state import default_run_name

VOCAB, SEQ = 128, 16


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Random token sequences: the model learns their unigram statistics."""

    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workspace", default="runs")
    parser.add_argument("--run-name", default=None)
    args = parser.parse_args()
    run_name = args.run_name or default_run_name()
    folder = RunFolder.from_parts(workspace=args.workspace, exp_name=run_name)

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=SEQ,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    obsbus = ObsbusCallback(
        callbacks=[SpeedMonitor(window_size=5), LRMonitor(), NaNMonitor(check_interval="10ba")],
        loggers=[FileLogger(), TensorboardLogger()],
        run_folder=folder,
        run_name=run_name,
    )
    training_args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf-trainer-"),  # HF's own checkpoints: none saved
        num_train_epochs=args.epochs,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        logging_steps=5,
        eval_strategy="epoch",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=Tokens(256, seed=0),
        eval_dataset=Tokens(64, seed=1),
        callbacks=[obsbus],
    )
    obsbus.wrap(trainer)
    trainer.train()
    print(f"Run folder: {folder.root}")


if __name__ == "__main__":
    main()
