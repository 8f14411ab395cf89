"""Attacks on a real process: signals at random moments, two runs racing for one folder.

- **Signals**: a subprocess trains with FileLogger and TensorBoard (both
  holding rows between hand-overs) and prints each step once its loss was
  handed to them; SIGTERM or SIGINT comes at a random moment (seeded). Every
  printed step must be in the JSON Lines (once, in order) and in TensorBoard's
  event files (read with TensorBoard's own reader), and the exit status is
  the documented one: 143 (``TrainingTerminated``) for SIGTERM, 130 (Python's
  ``KeyboardInterrupt``, re-raised as SIGINT) for SIGINT.
- **Same-folder race**: two processes start a run of one name in one folder,
  released together by a barrier file. Exactly one succeeds; the other fails
  with FileLogger's clear ``FileExistsError``.

The default suite tries a few timings; ``-m long`` many more.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "signalled_run.py"
EXIT = {signal.SIGTERM: 143, signal.SIGINT: -signal.SIGINT}  # subprocess: -2 is "killed by SIGINT"


def _signal_at_random(tmp_path: Path, sig: signal.Signals, seed: int) -> None:
    folder = tmp_path / f"{sig.name}-{seed}"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "train", str(folder), "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    logged: list[int] = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + random.Random(seed).uniform(0.05, 1.5)
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("logged "):
                logged.append(int(line.split()[1]))
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    logged += [int(line.split()[1]) for line in out.splitlines() if line.startswith("logged ")]
    assert proc.returncode == EXIT[sig], err[-2000:]
    assert logged, "the run logged nothing before the signal"
    rows = [json.loads(line) for line in (folder / "metrics-rank0.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows]
    assert steps == list(range(1, len(steps) + 1))  # once each, in order
    assert set(logged) <= set(steps), (
        f"printed but not on disk: {sorted(set(logged) - set(steps))[:10]}"
    )
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    tb_steps = {e.step for e in events.Scalars("loss/train/total")}
    assert set(logged) <= tb_steps, f"not in TensorBoard: {sorted(set(logged) - tb_steps)[:10]}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_signal_at_a_random_moment_loses_no_logged_step(tmp_path, sig, seed):
    _signal_at_random(tmp_path, sig, seed)


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("seed", range(100, 120))
def test_a_signal_at_many_random_moments_loses_no_logged_step(tmp_path, sig, seed):
    _signal_at_random(tmp_path, sig, seed)


def _race(tmp_path: Path, attempt: int) -> None:
    folder, barrier = tmp_path / f"race-{attempt}", tmp_path / f"go-{attempt}"
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "race", str(folder), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for _ in range(2)
    ]
    try:
        time.sleep(2.0)  # both imported torch and are spinning on the barrier
        barrier.touch()
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    won = [i for i, (out, _) in enumerate(results) if "won" in out]
    assert len(won) == 1, [err[-500:] for _, err in results]
    lost_err = results[1 - won[0]][1]
    assert "FileExistsError" in lost_err and "already exists. To fix, pass resume=True" in lost_err
    rows = (folder / "metrics-rank0.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [1, 2]  # the winner's, not overwritten


@pytest.mark.parametrize("attempt", range(3))
def test_two_runs_started_together_in_one_folder_exactly_one_wins(tmp_path, attempt):
    _race(tmp_path, attempt)


@pytest.mark.long
@pytest.mark.parametrize("attempt", range(40))
def test_two_runs_started_together_many_times_exactly_one_wins(tmp_path, attempt):
    _race(tmp_path, attempt)
