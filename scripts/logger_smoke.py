"""Logger smoke test: a tiny CPU run through every local destination, checked.

Runs a few batches of a small model with InMemoryLogger, ConsoleLogger,
ProgressBarLogger, FileLogger and LoguruLogger (with the rank-aware log set
up), in a temporary folder, with no network. Checks what each produced,
prints one line per destination, and exits non-zero if anything is missing.

Usage:
    python scripts/logger_smoke.py [--keep]     # --keep: leave the run folder and print it
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from obsbus import Trainer
from obsbus.log import reset_logging, setup_logging
from obsbus.loggers import (
    ConsoleLogger,
    FileLogger,
    InMemoryLogger,
    LoguruLogger,
    ProgressBarLogger,
)

BATCHES, EPOCHS = 6, 2


def run(folder: Path) -> dict[str, Callable[[], str]]:
    """Train, and return a check per destination (each returns a summary or raises)."""
    torch.manual_seed(0)
    data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(BATCHES)]
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    memory, console_out, bar_out = InMemoryLogger(), io.StringIO(), io.StringIO()
    setup_logging(folder, module="smoke", stderr=False)
    with Trainer(model, data, f"{EPOCHS}ep", loss_fn=F.mse_loss, eval_dataloader=data[:2],
                 run_name="smoke", run_folder=folder, device="cpu", hparams={"lr": 1e-3},
                 loggers=[memory, ConsoleLogger(log_interval="3ba", stream=console_out),
                          ProgressBarLogger(stream=bar_out), FileLogger(),
                          LoguruLogger(log_interval="2ba")]) as trainer:
        trainer.fit()
    reset_logging()
    total = BATCHES * EPOCHS
    losses = memory.get_timeseries("loss/train/total")

    def check_memory() -> str:
        assert losses["batch"] == list(range(1, total + 1)), losses["batch"]
        assert len(memory.get_timeseries("metrics/eval/loss")["batch"]) == EPOCHS
        assert memory.hyperparameters["lr"] == 1e-3
        return f"{len(losses['batch'])} losses, {EPOCHS} eval losses, hyperparameters"

    def check_console() -> str:
        text = console_out.getvalue()
        lines = [line for line in text.splitlines() if line.startswith("[epoch=")]
        assert len(lines) == total // 3, text
        assert "Hyperparameters:" in text and "metrics/eval/loss" in text
        return f"{len(lines)} metric blocks, hyperparameters, eval"

    def check_progress() -> str:
        text = bar_out.getvalue()
        assert f"{total}/{total}" in text and "loss=" in text, text
        return "train bar reached " + f"{total}/{total}"

    def check_files() -> str:
        rows = [json.loads(r) for r in (folder / "metrics-rank0.jsonl").read_text().splitlines()]
        steps = [r["step"] for r in rows if "loss/train/total" in r]
        assert steps == losses["step"], steps
        values = [r["loss/train/total"] for r in rows if "loss/train/total" in r]
        assert values == losses["loss/train/total"]
        text = (folder / "logs-rank0.txt").read_text()
        assert "[hyperparameter][batch=0]: lr: 0.001" in text
        return f"{len(rows)} JSON lines equal to the in-memory values; text log"

    def check_loguru() -> str:
        info = (folder / "logs" / "smoke" / "rank-0" / "info.log").read_text()
        lines = [line for line in info.splitlines() if "loss/train/total=" in line]
        assert len(lines) == total // 2, info
        assert all("rank-0/1" in line for line in lines)
        return f"{len(lines)} metric lines in logs/smoke/rank-0/info.log"

    return {"InMemoryLogger": check_memory, "ConsoleLogger": check_console,
            "ProgressBarLogger": check_progress, "FileLogger": check_files,
            "LoguruLogger": check_loguru}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check every local destination on a tiny run.")
    parser.add_argument("--keep", action="store_true", help="keep the run folder")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="obsbus-smoke-"))
    failures = 0
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            checks = run(folder)
        for name, check in checks.items():
            try:
                print(f"ok    {name}: {check()}")
            except Exception as exc:  # report every destination, then fail
                failures += 1
                print(f"FAIL  {name}: {exc!r}"[:2000])
    finally:
        if args.keep:
            print(f"run folder: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print("logger smoke: " + ("all destinations ok" if not failures else f"{failures} failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
