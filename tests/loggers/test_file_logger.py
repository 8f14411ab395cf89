from __future__ import annotations

import json
import sys
import threading

import pytest
import torch.nn.functional as F

from obsbus import Callback, LoggerDestination, Timestamp, Trainer
from obsbus.loggers import FileLogger, InMemoryLogger

from ..helpers import regression_data, tiny_model


def fit(tmp_path, loggers, duration="2ep", callbacks=(), **kwargs):
    trainer = Trainer(tiny_model(), regression_data(4), duration, loss_fn=F.mse_loss,
                      loggers=loggers, callbacks=list(callbacks), device="cpu",
                      run_folder=tmp_path / "run", run_name="r", **kwargs)
    return trainer


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_logged_value_reaches_both_files(tmp_path):
    files, memory = FileLogger(), InMemoryLogger()
    with fit(tmp_path, [files, memory], eval_dataloader=regression_data(2, seed=1),
             hparams={"lr": 0.001}) as trainer:
        trainer.fit()
    text = (tmp_path / "run" / "logs-rank0.txt").read_text()
    rows = read_jsonl(tmp_path / "run" / "metrics-rank0.jsonl")
    losses = memory.get_timeseries("loss/train/total")
    train_rows = [r for r in rows if "loss/train/total" in r]
    assert [r["step"] for r in train_rows] == losses["step"] == list(range(1, 9))
    assert [r["loss/train/total"] for r in train_rows] == losses["loss/train/total"]
    # counted from 1, as the console prints it (InMemoryLogger keeps Composer's completed count)
    assert [r["epoch"] for r in train_rows] == [e + 1 for e in losses["epoch"]] == [1] * 4 + [2] * 4
    assert all(isinstance(r["wall_time"], float) for r in rows)
    eval_rows = [r for r in rows if "metrics/eval/loss" in r]
    assert [r["step"] for r in eval_rows] == [4, 8]
    assert [r["epoch"] for r in eval_rows] == [1, 2]  # the eval at an epoch's end is its epoch's
    assert text.count("[metric][batch=") == 10
    assert "[hyperparameter][batch=0]: lr: 0.001" in text
    assert "[metric][batch=8]: loss/train/total: " in text
    assert files.paths == [tmp_path / "run" / "logs-rank0.txt",
                           tmp_path / "run" / "metrics-rank0.jsonl"]


def test_writes_happen_off_the_training_thread(tmp_path):
    threads = set()

    class Spy(FileLogger):
        def _write_metrics(self, handed):
            threads.add(threading.current_thread().name)
            super()._write_metrics(handed)

    with fit(tmp_path, [Spy()], duration="3ba") as trainer:
        trainer.fit()
    assert threads == {"obsbus-writer-FileLogger"}


