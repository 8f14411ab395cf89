"""The shared tracker machinery, through a fake tracker client that records its calls."""

from __future__ import annotations

import logging
import math
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from obsbus import Run, writer
from obsbus.loggers import _tracker
from obsbus.loggers._run_metadata import environment_snapshot, mask_credentials, redact
from obsbus.loggers._tracker import RunInfo, TrackerDestination


class FakeTracker(TrackerDestination):
    """Records every client call with the thread it ran on."""

    def __init__(self, *, uploads: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[str, Any]] = []
        self.threads: set[str] = set()
        self.uploads = uploads

    def can_upload_files(self) -> bool:
        return self.uploads

    def _record(self, name: str, value: Any) -> None:
        self.threads.add(threading.current_thread().name)
        self.calls.append((name, value))

    def _client_start(self, info: RunInfo) -> None:
        self._record("start", info)

    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        self._record("metrics", (step, values))

    def _client_log_params(self, params: dict[str, Any]) -> None:
        self._record("params", params)

    def _client_set_tags(self, tags: dict[str, str]) -> None:
        self._record("tags", tags)

    def _client_upload_file(self, remote_file_name: str, file_path: Path) -> None:
        self._record("upload", (remote_file_name, file_path.read_text()))

    def _client_finish(self, failed: bool) -> None:
        self._record("finish", failed)

    def _write_held(self, handed: Any) -> None:
        self._record("hand-over", [step for step, _ in handed.rows[: handed.count]])
        super()._write_held(handed)

    def of(self, kind: str) -> list[Any]:
        return [value for name, value in self.calls if name == kind]


def _train(tracker: TrackerDestination, batches: int = 4, **run_kwargs: Any) -> None:
    with Run(max_duration=f"{batches}ba", loggers=[tracker], **run_kwargs) as run:
        for i, _ in enumerate(run.train([[0]] * batches)):
            run.state.loss = torch.tensor(float(i) + 0.5)


def test_metrics_reach_the_client_as_numbers_on_the_writer_thread_at_each_interval():
    tracker = FakeTracker(log_interval="2ba", log_env=False, log_git=False)
    _train(tracker, batches=4)
    metrics = tracker.of("metrics")
    assert [(step, values["loss/train/total"]) for step, values in metrics] == [
        (1, 0.5),
        (2, 1.5),
        (3, 2.5),
        (4, 3.5),
    ]
    assert all(type(values["loss/train/total"]) is float for _, values in metrics)
    assert threading.current_thread().name not in tracker.threads
    assert tracker.threads == {"obsbus-writer-FakeTracker"}
    assert tracker.of("finish") == [False]
    assert tracker.of("start")[0].run_name == tracker.of("start")[0].run_name  # a RunInfo


def test_values_stay_tensors_until_the_interval():
    tracker = FakeTracker(log_interval="3ba", write_period=0, log_env=False, log_git=False)
    held: list[Any] = []
    with Run(max_duration="2ba", loggers=[tracker]) as run:
        for _ in run.train([[0], [0]]):
            held = [values["loss/train/total"] for _, values in tracker._held]
            run.state.loss = torch.tensor(1.0)
    assert len(held) == 1 and isinstance(held[0], torch.Tensor)  # batch 1's, while in batch 2
    assert [step for step, _ in tracker.of("metrics")] == [1, 2]  # delivered at fit end


def test_write_period_0_hands_over_at_every_interval():
    tracker = FakeTracker(log_interval="2ba", write_period=0, log_env=False, log_git=False)
    _train(tracker, batches=5)
    assert tracker.of("hand-over") == [[1, 2], [3, 4], [5]]  # the last one at fit end


def test_held_rows_are_handed_over_once_per_write_period(monkeypatch):
    clock = SimpleNamespace(t=0.0)
    monkeypatch.setattr(writer, "_now", lambda: clock.t)
    tracker = FakeTracker(write_period=5, log_env=False, log_git=False)
    with Run(max_duration="10ba", loggers=[tracker]) as run:
        for i, _ in enumerate(run.train([[0]] * 10)):
            clock.t += 1.0  # batch i + 1 ends at t = i + 1
            run.state.loss = torch.tensor(float(i))
    # the first at once; then at the first interval 5 s after the last; the rest at fit end
    assert tracker.of("hand-over") == [[1], [2, 3, 4, 5, 6], [7, 8, 9, 10]]
    assert [(s, v["loss/train/total"]) for s, v in tracker.of("metrics")] == [
        (i + 1, float(i)) for i in range(10)
    ]


def test_at_most_max_held_steps_rows_wait_whatever_the_period(monkeypatch):
    monkeypatch.setattr(_tracker, "MAX_HELD_STEPS", 3)
    tracker = FakeTracker(write_period=3600, log_env=False, log_git=False)
    _train(tracker, batches=7)
    assert tracker.of("hand-over") == [[1], [2, 3, 4], [5, 6, 7]]


