"""A full disk under one destination: training finishes, one error names it, the rest is whole.

As root (CI) the run folder is a 1 MB tmpfs, filled up to a few KB before
the run; elsewhere (and as a second case everywhere) a stand-in raw file
under FileLogger's buffers raises ``ENOSPC`` once a few KB were written, so
writes, flushes and the close's last flush fail as on a real full disk. A
second FileLogger (on the real disk) and an InMemoryLogger must get every
step.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

from obsbus import Run
from obsbus.loggers import FileLogger, InMemoryLogger
from obsbus.loggers import file_logger as file_logger_module

STEPS = 3000


class _FullRaw(io.RawIOBase):
    """A file whose disk is full after ``left`` bytes: every later write raises ENOSPC."""

    def __init__(self, raw: io.FileIO, left: int) -> None:
        self._raw, self._left = raw, left

    @property
    def name(self) -> str:
        return str(self._raw.name)

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self._left:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._left -= len(data)
        return self._raw.write(data)

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        super().close()
        self._raw.close()


@contextlib.contextmanager
def _full_disk(where: Path, monkeypatch, how: str):
    """``where`` on a nearly full file system; yields how it was made."""
    where.mkdir()
    mounted = (
        how == "tmpfs"
        and os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True
        ).returncode
        == 0
    )
    try:
        if mounted:
            with open(where / "filler", "wb") as f, contextlib.suppress(OSError):
                f.write(b"\0" * (1024 * 1024 - 16 * 1024))  # leave a few KB
            yield "tmpfs"
        else:
            real_open = file_logger_module._open

            def opener(path, mode):
                if not Path(path).is_relative_to(where):
                    return real_open(path, mode)
                # Below the buffers, as a real disk: writes, flushes and the close's last
                # flush all fail once the disk is full (FileLogger closes the file).
                raw = _FullRaw(open(path, mode + "b", buffering=0), left=16 * 1024)  # noqa: SIM115
                return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8")

            monkeypatch.setattr(file_logger_module, "_open", opener)
            yield "stand-in"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("how", ["tmpfs", "stand-in"])  # tmpfs as root, else the stand-in too
def test_a_full_disk_stops_one_destination_only(tmp_path, monkeypatch, caplog, how):
    full = tmp_path / "full"
    other = tmp_path / "other"
    other.mkdir()
    with _full_disk(full, monkeypatch, how):
        on_full = FileLogger(write_period=0.0)
        elsewhere = FileLogger(str(other / "log.txt"), str(other / "m.jsonl"), write_period=0.0)
        memory = InMemoryLogger()
        with (
            caplog.at_level(logging.WARNING, logger="obsbus"),
            Run(
                max_duration=f"{STEPS}ba", run_folder=full, loggers=[on_full, elsewhere, memory]
            ) as run,
        ):
            for i, _ in enumerate(run.train([[0]] * STEPS)):
                run.state.loss = float(i)
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert memory.get_timeseries("loss/train/total")["step"] == list(range(1, STEPS + 1))
    rows = [json.loads(line) for line in (other / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert len(errors) == 1 and errors[0].startswith("obsbus: FileLogger."), errors
    assert "FileLogger#2" not in errors[0]  # the one on the full disk, by its own name
    assert any(
        "No space left on device" in r.getMessage() or "ENOSPC" in str(r.exc_info)
        for r in caplog.records
    )
