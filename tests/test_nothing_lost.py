"""Nothing logged before the end is lost: on an exception and on SIGTERM.

A destination whose writes are slow (tests/scripts/slow_writer_run.py) is
behind when the run is stopped; the ``exception`` event must fire and the
destination flush, so every step the training loop logged is in its file.
The subprocess tests run the script with ``sys.executable`` and read its
stdout protocol (see the script's docstring).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from obsbus import (
    BackgroundWriter,
    Callback,
    LoggerDestination,
    Run,
    Trainer,
    TrainingTerminated,
)

from .helpers import regression_data, tiny_model

SCRIPT = Path(__file__).parent / "scripts" / "slow_writer_run.py"
TIMEOUT_S = 120  # generous: the machine is small and noisy


def _run_script(tmp_path: Path, mode: str, batches: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "out.jsonl"), mode, str(batches)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _parse_stdout(text: str) -> tuple[list[int], list[int], list[str]]:
    logged, pending, restored = [], [], []
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "logged":
            logged.append(int(rest))
        elif word == "pending":
            pending.append(int(rest))
        elif line.startswith("handler restored "):
            restored.append(line.removeprefix("handler restored "))
    return logged, pending, restored


def _written_steps(path: Path) -> list[int]:
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in records:
        assert rec["values"] == {"metric": rec["step"] * 0.5}
    return [rec["step"] for rec in records]


def _check_nothing_lost(logged: list[int], written: list[int]) -> None:
    assert logged, "the script logged nothing"
    assert logged == list(range(len(logged)))
    missing = sorted(set(logged) - set(written))
    assert not missing, f"logged but never written: {missing}"
    # In order, once each; at most one step more than stdout reported (a signal can
    # land between run.log_metrics returning and the `logged` line being printed).
    assert written == list(range(len(written)))
    assert len(written) - len(logged) <= 1


# --------------------------------------------------------------- subprocess


def test_exception_in_loop_flushes_everything_logged(tmp_path):
    result = _run_script(tmp_path, "raise", batches=200)

    assert result.returncode != 0, result.stdout
    assert "RuntimeError: boom at batch 30" in result.stderr
    logged, pending, restored = _parse_stdout(result.stdout)
    assert len(logged) == 30  # the callback raised at the end of batch 30
    # The exception event fired exactly once, while the writer was behind.
    assert len(pending) == 1 and pending[0] > 0, result.stdout
    _check_nothing_lost(logged, _written_steps(tmp_path / "out.jsonl"))
    assert restored == ["True"]


def test_sigterm_flushes_everything_logged_and_exits_143(tmp_path):
    out_path, stdout_path = tmp_path / "out.jsonl", tmp_path / "stdout.txt"
    with stdout_path.open("w") as stdout, (tmp_path / "stderr.txt").open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), str(out_path), "sigterm", "20000"],
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
            text=True,
        )
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                logged_so_far, _, _ = _parse_stdout(stdout_path.read_text())
                if len(logged_so_far) >= 40:
                    break
                assert proc.poll() is None, "the script ended before it was signalled"
                assert time.monotonic() < deadline, "the script never logged 40 steps"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            returncode = proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    stderr_text = (tmp_path / "stderr.txt").read_text()

    # TrainingTerminated is a SystemExit(128 + SIGTERM): an exit, not a death by signal.
    assert returncode == 128 + signal.SIGTERM == 143, stderr_text
    assert "received signal 15" in stderr_text
    assert "Traceback" not in stderr_text
    logged, pending, restored = _parse_stdout(stdout_path.read_text())
    assert len(logged) >= 40
    assert len(pending) == 1 and pending[0] > 0, stdout_path.read_text()
    _check_nothing_lost(logged, _written_steps(out_path))
    assert restored == ["True"], "the SIGTERM handler from before the run was not restored"


def test_completed_run_writes_everything_and_restores_handler(tmp_path):
    result = _run_script(tmp_path, "complete", batches=50)

    assert result.returncode == 0, result.stderr
    logged, pending, restored = _parse_stdout(result.stdout)
    assert logged == list(range(50))
    assert pending == []  # no exception event
    assert _written_steps(tmp_path / "out.jsonl") == logged
    assert restored == ["True"]


# ---------------------------------------------------------------- in-process


class SlowListDestination(LoggerDestination):
    """Like the script's destination, into a list; records which hooks ran."""

    name = "slow-list"

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.rows: list[tuple[int, dict]] = []
        self.hooks: list[str] = []
        self.pending_at_exception: int | None = None
        self.writer = BackgroundWriter(self.name)

    def _write(self, step, metrics) -> None:
        time.sleep(self.delay)
        self.rows.append((step, metrics))

    def log_metrics(self, metrics, step=None) -> None:
        self.writer.submit(self._write, step, dict(metrics))

    def exception(self, state, logger) -> None:
        self.hooks.append("exception")
        self.pending_at_exception = self.writer.pending
        self.writer.flush()

    def fit_end(self, state, logger) -> None:
        self.hooks.append("fit_end")
        self.writer.flush()

    def close(self, state, logger) -> None:
        self.hooks.append("close")
        self.writer.close()