def test_rows_of_one_step_become_one_client_call_unless_a_key_repeats():
    tracker = FakeTracker(write_period=3600, log_env=False, log_git=False)
    with Run(max_duration="2ba", loggers=[tracker]) as run:
        for i, _ in enumerate(run.train([[0]] * 2)):
            run.logger.log_metrics({"a": torch.tensor(float(i))})
            run.logger.log_metrics({"b": torch.tensor(10.0 + i)})
            run.logger.log_metrics({"a": 20.0 + i})
    assert tracker.of("metrics") == [
        (0, {"a": 0.0, "b": 10.0}),
        (0, {"a": 20.0}),
        (1, {"a": 1.0, "b": 11.0}),
        (1, {"a": 21.0}),
    ]


def test_hyperparameters_reach_the_client_after_the_metrics_logged_before_them(tmp_path):
    tracker = FakeTracker(write_period=3600, log_env=False, log_git=False)
    path = tmp_path / "f.txt"
    path.write_text("x")
    with Run(max_duration="3ba", loggers=[tracker]) as run:
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.logger.log_metrics({"m": i})
            if i == 1:
                run.logger.log_hyperparameters({"late": True})
                run.logger.upload_file("f.txt", path)
    order = [(n, v[0] if n == "metrics" else None) for n, v in tracker.calls if n != "hand-over"]
    assert order[1:] == [
        ("metrics", 0),
        ("metrics", 1),
        ("params", None),
        ("upload", None),
        ("metrics", 2),
        ("finish", None),
    ]


def test_hyperparameters_are_flattened_and_the_environment_has_no_secrets(monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-live-0123456789")
    monkeypatch.setenv("SOME_URI", "https://ada:sk-live-0123456789@host/x")
    monkeypatch.setenv("OBSBUS_TEST_VISIBLE", "yes")
    tracker = FakeTracker(log_git=False)
    with Run(max_duration="1ba", loggers=[tracker]) as run:
        run.logger.log_hyperparameters({"optim": {"lr": 0.1, "name": "adam"}, "seed": 3})
        for _ in run.train([[0]]):
            pass
    params: dict[str, Any] = {}
    for p in tracker.of("params"):
        params.update(p)
    assert params["optim/lr"] == 0.1 and params["optim/name"] == "adam" and params["seed"] == 3
    assert params["env__OBSBUS_TEST_VISIBLE"] == "yes"
    assert "env__MY_API_KEY" not in params
    assert params["env__SOME_URI"] == "https://***@host/x"
    assert "sk-live-0123456789" not in repr(tracker.calls)


def test_git_metadata_becomes_tags_and_an_artifact(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], check=True)
    Path("a.txt").write_text("x")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    tracker = FakeTracker(log_env=False)
    _train(tracker, batches=1)
    tags = tracker.of("tags")[0]
    assert tags == {"git.commit": commit, "git.branch": "main", "git.dirty": "false"}
    (name, content), *_ = tracker.of("upload")
    assert name == "system/git_metadata.json" and commit in content


