"""What a FileLogger leaves on disk if the process is killed (kill -9) at any moment.

Nothing flushes on SIGKILL, so what counts is what already reached the OS:
every hand-over's rows are written to the file (not left in Python's buffer,
which held them until the next ``flush_interval``), and a line cut short by
the kill (a buffer flushed in the middle of it, a full disk) is dropped when
the run resumes instead of becoming a corrupt line in the middle of the file.
"""

from __future__ import annotations

import json
import logging

from obsbus import Run
from obsbus.loggers import FileLogger


def test_each_hand_over_reaches_the_os_without_waiting_for_a_flush(tmp_path):
    files = FileLogger(write_period=0.0, flush_interval=1000)
    with Run(max_duration="5ba", run_folder=tmp_path, loggers=[files]) as run:
        for i, _ in enumerate(run.train([[0]] * 5)):
            run.state.loss = float(i)
        files._writer.flush()  # the writer has run; the files are not flushed or closed
        on_disk = (tmp_path / "metrics-rank0.jsonl").read_text().splitlines()
        text = (tmp_path / "logs-rank0.txt").read_text()
    assert [json.loads(line)["step"] for line in on_disk] == [1, 2, 3, 4, 5]
    assert "[metric][batch=5]: loss/train/total" in text


def test_resume_drops_a_line_the_kill_cut_short(tmp_path, caplog):
    jsonl = tmp_path / "metrics-rank0.jsonl"
    jsonl.write_text(
        '{"step": 1, "loss/train/total": 0.5}\n{"step": 2, "loss/train/total": 0.4}\n{"step": 3, "lo'
    )
    (tmp_path / "logs-rank0.txt").write_text(
        "[metric][batch=1]: loss/train/total: 0.5\n[metric][ba"
    )
    files = FileLogger(resume=True)
    with (
        caplog.at_level(logging.WARNING, logger="obsbus"),
        Run(max_duration="1ba", run_folder=tmp_path, loggers=[files]) as run,
    ):
        for _ in run.train([[0]]):
            run.state.loss = 0.25
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]  # every line parses
    assert [r["step"] for r in rows] == [1, 2, 1]
    assert (tmp_path / "logs-rank0.txt").read_text().splitlines()[1].startswith("[metric][batch=1]")
    warned = [r.getMessage() for r in caplog.records if "cut short" in r.getMessage()]
    assert len(warned) == 2 and "metrics-rank0.jsonl" in " ".join(warned)