def _ones(batch):
    return 1


def test_sigterm_handler_restored_after_a_normal_run():
    assert threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM)
    seen_inside = []
    with Run(max_duration="3ba", num_samples_fn=_ones) as run:
        for _ in run.train(range(3)):
            seen_inside.append(signal.getsignal(signal.SIGTERM))
    assert all(h is not before and callable(h) for h in seen_inside)
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_handler_restored_after_a_run_that_raises():
    def previous(signum, frame):
        pass

    original = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(RuntimeError, match="loop body"), Run(num_samples_fn=_ones) as run:
            for _ in run.train(range(3)):
                raise RuntimeError("loop body")
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, original)


def test_exception_in_loop_body_flushes_in_process():
    dest = SlowListDestination()
    with (
        pytest.raises(RuntimeError, match="loop body"),
        Run(loggers=[dest], num_samples_fn=_ones) as run,
    ):
        for step, _ in enumerate(run.train(range(100))):
            run.log_metrics({"x": float(step)}, step=step)
            if step == 19:
                raise RuntimeError("loop body")
    assert dest.hooks == ["exception", "close"]
    assert dest.pending_at_exception and dest.pending_at_exception > 0
    assert [s for s, _ in dest.rows] == list(range(20))


def test_sigterm_in_process_fires_exception_and_flushes():
    received = []

    def previous(signum, frame):  # if obsbus did not take over, this keeps pytest alive
        received.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    dest = SlowListDestination()
    try:
        with (
            pytest.raises(TrainingTerminated) as info,
            Run(loggers=[dest], num_samples_fn=_ones) as run,
        ):
            for step, _ in enumerate(run.train(range(100))):
                run.log_metrics({"x": float(step)}, step=step)
                if step == 19:
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)  # interrupted by the handler's exception
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, original)
    assert received == []
    assert info.value.code == 143 and info.value.signum == signal.SIGTERM
    assert isinstance(run.state.exception, TrainingTerminated)
    assert dest.hooks == ["exception", "close"]
    assert dest.pending_at_exception and dest.pending_at_exception > 0
    assert [s for s, _ in dest.rows] == list(range(20))


def test_second_sigterm_during_flush_is_ignored(caplog):
    caplog.set_level(logging.INFO, logger="obsbus")

    class SignalledAgain(SlowListDestination):
        def exception(self, state, logger):
            os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM while flushing
            time.sleep(0.05)  # let the handler run here, before the flush
            super().exception(state, logger)

    def previous(signum, frame):
        pass

    original = signal.signal(signal.SIGTERM, previous)
    dest = SignalledAgain()
    try:
        with pytest.raises(TrainingTerminated), Run(loggers=[dest], num_samples_fn=_ones) as run:
            for step, _ in enumerate(run.train(range(100))):
                run.log_metrics({"x": float(step)}, step=step)
                if step == 9:
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, original)
    assert dest.hooks == ["exception", "close"]
    assert [s for s, _ in dest.rows] == list(range(10))
    assert any("again while flushing" in r.getMessage() for r in caplog.records)


class StopAtBatch(Callback):
    def __init__(self, batch):
        self.batch = batch

    def batch_end(self, state, logger):
        if state.timestamp.batch.value == self.batch:
            raise RuntimeError(f"monitor stopped the run at {self.batch}")


def test_trainer_exception_flushes_loss_history():
    dest = SlowListDestination()
    trainer = Trainer(
        tiny_model(),
        regression_data(batches=10),
        "2ep",
        loss_fn=torch.nn.functional.mse_loss,
        callbacks=[StopAtBatch(12)],
        loggers=[dest],
        device="cpu",
    )
    with pytest.raises(RuntimeError, match="monitor stopped the run at 12"), trainer:
        trainer.fit()
    assert dest.hooks == ["exception", "close"]
    assert dest.pending_at_exception and dest.pending_at_exception > 0
    assert [s for s, _ in dest.rows] == list(range(1, 13))
    assert all("loss/train/total" in m for _, m in dest.rows)


def test_sigterm_writes_what_a_file_logger_still_held(tmp_path):
    """A FileLogger holds values up to write_period; SIGTERM must still put them on disk."""
    from obsbus.loggers import FileLogger

    original = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    files = FileLogger(write_period=3600, flush_interval=10**6)
    try:
        with (
            pytest.raises(TrainingTerminated),
            Run(loggers=[files], run_folder=tmp_path, num_samples_fn=_ones) as run,
        ):
            for step, _ in enumerate(run.train(range(100))):
                run.log_metrics({"x": float(step)}, step=step)
                if step == 19:
                    assert len(files._held) == 19  # all but the first, handed over at once
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)  # interrupted by the handler's exception
    finally:
        signal.signal(signal.SIGTERM, original)
    rows = [json.loads(line) for line in (tmp_path / "metrics-rank0.jsonl").read_text().splitlines()]
    assert [(r["step"], r["x"]) for r in rows] == [(s, float(s)) for s in range(20)]