def test_only_the_chosen_rank_logs(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    last = FakeTracker(logging_rank="last", log_env=False, log_git=False)
    zero = FakeTracker(log_env=False, log_git=False)
    every = FakeTracker(rank_zero_only=False, log_env=False, log_git=False)
    _train(last, 1)
    _train(zero, 1, run_name="r2")
    _train(every, 1, run_name="r3")
    assert (last.active, zero.active, every.active) == (False, True, True)
    assert last.calls == [] and zero.of("metrics") and every.of("metrics")


def test_uploads_go_through_the_writer_only_when_the_tracker_stores_files(tmp_path):
    storing, plain = FakeTracker(log_git=False, log_env=False), FakeTracker(uploads=False)
    path = tmp_path / "f.txt"
    path.write_text("bytes")
    with Run(max_duration="1ba", loggers=[storing, plain]) as run:
        run.logger.upload_file("{run_name}/f.txt", path)
        for _ in run.train([[0]]):
            pass
    assert storing.of("upload") == [(f"{run.state.run_name}/f.txt", "bytes")]
    assert plain.of("upload") == []


def _fail_in_batch_2(tracker: TrackerDestination) -> None:
    """A 3-batch run whose loop raises in its second batch (after batch 1's loss was logged)."""
    with (
        pytest.raises(RuntimeError, match="boom"),
        Run(max_duration="3ba", loggers=[tracker]) as run,
    ):
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(1.0)
            if i == 1:
                raise RuntimeError("boom")


def test_an_exception_ends_the_client_run_as_failed():
    tracker = FakeTracker(log_env=False, log_git=False)
    _fail_in_batch_2(tracker)
    assert tracker.of("finish") == [True]
    assert [step for step, _ in tracker.of("metrics")] == [1]


class BrokenStart(FakeTracker):
    def _client_start(self, info: RunInfo) -> None:
        raise ConnectionError("tracker unreachable")


def test_a_client_that_fails_to_start_is_reported_once_and_training_goes_on(caplog):
    tracker = BrokenStart(log_env=False, log_git=False)
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        _train(tracker, batches=3)
    errors = [r for r in caplog.records if "BrokenStart" in r.getMessage()]
    assert any("tracker unreachable" in str(r.exc_info) for r in errors)
    assert tracker.of("metrics") == [] and tracker.undelivered_writes == 3
    assert any("3 write(s) were not delivered" in r.getMessage() for r in errors)


class Hanging(FakeTracker):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.release = threading.Event()

    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        self.release.wait(30)


def test_a_hanging_client_can_not_hang_training_or_close(caplog):
    tracker = Hanging(log_env=False, log_git=False, max_queue_size=2, close_timeout=0.2)
    started = time.monotonic()
    try:
        with caplog.at_level(logging.ERROR, logger="obsbus"):
            _train(tracker, batches=30)
        assert time.monotonic() - started < 15
        # The one hand-over (30 rows, at fit end) hangs in the client: close gives up on it.
        assert tracker.undelivered_writes == 30
        assert any("no progress" in r.getMessage() for r in caplog.records)
        assert any("were not delivered" in r.getMessage() for r in caplog.records)
    finally:
        tracker.release.set()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"logging_rank": -1}, ValueError, "logging_rank must be a rank >= 0 or 'last', got -1"),
        ({"logging_rank": "first"}, ValueError, "got 'first'"),
        ({"close_timeout": 0}, ValueError,
         "FakeTracker close_timeout must be a finite number of seconds > 0, got 0"),
        ({"close_timeout": "1"}, TypeError, "close_timeout must be a finite number .*got '1'"),
        ({"close_timeout": math.nan}, ValueError, "close_timeout must be a finite .*got nan"),
        ({"close_timeout": math.inf}, ValueError, "close_timeout must be a finite .*got inf"),
        ({"rank_zero_only": "false"}, TypeError,
         "FakeTracker rank_zero_only must be True or False, got 'false'"),
        ({"log_env": 2}, TypeError, "FakeTracker log_env must be True or False, got 2"),
        ({"log_git": None}, TypeError, "FakeTracker log_git must be True or False, got None"),
        ({"log_interval": "5sp"}, ValueError, "FakeTracker log_interval '5sp'"),
        ({"write_period": -1}, ValueError, "write_period must be >= 0 seconds and finite, got -1"),
        ({"write_period": math.inf}, ValueError, "finite, got inf"),
        ({"write_period": math.nan}, ValueError, "finite, got nan"),
        ({"write_period": "1s"}, TypeError, "write_period must be a number of seconds, got '1s'"),
        ({"write_period": True}, TypeError, "got True"),
    ],
    ids=[
        "negative-rank",
        "rank-name",
        "zero-timeout",
        "str-timeout",
        "nan-timeout",
        "inf-timeout",
        "str-rank-zero-only",
        "int-log-env",
        "none-log-git",
        "sample-interval",
        "negative-period",
        "inf-period",
        "nan-period",
        "str-period",
        "bool-period",
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        FakeTracker(**kwargs)


def test_environment_snapshot_and_masking():
    env = {"HF_TOKEN": "hf_abcdefgh", "PATH": "/bin", "NOTE": "uses hf_abcdefgh inside"}
    assert environment_snapshot(env) == {"env__NOTE": "uses *** inside", "env__PATH": "/bin"}
    assert mask_credentials("s3://AKIA:sec@minio:9000/b and sftp://u:p@h/") == (
        "s3://***@minio:9000/b and sftp://***@h/"
    )
    assert redact("key=abcdefgh", ["abcdefgh"]) == "key=***"


def test_the_default_project_is_work_group_and_user_name_from_the_run_folder(tmp_path):
    from obsbus import RunFolder
    from obsbus.run_folder import os_user

    parts = RunFolder.from_parts(
        workspace=tmp_path, work_group="nlp", user_name="ada", exp_name="lm-1"
    )
    for folder, project in [
        (parts, "nlp_ada"),
        (RunFolder(tmp_path / "plain", work_group="vision"), f"vision_{os_user()}"),
        (tmp_path / "path", f"default_{os_user()}"),
    ]:
        tracker = FakeTracker(log_env=False, log_git=False)
        _train(tracker, batches=1, run_folder=folder)
        assert tracker.of("start")[0].project == project


class FlushingTracker(FakeTracker):
    def _client_flush(self) -> None:
        self._record("flush", None)


def test_a_client_flush_follows_the_last_metrics_at_fit_end_and_on_exception():
    tracker = FlushingTracker(log_interval="2ba", log_env=False, log_git=False)
    _train(tracker, batches=3)
    names = [name for name, _ in tracker.calls]
    # the held batch-3 row goes before the flush, the flush before the finish
    assert names[-3:] == ["metrics", "flush", "finish"], names
    assert tracker._skipped == 0 and tracker.undelivered_writes == 0

    failing = FlushingTracker(log_env=False, log_git=False)
    _fail_in_batch_2(failing)
    names = [name for name, _ in failing.calls]
    assert names[-3:] == ["metrics", "flush", "finish"], names  # batch 1's row, then the flush
    assert failing.of("finish") == [True]


def test_a_tracker_without_a_client_flush_queues_none():
    tracker = FakeTracker(log_env=False, log_git=False)
    submitted: list[Any] = []
    real_submit = tracker._submit
    tracker._submit = lambda fn, *args: submitted.append(fn) or real_submit(fn, *args)
    _train(tracker, batches=2)
    assert tracker._client_flush not in submitted
