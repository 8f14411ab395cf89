"""Two processes start a run of one name in one folder at the same instant: exactly one wins.

Two copies of ``scripts/race_run.py`` spin on a barrier file and, once the
parent creates it, both build a ``Run`` named ``race`` with a FileLogger in
the same folder. Exactly one may start; the other must fail with the
``FileExistsError`` FileLogger gives when the second run comes later (the
same message, path and all), and the winner's metrics must not be
overwritten. A FileLogger that checks whether its files exist and creates
them in a second step lets both through now and then (2 of 40 tries); the
``slow-stat`` variant widens that gap as a slow network file system does
(``Path.exists`` takes 50 ms), so such a check fails every time.

The two processes run every attempt of a test (one interpreter start per
test, not per attempt). The default suite tries 10 + 3 times; ``-m long``
40 + 10.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from obsbus import Run
from obsbus.loggers import FileLogger

SCRIPT = Path(__file__).parent / "scripts" / "race_run.py"
TIMEOUT_S = 120  # per test; generous on 2 noisy cores


def _sequential_message(folder: Path) -> str:
    """The error a run gets when the folder's files are there already, started later."""
    for _ in range(2):
        try:
            with Run(
                max_duration="1ba", run_folder=folder, run_name="race", loggers=[FileLogger()]
            ) as run:
                for _ in run.train([[0]]):
                    run.state.loss = 0.0
        except FileExistsError as exc:
            return f"FileExistsError: {exc}"
    raise AssertionError("a second run in the same folder was not refused")


def _next_result(out: IO[str], attempt: int) -> str:
    """The next ``won``/``lost`` line of one process (``ready`` lines skipped)."""
    while True:
        line = out.readline()
        assert line, f"the process ended before reporting attempt {attempt}"
        word, _, rest = line.rstrip("\n").partition(" ")
        number, _, message = rest.partition(" ")
        if word in ("won", "lost") and int(number) == attempt:
            return f"{word} {message}".strip()


def _race(tmp_path: Path, attempts: int, *extra: str) -> None:
    folder, barrier = tmp_path / "race", tmp_path / "go"
    expected = _sequential_message(tmp_path / "sequential")
    errs = [tmp_path / f"stderr-{n}.txt" for n in range(2)]  # a file: a full pipe would block
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), str(folder), str(barrier), str(attempts), *extra],
            stdout=subprocess.PIPE,
            stderr=err.open("w"),
            text=True,
            cwd=tmp_path,
        )
        for err in errs
    ]
    try:
        for i in range(attempts):
            for p, err in zip(procs, errs, strict=True):  # both are spinning on the barrier
                assert p.stdout is not None
                assert p.stdout.readline() == f"ready {i}\n", err.read_text()[-3000:]
            Path(f"{barrier}-{i}").touch()
            results = [_next_result(p.stdout, i) for p in procs if p.stdout is not None]
            won = [r for r in results if r == "won"]
            assert len(won) == 1, f"attempt {i}: {results}"
            lost = next(r for r in results if r != "won")
            path = folder.with_name(f"race-{i}")
            assert lost == "lost " + expected.replace(str(tmp_path / "sequential"), str(path)), (
                f"attempt {i}: the loser's error is not the sequential one ({expected!r})"
            )
            rows = [json.loads(r) for r in (path / "metrics-rank0.jsonl").read_text().splitlines()]
            assert [r["step"] for r in rows] == [1, 2], f"attempt {i}: not the winner's rows alone"
        for p in procs:
            p.wait(timeout=TIMEOUT_S)
            assert p.returncode == 0
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_two_runs_started_together_in_one_folder_exactly_one_wins(tmp_path):
    _race(tmp_path, 10)


def test_two_runs_started_together_on_a_slow_file_system_exactly_one_wins(tmp_path):
    _race(tmp_path, 3, "slow-stat")


@pytest.mark.long
def test_two_runs_started_together_many_times_exactly_one_wins(tmp_path):
    _race(tmp_path, 40)


@pytest.mark.long
def test_two_runs_started_together_on_a_slow_file_system_many_times_exactly_one_wins(tmp_path):
    _race(tmp_path, 10, "slow-stat")
