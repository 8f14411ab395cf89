"""MLFlowLogger against a real ``mlflow server`` on 127.0.0.1 and the default SQLite store.

Everything is read back with MLflow's own ``MlflowClient``. The server is
started once per module (it needs many seconds to import and migrate its
database) and boots while the local-store test runs. Nothing leaves the
machine: a guard refuses connections to anything but the loopback.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Run, Timestamp, Trainer
from obsbus.errors import MissingExtraError, TrainingTerminated
from obsbus.loggers import FileLogger, InMemoryLogger

from ..helpers import regression_data, tiny_model
from ._mlflow_server import OFFLINE_ENV, MlflowServer

SECRET = "sk-live-obsbus-7f3a9c1e55"
DATABRICKS_SECRET = "dapi-obsbus-0b1c2d3e4f"


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()  # boots while the first tests run
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def offline(monkeypatch, mlflow_server):
    """MLflow's telemetry off; any connection beyond the loopback fails the test."""
    for name, value in OFFLINE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    attempts = []
    real_connect = socket.socket.connect

    def guarded(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in (
            "127.0.0.1", "::1", "localhost"):  # fmt: skip
            attempts.append(address)
            raise OSError(f"test tried to reach {address}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield
    assert attempts == []


@pytest.fixture
def server_uri(mlflow_server):
    return mlflow_server.ensure_running()


def client(uri):
    from mlflow import MlflowClient

    return MlflowClient(uri)


def git_repo():
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], check=True)
    Path("a.txt").write_text("x")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def trainer(tmp_path, loggers, duration="2ep", callbacks=(), run_name="r", **kwargs):
    return Trainer(tiny_model(), regression_data(4), duration, loss_fn=F.mse_loss,
                   loggers=loggers, callbacks=list(callbacks), device="cpu",
                   run_folder=tmp_path / run_name, run_name=run_name, **kwargs)  # fmt: skip


def history(mlflow, run_id, key):
    return sorted((m.step, m.value) for m in mlflow.get_metric_history(run_id, key))


def series_of(memory, key):
    series = memory.get_timeseries(key)
    return sorted(zip(series["step"], series[key], strict=True))


def assert_same_metrics(mlflow, run_id, memory):
    """Every numeric series InMemoryLogger saw is in MLflow with equal values and steps."""
    run = mlflow.get_run(run_id)
    assert set(run.data.metrics) == set(memory.data)
    for key in memory.data:
        assert history(mlflow, run_id, key) == series_of(memory, key), key


def all_artifacts(mlflow, run_id, path=None):
    out = []
    for info in mlflow.list_artifacts(run_id, path):
        out += all_artifacts(mlflow, run_id, info.path) if info.is_dir else [info.path]
    return sorted(out)


def read_artifact(mlflow, run_id, path, tmp_path):
    return Path(mlflow.download_artifacts(run_id, path, str(tmp_path))).read_text()


class UploadAtStart(Callback):
    def __init__(self, files):
        self.files = files

    def fit_start(self, state, logger):
        for name, path in self.files.items():
            logger.upload_file(name, path)