def test_a_crash_mid_run_leaves_every_metric_logged_before_it(tmp_path):
    class Crash(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch >= "5ba":
                raise RuntimeError("crash at batch 5")

    files, memory = FileLogger(flush_interval=1000), InMemoryLogger()
    trainer = fit(tmp_path, [files, memory], callbacks=[Crash()])
    with pytest.raises(RuntimeError, match="crash at batch 5"):
        trainer.fit()
    # Not closed: the exception event alone must have put everything on disk.
    rows = read_jsonl(tmp_path / "run" / "metrics-rank0.jsonl")
    assert [r["step"] for r in rows] == memory.get_timeseries("loss/train/total")["step"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    text = (tmp_path / "run" / "logs-rank0.txt").read_text()
    assert "[exception]: RuntimeError('crash at batch 5')" in text
    trainer.close()


def test_the_exception_line_is_masked(tmp_path):
    # An error message that quotes a URI with credentials or a token must not reach the log.
    secrets = ("hunter2pw", "ghp_" + "a1B2c3D4" * 5)

    class Crash(Callback):
        def batch_end(self, state, logger):
            raise ConnectionError(f"postgresql://admin:{secrets[0]}@db/runs {secrets[1]}")

    trainer = fit(tmp_path, [FileLogger()], callbacks=[Crash()])
    with pytest.raises(ConnectionError):
        trainer.fit()
    trainer.close()
    text = (tmp_path / "run" / "logs-rank0.txt").read_text()
    assert "[exception]: ConnectionError('postgresql://***@db/runs ***')" in text
    assert not [s for s in secrets if s in text]


def test_existing_files_are_not_clobbered(tmp_path):
    with fit(tmp_path, [FileLogger()], duration="2ba") as trainer:
        trainer.fit()
    before = (tmp_path / "run" / "logs-rank0.txt").read_text()
    with pytest.raises(FileExistsError, match=r"logs-rank0.txt' already exists.*resume=True"):
        fit(tmp_path, [FileLogger()])
    assert (tmp_path / "run" / "logs-rank0.txt").read_text() == before
    with fit(tmp_path, [FileLogger(overwrite=True)], duration="1ba") as trainer:
        trainer.fit()
    rows = read_jsonl(tmp_path / "run" / "metrics-rank0.jsonl")
    assert [r["step"] for r in rows] == [1]


def test_a_resumed_run_appends_and_steps_continue(tmp_path):
    with fit(tmp_path, [FileLogger()], duration="1ep") as trainer:
        trainer.fit()
    first = (tmp_path / "run" / "logs-rank0.txt").read_text()

    class RestoreTimestamp(Callback):
        """What a checkpoint loader does at after_load."""

        def after_load(self, state, logger):
            state.timestamp = Timestamp(epoch=1, batch=4, sample=32)

    with fit(tmp_path, [FileLogger(resume=True)], callbacks=[RestoreTimestamp()]) as trainer:
        trainer.fit()
    text = (tmp_path / "run" / "logs-rank0.txt").read_text()
    assert text.startswith(first)
    rows = read_jsonl(tmp_path / "run" / "metrics-rank0.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 9))


def test_files_are_handed_to_uploaders_after_flushes(tmp_path):
    class Uploads(LoggerDestination):
        def __init__(self):
            self.seen = []

        def can_upload_files(self):
            return True

        def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
            self.seen.append((remote_file_name, file_path.read_bytes(), overwrite))

    uploads = Uploads()
    with fit(tmp_path, [FileLogger(flush_interval=2), uploads], duration="4ba") as trainer:
        trainer.fit()
    names = [name for name, _, _ in uploads.seen]
    assert set(names) == {"r/logs-rank0.txt", "r/metrics-rank0.jsonl"}
    assert names.count("r/metrics-rank0.jsonl") >= 3  # batch 2, batch 4, fit end, close
    last = {name: data for name, data, _ in uploads.seen}
    assert last["r/metrics-rank0.jsonl"] == (tmp_path / "run" / "metrics-rank0.jsonl").read_bytes()
    assert last["r/logs-rank0.txt"] == (tmp_path / "run" / "logs-rank0.txt").read_bytes()


def test_captures_stdout_and_restores_it(tmp_path):
    class Talk(Callback):
        def batch_end(self, state, logger):
            print(f"hello from batch {state.timestamp.batch.value}")

    original = sys.stdout
    with fit(tmp_path, [FileLogger(capture_stdout=True)], duration="2ba",
             callbacks=[Talk()]) as trainer:
        trainer.fit()
    assert sys.stdout is original
    text = (tmp_path / "run" / "logs-rank0.txt").read_text()
    assert "[stdout]: hello from batch 1" in text and "[stdout]: hello from batch 2" in text


def test_placeholders_and_absolute_names(tmp_path):
    target = tmp_path / "elsewhere" / "{run_name}-r{rank}.log"
    with fit(tmp_path, [FileLogger(str(target), jsonl_filename=None)], duration="1ba") as t:
        t.fit()
    assert (tmp_path / "elsewhere" / "r-r0.log").exists()
    assert not (tmp_path / "run" / "metrics-rank0.jsonl").exists()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"filename": "{rnak}.txt"}, ValueError, r"unknown placeholder \{rnak\}; accepted: \{run_name\}"),
        ({"jsonl_filename": "{step}.jsonl"}, ValueError, r"unknown placeholder \{step\}"),
        ({"log_interval": "5sp"}, ValueError, r"'5sp' is not supported"),
        ({"flush_interval": 0}, ValueError, r"flush_interval must be a whole number >= 1, got 0"),
        ({"flush_interval": "10"}, TypeError, r"flush_interval must be a whole number >= 1, got '10'"),
        ({"overwrite": True, "resume": True}, ValueError, "contradict"),
        ({"filename": ""}, TypeError, "must be a non-empty str"),
        ({"write_period": -0.5}, ValueError, r"write_period must be >= 0 seconds and finite, got -0.5"),
        ({"write_period": "1"}, TypeError, r"write_period must be a number of seconds, got '1'"),
        ({"overwrite": "false"}, TypeError, r"FileLogger overwrite must be True or False, got 'false'"),
        ({"overwrite": "false", "resume": True}, TypeError, r"overwrite must be True or False"),
        ({"resume": 2}, TypeError, r"FileLogger resume must be True or False, got 2"),
        ({"capture_stdout": None}, TypeError, r"FileLogger capture_stdout must be True or False, got None"),
        ({"capture_stderr": "yes"}, TypeError, r"FileLogger capture_stderr must be True or False"),
        ({"log_traces": 0}, TypeError, r"FileLogger log_traces must be True or False, got 0"),
        ({"remote_file_name": "{rnak}.log"}, ValueError, r"remote_file_name .*unknown placeholder \{rnak\}"),
        ({"remote_file_name": "/"}, TypeError, r"FileLogger remote_file_name must be a non-empty str .*got '/'"),
        ({"remote_file_name": 5}, TypeError, r"FileLogger remote_file_name must be a non-empty str"),
        ({"remote_file_name": "bogus://b/x.log"}, ValueError, r"bogus"),
        ({"buffer_size": 0}, ValueError, r"FileLogger buffer_size must be -1 \(the default buffer\), 1 \(line buffering\) .*got 0"),
        ({"buffer_size": -5}, ValueError, r"buffer_size must be -1 .*got -5"),
        ({"buffer_size": True}, TypeError, r"buffer_size must be -1 .*got True"),
        ({"buffer_size": "1"}, TypeError, r"buffer_size must be -1 .*got '1'"),
    ],
    ids=["placeholder", "jsonl-placeholder", "interval", "flush-zero", "flush-type", "both",
         "empty", "period-negative", "period-type", "overwrite-str", "overwrite-str-resume",
         "resume-int", "stdout-none", "stderr-str", "traces-int", "remote-placeholder",
         "remote-slash", "remote-int", "remote-scheme", "buffer-zero", "buffer-negative",
         "buffer-bool", "buffer-str"],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        FileLogger(**kwargs)


