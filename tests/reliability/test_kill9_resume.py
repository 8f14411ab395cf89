"""kill -9 a FileLogger run at a random moment, then resume it in the same run folder.

Nothing flushes on SIGKILL: what counts is what already reached the OS. A
subprocess (``scripts/killed_run.py``) trains with a FileLogger
(``write_period`` 50 ms, slow 20 ms steps, no flush for 1e6 batches) and
prints each step, with the time, once its loss was handed over. The parent
kills it at a random (seeded) moment, or the script kills itself in the
middle of writing a JSON Lines line (``torn``). Then a second run resumes in
the same folder with ``FileLogger(resume=True)`` and the run's timestamp
restored to the last step on disk. Asserted:

- at most one write period of rows is lost: only the steps logged in the
  last ``write_period`` (+ slack for the writer thread) before the kill
  (rows left in Python's file buffer until a flush lost up to ~1.7 s of them);
- every line of the resumed file parses (a torn last line must be dropped at
  resume, not left in the middle of the file), and no text-log line is torn;
- the resumed rows append, steps continuing from the last one on disk.

The default suite kills 3 times at random and tears one line; ``-m long``
20 more kills and 3 more tears.
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "killed_run.py"
STEPS = 100_000
WRITE_PERIOD_S = 0.05  # the script's FileLogger write_period
SLACK_S = 0.25  # the writer thread's lag on a noisy machine
RESUMED = 5  # batches the resumed run trains
TIMEOUT_S = 120
JSONL, TEXT = "metrics-rank0.jsonl", "logs-rank0.txt"


def _logged(out: str) -> dict[int, float]:
    """``{step: when}`` from the ``logged`` lines (a line cut by the kill is left out)."""
    found = re.findall(r"^logged (\d+) (\d+\.\d{6})$", out, flags=re.MULTILINE)
    return {int(step): float(when) for step, when in found}


def _whole_rows(path: Path) -> tuple[list[dict[str, object]], str]:
    """The rows of every whole line, and what follows the last newline (a torn line)."""
    text = path.read_text()
    *lines, tail = text.split("\n")
    return [json.loads(line) for line in lines], tail


def _resume(tmp_path: Path, folder: Path, last: int) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "resume", str(folder), str(last), str(RESUMED)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _check_resumed(folder: Path, last: int) -> None:
    rows = []
    for number, line in enumerate((folder / JSONL).read_text().splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"line {number} of the resumed file is torn: {line!r}") from None
    steps = [r["step"] for r in rows]
    assert steps == list(range(1, last + RESUMED + 1)), "resumed steps do not continue"
    assert [r["loss/train/total"] for r in rows] == [float(s) for s in steps]
    for line in (folder / TEXT).read_text().splitlines():
        assert re.fullmatch(r"\[\w+\](\[batch=\d+\])?: .+", line), f"a torn text line: {line!r}"


def _kill_at_random(tmp_path: Path, seed: int) -> None:
    folder = tmp_path / f"killed-{seed}"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "train", str(folder), str(STEPS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        time.sleep(random.Random(seed).uniform(0.3, 2.0))
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()  # the same clock as the script's (CLOCK_MONOTONIC)
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    logged = _logged(out)
    assert logged, "nothing was logged before the kill"
    rows, _ = _whole_rows(folder / JSONL)
    on_disk = [r["step"] for r in rows]
    assert on_disk == list(range(1, len(on_disk) + 1))
    lost = sorted(set(logged) - set(on_disk))
    too_old = [s for s in lost if logged[s] < killed_at - WRITE_PERIOD_S - SLACK_S]
    assert not too_old, (
        f"{len(lost)} step(s) lost, {len(too_old)} logged more than one write period before "
        f"the kill (from {too_old[0]}, {killed_at - logged[too_old[0]]:.2f}s before it)"
    )
    last = on_disk[-1] if on_disk else 0
    _resume(tmp_path, folder, last)
    _check_resumed(folder, last)


def _tear_a_line(tmp_path: Path, n: int) -> None:
    folder = tmp_path / f"torn-{n}"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "torn", str(folder), str(STEPS), str(n)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    rows, tail = _whole_rows(folder / JSONL)
    assert tail, "the kill did not cut a line short"  # the attack landed
    last = rows[-1]["step"] if rows else 0
    warned = _resume(tmp_path, folder, last)
    _check_resumed(folder, last)
    assert "cut short" in warned and JSONL in warned, warned[-3000:]  # and it was told


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_at_a_random_moment_loses_at_most_one_write_period_and_resumes(tmp_path, seed):
    _kill_at_random(tmp_path, seed)


def test_kill_9_in_the_middle_of_a_line_resumes_without_a_torn_line(tmp_path):
    _tear_a_line(tmp_path, 5)


@pytest.mark.long
@pytest.mark.parametrize("seed", range(100, 120))
def test_kill_9_at_many_random_moments_loses_at_most_one_write_period(tmp_path, seed):
    _kill_at_random(tmp_path, seed)


@pytest.mark.long
@pytest.mark.parametrize("n", [1, 2, 12])
def test_kill_9_in_the_middle_of_other_lines_resumes_without_a_torn_line(tmp_path, n):
    _tear_a_line(tmp_path, n)