# ------------------------------------------------------------- local store
def test_the_default_store_is_sqlite_in_the_run_folder_and_holds_no_secret(tmp_path, monkeypatch):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    monkeypatch.setenv("MY_API_KEY", SECRET)
    monkeypatch.setenv("DATABRICKS_TOKEN", DATABRICKS_SECRET)
    monkeypatch.setenv("SOME_URL", f"https://ada:{SECRET}@example.com/x")
    tags = {"team": "vision", "db": f"postgresql://admin:{SECRET}@host/db"}
    mlf = MLFlowLogger(upload_logs=True, close_timeout=120, tags=tags)
    memory = InMemoryLogger()
    files = FileLogger()  # its close-time upload reaches mlf: file stores close last
    with trainer(tmp_path, [mlf, memory, files], hparams={"lr": 0.01}) as t:
        t.fit()
    run_folder = tmp_path / "r"
    uri = f"sqlite:///{run_folder / 'mlflow' / 'mlflow.db'}"
    assert mlf.resolved_tracking_uri(run_folder) == uri
    mlflow = client(uri)
    run = mlflow.get_run(mlf.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "r"
    assert mlflow.get_experiment(run.info.experiment_id).name == mlf.default_project()
    assert_same_metrics(mlflow, mlf.run_id, memory)
    assert run.data.params["lr"] == "0.01"
    assert run.data.params["env__SOME_URL"] == "https://***@example.com/x"
    assert not any("KEY" in k or "TOKEN" in k for k in run.data.params)
    assert run.data.tags["team"] == "vision"
    assert run.data.tags["db"] == "postgresql://***@host/db"  # a tag is a value leaving too
    # The artifacts live in the run folder too, FileLogger's files among them.
    assert run.info.artifact_uri.startswith((run_folder / "mlflow" / "artifacts").as_uri())
    assert all_artifacts(mlflow, mlf.run_id) == ["r/logs-rank0.txt", "r/metrics-rank0.jsonl"]
    uploaded = read_artifact(mlflow, mlf.run_id, "r/metrics-rank0.jsonl", tmp_path / "dl")
    assert uploaded == (run_folder / "metrics-rank0.jsonl").read_text()
    written = [p for p in run_folder.rglob("*") if p.is_file()]
    assert run_folder / "mlflow" / "mlflow.db" in written
    for path in written:
        data = path.read_bytes()
        assert SECRET.encode() not in data and DATABRICKS_SECRET.encode() not in data, path


def test_a_file_store_opens_only_when_mlflow_allows_it(tmp_path, monkeypatch):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    with pytest.raises(ValueError, match=r"file store.*MLFLOW_ALLOW_FILE_STORE=true"):
        MLFlowLogger(tracking_uri=str(tmp_path / "mlruns"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlf, memory = MLFlowLogger(tracking_uri=tmp_path / "mlruns", log_env=False), InMemoryLogger()
    with trainer(tmp_path, [mlf, memory], duration="3ba") as t:
        t.fit()
    assert_same_metrics(client((tmp_path / "mlruns").as_uri()), mlf.run_id, memory)


@pytest.mark.parametrize("where", ["tracking_uri", "env"])
def test_an_explicit_sqlite_store_keeps_artifacts_in_the_run_folder_not_the_cwd(
    tmp_path, monkeypatch, where
):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    if where == "env":
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    mlf = MLFlowLogger(tracking_uri=uri if where == "tracking_uri" else None, log_env=False,
                       log_git=False)  # fmt: skip
    with trainer(tmp_path, [mlf], duration="2ba",
                 callbacks=[UploadAtStart({"{run_name}/notes.txt": notes})]) as t:  # fmt: skip
        t.fit()
    run_folder = tmp_path / "r"
    mlflow = client(uri)
    artifact_root = run_folder / "mlflow" / "artifacts"
    assert mlflow.get_run(mlf.run_id).info.artifact_uri.startswith(artifact_root.as_uri())
    assert [p.read_text() for p in artifact_root.rglob("notes.txt")] == ["hello\n"]
    assert read_artifact(mlflow, mlf.run_id, "r/notes.txt", tmp_path / "dl") == "hello\n"
    assert list(cwd.iterdir()) == []  # no ./mlruns


def test_renamed_keys_are_warned_once_and_keys_that_meet_are_kept_apart(tmp_path, caplog):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    long_x, long_xy = "x" * 300, "x" * 250 + "y" * 50  # both cut to the same 250 characters
    metrics = {"ok": 0.0, "loss/é": 1.0, "loss/🔥": 2.0, "loss/✨": 8.0, "/lead": 3.0, long_x: 4.0,
               long_xy: 5.0, "": 6.0, "with space.and:colon": 7.0}  # fmt: skip
    mlf = MLFlowLogger(tags={"tag/🔥": "a", "tag/✨": "b"}, log_env=False, log_git=False)
    with caplog.at_level(logging.WARNING, logger="obsbus"), Run(
        max_duration="2ba", run_folder=tmp_path / "r", run_name="r", loggers=[mlf],
        hparams={"p/🔥": 1, "p/✨": 2}) as run:  # fmt: skip
        for _ in run.train([[1], [2]]):
            run.log_metrics(metrics)
    mlflow = client(mlf.resolved_tracking_uri(tmp_path / "r"))
    data = mlflow.get_run(mlf.run_id).data
    warned = [r.getMessage() for r in caplog.records if "MLflow name" in r.getMessage()]
    # Once per renamed key (not per step), naming the key and its MLflow name.
    renamed = {"loss/🔥": "loss/_", "/lead": "lead", long_x: "x" * 250, "": "_"}
    for key, name in renamed.items():
        (message,) = [m for m in warned if f"metric {key!r} as " in m]
        assert repr(name) in message
    # The second key to meet a taken name gets a name of its own: no value is merged.
    series = {name: history(mlflow, mlf.run_id, name) for name in data.metrics}
    assert len(series) == len(metrics)
    assert sorted(v for s in series.values() for _, v in s) == sorted([*metrics.values()] * 2)
    assert all(len({v for _, v in s}) == 1 for s in series.values())
    (sparkle,) = [m for m in warned if "metric 'loss/✨' as " in m]
    assert "'loss/🔥' has the MLflow name 'loss/_'" in sparkle
    assert series["loss/é"] == [(0, 1.0), (1, 1.0)]  # letters of any script are MLflow's too
    (xy,) = [m for m in warned if f"metric {long_xy!r} as " in m]
    assert f"{long_x!r} has the MLflow name" in xy
    assert series["ok"] == [(0, 0.0), (1, 0.0)] and "with space.and:colon" in series
    assert all(len(name) <= 250 for name in series)
    # Params and tags alike.
    assert sorted(v for k, v in data.params.items() if k.startswith("p/")) == ["1", "2"]
    assert sorted(v for k, v in data.tags.items() if k.startswith("tag/")) == ["a", "b"]
    assert any("param 'p/✨' as " in m for m in warned)
    assert any("tag 'tag/✨' as " in m for m in warned)
    assert len(warned) == 6 + 2 + 2  # 6 metric keys renamed, 2 params, 2 tags


# -------------------------------------------------------------- the server
def test_a_trainer_run_reads_back_from_an_mlflow_server(
    tmp_path, server_uri, mlflow_server, monkeypatch
):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    commit = git_repo()
    monkeypatch.setenv("OBSBUS_TEST_VISIBLE", "yes")
    monkeypatch.setenv("MY_API_KEY", SECRET)
    notes = tmp_path / "config.yaml"
    notes.write_text("lr: 0.01\n")
    mlf = MLFlowLogger(experiment_name="obsbus-tests", tags={"team": "vision"},
                       tracking_uri=server_uri, log_interval="2ba")  # fmt: skip
    memory = InMemoryLogger()
    hparams = {"optimizer": {"lr": 0.01, "betas": [0.9, 0.99]}, "seed": 3}
    with trainer(tmp_path, [mlf, memory], eval_dataloader=regression_data(2, seed=1),
                 callbacks=[UploadAtStart({"{run_name}/config/config.yaml": notes})],
                 hparams=hparams) as t:  # fmt: skip
        t.fit()
    mlflow = client(server_uri)
    run = mlflow.get_run(mlf.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "r"
    assert mlflow.get_experiment(run.info.experiment_id).name == "obsbus-tests"
    assert_same_metrics(mlflow, mlf.run_id, memory)
    assert "metrics/eval/loss" in run.data.metrics  # eval metrics too
    params = run.data.params
    assert params["optimizer/lr"] == "0.01" and params["optimizer/betas"] == "[0.9, 0.99]"
    assert params["seed"] == "3" and params["env__OBSBUS_TEST_VISIBLE"] == "yes"
    assert "env__MY_API_KEY" not in params and SECRET not in json.dumps(params)
    tags = run.data.tags
    assert tags["git.commit"] == tags["mlflow.source.git.commit"] == commit
    assert tags["git.branch"] == tags["mlflow.source.git.branch"] == "main"
    assert tags["git.dirty"] == "false" and tags["team"] == "vision"
    assert all_artifacts(mlflow, mlf.run_id) == ["r/config/config.yaml", "system/git_metadata.json"]
    meta = json.loads(read_artifact(mlflow, mlf.run_id, "system/git_metadata.json", tmp_path / "a"))
    assert meta["commit"] == commit
    assert read_artifact(mlflow, mlf.run_id, "r/config/config.yaml", tmp_path / "b") == "lr: 0.01\n"
    # The server keeps them in its artifacts destination.
    assert [p.name for p in mlflow_server.artifacts.rglob("config.yaml")] == ["config.yaml"]


class Stop(Callback):
    def __init__(self, at, exc):
        self.at, self.exc = at, exc

    def batch_end(self, state, logger):
        if state.timestamp.batch.value == self.at:
            raise self.exc


@pytest.mark.parametrize(
    ("exc", "status"),
    [(RuntimeError("boom"), "FAILED"), (TrainingTerminated(15), "KILLED")],
    ids=["exception-failed", "sigterm-killed"],
)
def test_a_run_that_ends_with_an_exception_is_marked_and_keeps_its_metrics(
    tmp_path, server_uri, exc, status
):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    mlf, memory = MLFlowLogger(tracking_uri=server_uri, log_env=False), InMemoryLogger()
    t = trainer(tmp_path, [mlf, memory], callbacks=[Stop(3, exc)])
    with pytest.raises(type(exc)):
        t.fit()
    t.close()
    mlflow = client(server_uri)
    assert mlflow.get_run(mlf.run_id).info.status == status
    assert history(mlflow, mlf.run_id, "loss/train/total") == series_of(memory, "loss/train/total")
    assert [s for s, _ in history(mlflow, mlf.run_id, "loss/train/total")] == [1, 2, 3]


class RestoreTimestamp(Callback):
    """What a checkpoint loader does at after_load."""

    def after_load(self, state, logger):
        state.timestamp = Timestamp(epoch=1, batch=4, sample=32)


def test_resume_by_run_id_or_by_name_appends_to_the_same_run(tmp_path, server_uri, caplog):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    first, memory = MLFlowLogger(tracking_uri=server_uri, run_name="resumable"), InMemoryLogger()
    with trainer(tmp_path, [first, memory], duration="1ep", hparams={"lr": 0.1}) as t:
        t.fit()
    again = MLFlowLogger(tracking_uri=server_uri, run_id=first.run_id)
    with (
        caplog.at_level(logging.WARNING, logger="obsbus"),
        trainer(
            tmp_path,
            [again, memory],
            callbacks=[RestoreTimestamp()],
            hparams={"lr": 0.2},
            run_name="r2",
        ) as t,  # fmt: skip
    ):
        t.fit()
    assert again.run_id == first.run_id
    mlflow = client(server_uri)
    run = mlflow.get_run(first.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "resumable"
    assert [s for s, _ in history(mlflow, first.run_id, "loss/train/total")] == list(range(1, 9))
    assert_same_metrics(mlflow, first.run_id, memory)
    assert run.data.params["lr"] == "0.1"  # MLflow params can't change: the new value is kept out
    assert any("params can't change" in r.getMessage() and "lr" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    by_name = MLFlowLogger(tracking_uri=server_uri, run_name="resumable", resume=True)
    with trainer(tmp_path, [by_name], duration="1ba", run_name="r3") as t:
        t.fit()
    assert by_name.run_id == first.run_id


def test_upload_switches_choose_files_and_metrics(tmp_path, server_uri):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    names = ["{run_name}/traces/ep0-ba1-rank0.json", "{run_name}/torch_traces/rank0.1.pt.trace.json.gz",
             "{run_name}/logs-rank0.txt", "{run_name}/metrics-rank0.jsonl",
             "{run_name}/logs/train/rank-0/info.txt", "{run_name}/notes.txt"]  # fmt: skip
    files = {}
    for i, name in enumerate(names):
        files[name] = tmp_path / f"f{i}"
        files[name].write_text(name)
    lean = MLFlowLogger(tracking_uri=server_uri, run_name="lean", log_env=False, log_git=False,
                        upload_performance_metrics=False)  # fmt: skip
    full = MLFlowLogger(tracking_uri=server_uri, run_name="full", log_env=False, log_git=False,
                        upload_traces=True, upload_logs=True,
                        synchronous=False)  # fmt: skip  # through MLflow's own async queue
    memory = InMemoryLogger()
    with Run(max_duration="2ba", loggers=[lean, full, memory], run_name="sw",
             run_folder=tmp_path / "sw") as run:  # fmt: skip
        for name, path in files.items():
            run.logger.upload_file(name, path)
        for i, _ in enumerate(run.train([[0], [0]])):
            run.state.loss = torch.tensor(float(i))
            run.logger.log_metrics({"throughput/samples_per_sec": torch.tensor(8.0 + i),
                                    "memory/current_allocated_mem": 1.5, "system/cpu_percent": 3,
                                    "text": "not a number", "vec": torch.tensor([1.0, 2.0]),
                                    "loss/nan": float("nan")})  # fmt: skip
    mlflow = client(server_uri)
    assert all_artifacts(mlflow, lean.run_id) == ["sw/notes.txt"]
    assert all_artifacts(mlflow, full.run_id) == sorted(n.format(run_name="sw") for n in names)
    assert set(mlflow.get_run(lean.run_id).data.metrics) == {"loss/train/total", "loss/nan"}
    assert set(mlflow.get_run(full.run_id).data.metrics) == {
        "loss/train/total", "throughput/samples_per_sec", "memory/current_allocated_mem",
        "system/cpu_percent", "loss/nan"}  # fmt: skip
    assert all(math.isnan(v) for _, v in history(mlflow, lean.run_id, "loss/nan"))  # NaN goes too
    assert history(mlflow, full.run_id, "throughput/samples_per_sec") == series_of(
        memory, "throughput/samples_per_sec"
    )
    assert [v for _, v in history(mlflow, full.run_id, "throughput/samples_per_sec")] == [8.0, 9.0]
    assert full.skipped_values == lean.skipped_values == 4  # "text" and "vec", twice each
    assert lean.run_id != full.run_id  # two destinations, two runs, no shared active run


def test_a_stalled_run_still_sends_what_it_logged_within_flush_interval(tmp_path, server_uri):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    mlf = MLFlowLogger(tracking_uri=server_uri, flush_interval=0.5, log_env=False, log_git=False)
    seen = []
    with Run(max_duration="2ba", loggers=[mlf], run_name="stall", run_folder=tmp_path / "s") as run:
        for i, _ in enumerate(run.train([[0], [0]])):
            run.state.loss = torch.tensor(float(i))
            if i == 1:  # batch 1 was handed over; training now "hangs" in batch 2
                deadline = time.monotonic() + 30
                while not seen and time.monotonic() < deadline:
                    time.sleep(0.1)
                    if mlf.run_id is not None:
                        seen = history(client(server_uri), mlf.run_id, "loss/train/total")
    assert seen == [(1, 0.0)]
    assert history(client(server_uri), mlf.run_id, "loss/train/total") == [(1, 0.0), (2, 1.0)]


def test_images_and_tables_become_run_artifacts_at_their_step(tmp_path, server_uri):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    mlf = MLFlowLogger(tracking_uri=server_uri, run_name="media", log_env=False, log_git=False)
    with Run(max_duration="1ba", loggers=[mlf], run_name="media", run_folder=tmp_path / "m") as run:
        run.logger.log_images(torch.rand(2, 3, 4, 5), name="samples", step=1)  # NCHW
        run.logger.log_table(
            ["name", "score"], [["a", torch.tensor(0.5)], ["b", 2]], name="preds", step=1
        )
        run.logger.log_table(["name", "score"], [["c", 0.25]], name="preds", step=2)
        for _ in run.train([[0]]):
            pass
    mlflow = client(server_uri)
    images = [p for p in all_artifacts(mlflow, mlf.run_id, "images") if p.endswith(".png")]
    assert len(images) == 2 and all(p.startswith("images/samples+step+1+") for p in images)
    table = json.loads(read_artifact(mlflow, mlf.run_id, "tables/preds.json", tmp_path / "t"))
    assert table["columns"] == ["step", "name", "score"]
    assert table["data"] == [[1, "a", 0.5], [1, "b", 2], [2, "c", 0.25]]


def test_the_last_rank_logs_by_default_and_per_rank_runs_are_grouped(
    tmp_path, server_uri, monkeypatch
):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    last = MLFlowLogger(tracking_uri=server_uri, log_env=False, log_git=False)
    every = MLFlowLogger(
        tracking_uri=server_uri, rank_zero_only=False, log_env=False, log_git=False
    )
    with Run(max_duration="1ba", loggers=[last, every], run_name="ranks",
             run_folder=tmp_path / "ranks") as run:  # fmt: skip
        for _ in run.train([[0]]):
            run.state.loss = torch.tensor(1.0)
    assert not last.active and last.run_id is None
    tags = client(server_uri).get_run(every.run_id).data.tags
    assert tags["mlflow.runName"] == "ranks-rank0"
    assert tags["run_group"] == "ranks" and tags["obsbus.rank"] == "0"


# ------------------------------------------------------- without a server
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"experiment_name": ""}, ValueError, "experiment_name must be None or a non-empty str"),
        ({"tags": ["a"]}, TypeError, r"tags must be a dict of str to values, got \['a'\]"),
        ({"tags": {1: "a"}}, ValueError, "tag names must be non-empty str, got 1"),
        ({"flush_interval": -1}, ValueError, r"flush_interval must be a finite number of seconds >= 0, got -1\."),
        ({"flush_interval": "10s"}, TypeError, r"flush_interval must be .*, got '10s'\. To fix, pass the number"),
        ({"synchronous": "no"}, TypeError, "synchronous must be True or False, got 'no'"),
        ({"run_id": "not an id!"}, ValueError, "run_id must be an MLflow run id"),
        ({"run_id": "0a1b2c3d4e5f60718293a4b5c6d7e8f9", "rank_zero_only": False}, ValueError,
         "needs rank_zero_only=True"),
        ({"run_id": "my-run"}, ValueError,
         r"run_id must be an MLflow run id, 32 lowercase hex characters .*got 'my-run'\. To fix"),
        ({"run_id": "0A1B2C3D4E5F60718293A4B5C6D7E8F9"}, ValueError, "32 lowercase hex"),
        ({"tracking_uri": "./mlruns"}, ValueError, "file store.*MLFLOW_ALLOW_FILE_STORE=true"),
        ({"tracking_uri": 5}, TypeError, "tracking_uri must be a non-empty str, a path or None"),
        ({"tracking_uri": "bogus://host/x"}, ValueError,
         r"tracking_uri 'bogus://host/x' has a scheme MLflow has no store for; accepted: .*"
         r"http:, https:, .*sqlite:.* or a local path"),
        ({"tracking_uri": "htp://u:secret@host"}, ValueError, r"'htp://\*\*\*@host' has a scheme"),
        ({"logging_rank": -1}, ValueError, "logging_rank must be a rank >= 0 or 'last'"),
        ({"flush_interval": math.nan}, ValueError, r"flush_interval must be a finite number of seconds >= 0, got nan\."),
        ({"flush_interval": math.inf}, ValueError, r"flush_interval must be a finite .*, got inf\."),
        ({"close_timeout": math.inf}, ValueError, "close_timeout must be a finite .*got inf"),
        ({"rank_zero_only": "false"}, TypeError, "rank_zero_only must be True or False, got 'false'"),
    ],
    ids=[
        "empty-experiment",
        "tag-list",
        "tag-name",
        "negative-flush",
        "str-flush",
        "str-synchronous",
        "bad-run-id",
        "run-id-every-rank",
        "run-name-for-id",
        "upper-case-id",
        "file-store",
        "int-uri",
        "bogus-scheme",
        "masked-scheme",
        "negative-rank",
        "nan-flush",
        "inf-flush",
        "inf-timeout",
        "str-rank-zero-only",
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    with pytest.raises(error, match=match):
        MLFlowLogger(**kwargs)


def test_a_bogus_scheme_in_the_environment_is_named_too(monkeypatch):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nope://somewhere")
    with pytest.raises(ValueError, match=r"tracking_uri 'nope://somewhere' \(from "
                                         r"\$MLFLOW_TRACKING_URI\) has a scheme"):
        MLFlowLogger()


def test_without_mlflow_the_error_names_the_extra(monkeypatch):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[mlflow\]'"):
        MLFlowLogger()


def test_mlflow_skinny_needs_a_server_not_sqlite(monkeypatch):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # what mlflow-skinny lacks
    with pytest.raises(
        MissingExtraError, match=r"sqlite store \(not mlflow-skinny\).*obsbus\[mlflow\]"
    ):
        MLFlowLogger()
    assert (
        MLFlowLogger(tracking_uri="http://127.0.0.1:5000").tracking_uri == "http://127.0.0.1:5000"
    )


def test_credential_warnings_never_show_the_secret(monkeypatch, caplog):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    monkeypatch.setenv("DATABRICKS_TOKEN", DATABRICKS_SECRET)
    monkeypatch.delenv("DATABRICKS_HOST", raising=False)
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        MLFlowLogger(tracking_uri="databricks")._check_credentials()
        monkeypatch.setenv("DATABRICKS_HOST", "https://example.cloud.databricks.com")
        MLFlowLogger(tracking_uri="databricks")._check_credentials()
        MLFlowLogger(tracking_uri=f"https://ada:{SECRET}@mlflow.example.com")._check_credentials()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and "DATABRICKS_HOST is not set" in warnings[0]
    assert (
        "'https://***@mlflow.example.com'" in warnings[1]
        and "MLFLOW_TRACKING_PASSWORD" in warnings[1]
    )
    assert DATABRICKS_SECRET not in caplog.text and SECRET not in caplog.text


# ------------------------------------------- last: this one kills the server
class KillServer(Callback):
    """At batch ``at``, once the server holds the metrics of batch 2, SIGKILL it."""

    def __init__(self, server, mlf, at):
        self.server, self.mlf, self.at = server, mlf, at

    def batch_end(self, state, logger):
        if state.timestamp.batch.value != self.at:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.mlf.run_id is not None:
                steps = history(client(self.server.uri), self.mlf.run_id, "loss/train/total")
                if len(steps) >= 2:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the MLflow server never got the first batches")
        self.server.kill()


def test_a_server_killed_mid_run_costs_no_training_and_no_other_destination(
    tmp_path, server_uri, mlflow_server, monkeypatch, caplog
):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    mlf = MLFlowLogger(
        tracking_uri=server_uri, flush_interval=0, write_period=0, close_timeout=10, log_env=False
    )
    memory, files = InMemoryLogger(), FileLogger()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        with trainer(tmp_path, [mlf, memory, files],
                     callbacks=[KillServer(mlflow_server, mlf, at=3)]) as t:  # fmt: skip
            t.fit()
        assert t.state.timestamp.batch.value == 8
    assert time.monotonic() - started < 60
    errors = [r for r in caplog.records if r.name == "obsbus" and r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "MLFlowLogger" in errors[0].getMessage(), [
        r.getMessage() for r in errors]  # fmt: skip
    assert mlf.undelivered_metrics > 0
    assert memory.get_timeseries("loss/train/total")["step"] == list(range(1, 9))
    rows = [
        json.loads(line)
        for line in (tmp_path / "r" / "metrics-rank0.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows if "loss/train/total" in r] == list(range(1, 9))