def test_a_directory_where_the_file_should_be(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory"):
        FileLogger(str(tmp_path))
    (tmp_path / "run" / "logs-rank0.txt").mkdir(parents=True)
    with pytest.raises(IsADirectoryError, match=r"logs-rank0.txt' is a directory"):
        fit(tmp_path, [FileLogger()])


def test_flush_puts_what_is_held_on_disk_mid_run(tmp_path):
    files = FileLogger(write_period=3600, flush_interval=10_000)
    seen: list[tuple[bool, list[int]]] = []

    class Reader(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch == "3ba":
                jsonl = tmp_path / "run" / "metrics-rank0.jsonl"
                before = [r["step"] for r in read_jsonl(jsonl)]
                seen.append((files.flush(timeout=10), before))
                seen.append((True, [r["step"] for r in read_jsonl(jsonl)]))

    assert files.flush() is False  # not open yet
    with fit(tmp_path, [files], duration="4ba", callbacks=[Reader()]) as trainer:
        trainer.fit()
    assert seen[0][1] in ([], [1])  # held (the first row may go at once): no flush due
    assert seen[1] == (True, [1, 2, 3])
    assert files.flush() is False  # closed


def test_held_values_are_written_once_per_write_period_and_at_flushes(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from obsbus import Run, writer

    clock = SimpleNamespace(t=0.0)
    monkeypatch.setattr(writer, "_now", lambda: clock.t)
    files = FileLogger(write_period=5, flush_interval=8)
    handed: list[list[int]] = []
    hand_over = files._hand_over

    def spy():
        if files._held:
            handed.append([row[0] for row in files._held])
        hand_over()

    files._hand_over = spy
    with Run(max_duration="10ba", loggers=[files], run_folder=tmp_path) as run:
        for i, _ in enumerate(run.train([[0]] * 10)):
            clock.t += 1.0  # batch i + 1 ends at t = i + 1
            run.state.loss = float(i)
    # at once (batch 1); at the first interval 5 s later (6); the flush at batch 8; the end
    assert handed == [[1], [2, 3, 4, 5, 6], [7, 8], [9, 10]]
    rows = read_jsonl(tmp_path / "metrics-rank0.jsonl")
    assert [(r["step"], r["loss/train/total"]) for r in rows] == [(i + 1, float(i)) for i in range(10)]


def test_text_lines_keep_the_order_they_were_logged_in(tmp_path):
    from obsbus import Run

    with Run(max_duration="2ba", loggers=[FileLogger(write_period=3600)], run_folder=tmp_path) as run:
        for i, _ in enumerate(run.train([[0], [0]])):
            run.log_metrics({"m": i})
            run.logger.log_traces({"t": i})
    lines = [line.split("]: ")[1] for line in (tmp_path / "logs-rank0.txt").read_text().splitlines()]
    assert lines == ["m: 0", "t: 0", "m: 1", "t: 1"]


def _log_rows(tmp_path, rows):
    """Each dict of ``rows`` logged at its own batch through Run; the JSON Lines text back."""
    from obsbus import Run

    with Run(max_duration=f"{len(rows)}ba", run_folder=tmp_path / "run", run_name="r",
             loggers=[FileLogger()]) as run:  # fmt: skip
        for row, _ in zip(rows, run.train([[1]] * len(rows)), strict=True):
            run.log_metrics(row)
    return (tmp_path / "run" / "metrics-rank0.jsonl").read_text()


def test_numpy_values_are_written_as_json_numbers(tmp_path):
    import numpy as np

    text = _log_rows(tmp_path, [{"f32": np.float32(0.5), "i64": np.int64(7),
                                 "flag": np.bool_(True), "vec": np.array([1.0, 2.0])}])  # fmt: skip
    row = json.loads(text.splitlines()[0])
    assert (row["f32"], row["i64"], row["flag"], row["vec"]) == (0.5, 7, True, [1.0, 2.0])
    assert type(row["i64"]) is int and type(row["flag"]) is bool  # not the strings "7", "True"
    log = (tmp_path / "run" / "logs-rank0.txt").read_text()
    assert "f32: 0.5000" in log and "i64: 7" in log


def test_nan_and_inf_are_strict_json_read_back_with_json_and_pandas_as_the_docstring_says(tmp_path):
    import math

    import pandas as pd

    nan, inf = float("nan"), float("inf")
    text = _log_rows(tmp_path, [{"v": nan}, {"v": inf}, {"v": -inf}, {"v": 0.5}])
    # The documented encoding: strict JSON, each non-finite value a string of its own.
    strict = [json.loads(line, parse_constant=_refuse) for line in text.splitlines()]
    assert [row["v"] for row in strict] == ["NaN", "Infinity", "-Infinity", 0.5]
    assert [float(row["v"]) for row in strict][1:] == [inf, -inf, 0.5]
    frame = pd.read_json(tmp_path / "run" / "metrics-rank0.jsonl", lines=True)
    assert str(frame["v"].dtype) == "float64"
    assert math.isnan(frame["v"][0]) and list(frame["v"][1:]) == [inf, -inf, 0.5]


def _refuse(name: str) -> None:
    raise AssertionError(f"not strict JSON: {name}")


def test_ints_beyond_int64_are_written_as_floats_so_pandas_reads_the_file(tmp_path):
    import pandas as pd

    rows = [{"big": 2**70, "low": -(2**63), "u": 2**63}, {"big": 1, "low": 1, "u": 1}]
    text = _log_rows(tmp_path, rows)
    row = json.loads(text.splitlines()[0])
    assert row == {**row, "big": float(2**70), "low": -(2**63), "u": float(2**63)}
    assert type(row["low"]) is int  # in range: exact
    frame = pd.read_json(tmp_path / "run" / "metrics-rank0.jsonl", lines=True)
    # pandas' default float parser is not exact to the last bit (precise_float=False)
    assert list(frame["big"]) == [pytest.approx(2**70, rel=1e-15), 1.0]
    assert list(frame["low"]) == [-(2**63), 1]
    huge = json.loads(_log_rows(tmp_path / "huge", [{"v": 10**400, "in": [2**70, 1]}]))
    assert huge["v"] == str(10**400) and huge["in"] == [float(2**70), 1]  # beyond float: digits


class Uploads(LoggerDestination):
    """Records what it is handed, as Composer's test's ``FileUploaderTracker``."""

    def __init__(self):
        self.seen = []

    def can_upload_files(self):
        return True

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.seen.append((remote_file_name, file_path.read_bytes()))


def test_composers_file_logger_arguments(tmp_path):
    """Composer's ``tests/loggers/test_file_logger.py::test_file_logger``: ``FileLogger(filename=
    <abs path>, remote_file_name='{run_name}/rank{rank}.log', buffer_size=1, flush_interval=1)``:
    the log lands at ``filename`` and is uploaded as the formatted ``remote_file_name``."""
    log_file = tmp_path / "output.log"
    files = FileLogger(filename=str(log_file), remote_file_name="{run_name}/rank{rank}.log",
                       buffer_size=1, flush_interval=1)
    uploads = Uploads()
    with fit(tmp_path, [files, uploads], duration="2ba", hparams={"foo": 3}) as trainer:
        trainer.fit()
    names = {name for name, _ in uploads.seen}
    assert names == {"r/rank0.log", "r/metrics-rank0.jsonl"}  # the JSON Lines keeps its name
    assert dict(uploads.seen)["r/rank0.log"] == log_file.read_bytes()
    text = log_file.read_text()
    assert "[hyperparameter][batch=0]: foo: 3" in text and "[metric][batch=2]: loss/train/total" in text


def test_remote_file_name_drops_a_leading_slash_and_goes_inside_remote_folder(tmp_path):
    uploads = Uploads()
    with fit(tmp_path, [FileLogger(remote_file_name="/{run_name}/text.log", jsonl_filename=None),
                        uploads], duration="1ba") as trainer:
        trainer.fit()
    assert {name for name, _ in uploads.seen} == {"r/text.log"}
    files = FileLogger(remote_file_name="text-{rank}.log", remote_folder="memory://fl-bucket/{run_name}")
    with fit(tmp_path / "two", [files], duration="1ba") as trainer:
        trainer.fit()
    (store,) = [u.store for u in files.remote_uploaders]
    assert sorted(store.objects) == ["r/metrics-rank0.jsonl", "r/text-0.log"]


@pytest.mark.parametrize(("buffer_size", "line_buffered"), [(1, True), (-1, False), (8192, False)])
def test_buffer_size_is_opens_buffering(tmp_path, buffer_size, line_buffered):
    """Composer passes ``buffer_size`` to ``open(..., buffering=buffer_size)``; 1 is line
    buffering. Each write is flushed to the OS in any case: the file holds every row at once."""
    files = FileLogger(buffer_size=buffer_size, write_period=0.0)
    with fit(tmp_path, [files], duration="2ba") as trainer:
        trainer.fit()
        assert files._text.line_buffering is line_buffered
        files._writer.flush(timeout=10)
        rows = read_jsonl(tmp_path / "run" / "metrics-rank0.jsonl")
        assert [r["step"] for r in rows] == [1, 2]
    assert files.buffer_size == buffer_size


def test_tables_are_written_as_composers_table_lines(tmp_path):
    """Composer's FileLogger writes ``[table]: test_table: {"columns":[...],"data":[...]}``
    (``tests/loggers/test_file_logger.py::test_file_logger``); obsbus adds the batch."""
    import torch

    class Table(Callback):
        def batch_end(self, state, logger):
            logger.log_table(columns=["prompt", "generation"],
                             rows=[["p0", "g0"], ["p1", torch.tensor(0.5)]], name="test_table")

    with fit(tmp_path, [FileLogger()], duration="1ba", callbacks=[Table()]) as trainer:
        trainer.fit()
    text = (tmp_path / "run" / "logs-rank0.txt").read_text()
    assert ('[table][batch=1]: test_table: {"columns":["prompt","generation"],'
            '"data":[["p0","g0"],["p1",0.5]]}\n') in text
