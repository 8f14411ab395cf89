"""NeptuneLogger against the real ``neptune`` 1.x client: debug mode fetched back, offline mode parsed.

Offline, neptune writes an operation log (JSON lines of serialized
``neptune.internal.operation.Operation`` s) under
``$NEPTUNE_DATA_DIRECTORY/offline/run__<id>__<pid>__<key>/``, the queue that
``neptune sync`` later uploads; :func:`read_operations` reads it back with
neptune's own ``DiskQueue`` and ``Operation.from_dict``, as ``neptune sync`` does.
"""

from __future__ import annotations

import base64
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Run, Trainer
from obsbus.errors import MissingExtraError
from obsbus.loggers import FileLogger, InMemoryLogger
from obsbus.loggers.neptune_logger import NeptuneLogger

from ..helpers import regression_data, tiny_model

# Neptune's hardware monitor says so on every machine without NVIDIA's library.
pytestmark = pytest.mark.filterwarnings(r"ignore:Info \(NVML\)")

FAKE_TOKEN = "neptune-fake-token-5e4d3c2b1a"
FAKE_MY_KEY = "my-fake-secret-0a9b8c7d"


def read_operations(run_dir: Path) -> list[Any]:
    """Every operation in one offline run's queue, in order, with neptune's own reader."""
    from neptune.core.components.queue.disk_queue import DiskQueue
    from neptune.internal.operation import Operation

    ops = []
    with DiskQueue(run_dir, lambda op: op.to_dict(), Operation.from_dict, threading.RLock()) as q:
        while (element := q.get()) is not None:
            ops.append(element.obj)
    return ops


class OfflineRun:
    """What one offline run queued: series, assigned values, uploads."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.ops = read_operations(run_dir)

    def of(self, kind: str, path: str) -> list[Any]:
        return [op for op in self.ops if type(op).__name__ == kind and "/".join(op.path) == path]

    def series(self, path: str, kind: str = "LogFloats") -> tuple[list[Any], list[Any]]:
        points = [v for op in self.of(kind, path) for v in op.values]
        return [p.step for p in points], [p.value for p in points]

    def value(self, path: str) -> Any:
        assigned = [op for op in self.ops if op.path == path.split("/") and hasattr(op, "value")]
        return assigned[-1].value

    def uploaded(self, path: str) -> bytes:
        *_, op = self.of("UploadFile", path)
        return (self.dir / "upload_path" / op.tmp_file_name).read_bytes()


def offline_runs(data_dir: Path) -> list[OfflineRun]:
    return [OfflineRun(d) for d in sorted((data_dir / "offline").glob("run__*"))]


@pytest.fixture(scope="module", autouse=True)
def neptune_home(tmp_path_factory):
    """Neptune's data folder in tmp, a fake token, and no way out to the network."""
    home = tmp_path_factory.mktemp("neptune-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEPTUNE_DATA_DIRECTORY", str(home / "data"))
        mp.setenv("NEPTUNE_API_TOKEN", FAKE_TOKEN)
        mp.setenv("MY_API_KEY", FAKE_MY_KEY)
        for var in ("NEPTUNE_MODE", "NEPTUNE_PROJECT", "NEPTUNE_CUSTOM_RUN_ID"):
            mp.delenv(var, raising=False)
        for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            mp.setenv(var, "http://127.0.0.1:9")  # anything that tries the network fails at once
        mp.setenv("NO_PROXY", "")
        yield home


class Media(Callback):
    """Logs a table (with a tensor cell) at batch 2, a batch of CHW images and traces at batch 5."""

    def batch_end(self, state, logger):
        if state.timestamp._batch == 2:
            logger.log_table(["name", "value"], [["a", torch.tensor(0.25)], ["b", 3]], "preds")
        if state.timestamp._batch == 5:
            logger.log_images(torch.rand(2, 3, 4, 5), name="samples")
            logger.log_traces({"algo": "branch-a"})


def _trainer(root: Path, nep: NeptuneLogger, memory: InMemoryLogger, **kwargs: Any) -> Trainer:
    return Trainer(tiny_model(), regression_data(4), "2ep", loss_fn=F.mse_loss,
                   loggers=[memory, FileLogger(), nep], callbacks=[Media()], device="cpu",
                   eval_dataloader=regression_data(2, seed=1), run_name="r",
                   run_folder=root / "run", hparams={"optim": {"lr": 0.001}, "seed": 3,
                                                     "skip": None}, **kwargs)  # fmt: skip


@pytest.fixture(scope="module")
def offline(tmp_path_factory, neptune_home):
    """One offline run: 2 epochs of 4 batches with eval, hyperparameters, media, FileLogger, git."""
    root = tmp_path_factory.mktemp("offline")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        subprocess.run([*git, "init", "-q"], check=True)
        (root / "a.txt").write_text("x")
        subprocess.run([*git, "add", "a.txt"], check=True)
        subprocess.run([*git, "commit", "-qm", "one"], check=True)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()  # fmt: skip
        mp.setenv("OBSBUS_TEST_VISIBLE", "yes")
        mp.setenv("NEPTUNE_DATA_DIRECTORY", str(root / "neptune"))
        nep, memory = (
            NeptuneLogger(mode="offline", tags=["baseline"], log_interval="4ba"),
            InMemoryLogger(),
        )
        with _trainer(root, nep, memory) as trainer:
            trainer.fit()
    (run,) = offline_runs(root / "neptune")
    return {"root": root, "memory": memory, "neptune": nep, "commit": commit, "run": run}


def test_offline_log_holds_every_metric_at_its_step(offline):
    run, memory = offline["run"], offline["memory"]
    for key in ("loss/train/total", "metrics/eval/loss"):
        logged = memory.get_timeseries(key)
        assert run.series(f"training/{key}") == (logged["step"], logged[key])
    assert run.series("training/loss/train/total")[0] == list(range(1, 9))
    assert offline["neptune"].late_values == 0


def test_offline_log_holds_parameters_environment_git_and_tags(offline):
    run = offline["run"]
    assert run.value("parameters/optim/lr") == 0.001 and run.value("parameters/seed") == 3
    assert run.value("parameters/skip") == "None"  # Neptune stores no None: its str
    assert run.value("parameters/env__OBSBUS_TEST_VISIBLE") == "yes"
    assert not [op for op in run.ops if "env__MY_API_KEY" in op.path]
    assert run.value("git/commit") == offline["commit"] and run.value("git/branch") == "main"
    assert run.value("git/dirty") == "false"
    assert run.value("sys/name") == "r" and run.value("sys/failed") is False
    assert [v for op in run.of("AddStrings", "sys/tags") for v in op.values] == ["baseline"]


def test_files_tables_and_images_reach_the_neptune_store(offline):
    run = offline["run"]
    assert offline["commit"] in run.uploaded("files/system/git_metadata.json").decode()
    assert b"[metric][batch=8]" in run.uploaded("files/r/logs-rank0.txt")  # a staged copy
    assert run.uploaded("training/preds/step_2").decode().splitlines() == [
        "name,value", "a,0.25", "b,3"]  # fmt: skip
    for i in (0, 1):
        steps, images = run.series(f"training/samples/{i}", kind="LogImages")
        assert steps == [5] and base64.b64decode(images[0].data).startswith(b"\x89PNG")
    assert run.value("training/traces/algo") == "branch-a"


def test_no_secret_reaches_the_run_folder_or_neptune_store(offline):
    files = [p for p in offline["root"].rglob("*") if p.is_file()]
    assert any(p.name == "data-1.log" for p in files) and any(
        "upload_path" in str(p) for p in files
    )
    for path in files:
        data = path.read_bytes()
        assert FAKE_TOKEN.encode() not in data, path
        assert FAKE_MY_KEY.encode() not in data, path


def test_debug_mode_fetches_back_what_was_logged(tmp_path):
    nep, memory = NeptuneLogger(mode="debug", log_git=False), InMemoryLogger()
    with _trainer(tmp_path, nep, memory) as trainer:
        trainer.fit()
        # Fetched on this thread while the writer is idle (fit_end flushed it).
        run = nep.run
        for key in ("loss/train/total", "metrics/eval/loss"):
            fetched = run[f"training/{key}"].fetch_values()
            assert list(fetched["value"]) == memory.get_timeseries(key)[key]
        # debug mode keeps no steps (it numbers points 0, 1, ...); the offline test checks them.
        assert run["parameters/optim/lr"].fetch() == 0.001
        assert run["parameters/max_duration"].fetch() == "2ep"
        assert run["sys/name"].fetch() == "r"
        run["files/r/logs-rank0.txt"].download(str(tmp_path / "got.txt"))
        assert "[metric][batch=8]" in (tmp_path / "got.txt").read_text()


def test_a_failed_run_is_marked_and_ranks_get_their_own_tagged_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("NEPTUNE_DATA_DIRECTORY", str(tmp_path / "neptune"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    nep = NeptuneLogger(mode="offline", rank_zero_only=False, log_env=False, log_git=False)
    with (
        pytest.raises(RuntimeError, match="boom"),
        Run(max_duration="3ba", loggers=[nep], run_name="crashy", run_folder=tmp_path) as run,
    ):
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(i + 0.5)
            if i == 1:
                raise RuntimeError("boom")
    (written,) = offline_runs(tmp_path / "neptune")
    assert written.value("sys/name") == "crashy-rank1" and written.value("sys/failed") is True
    assert [v for op in written.of("AddStrings", "sys/tags") for v in op.values] == ["crashy"]
    assert written.series("training/loss/train/total") == ([1], [0.5])


def test_steps_must_increase_and_values_neptune_cannot_store_are_skipped(tmp_path, monkeypatch,
                                                                         caplog):  # fmt: skip
    monkeypatch.setenv("NEPTUNE_DATA_DIRECTORY", str(tmp_path / "neptune"))
    nep = NeptuneLogger(mode="offline", base_namespace="", log_env=False, log_git=False)
    with (
        caplog.at_level(logging.WARNING, logger="obsbus"),
        Run(loggers=[nep], run_folder=tmp_path) as run,
    ):
        run.logger.log_metrics({"a": 1.0, "flag": True, "text": "ok", "np": np.float32(1.5)}, 5)
        run.logger.log_metrics({"a": 2.0}, step=5)  # same step: dropped
        run.logger.log_metrics({"a": 3.0, "nan": float("nan"), "vec": [1, 2]}, step=3)
        run.logger.log_metrics({"a": 4.0, "nan": float("inf")}, step=6)
    (written,) = offline_runs(tmp_path / "neptune")
    assert written.series("a") == ([5, 6], [1.0, 4.0])  # at the root: base_namespace=""
    assert written.series("flag") == ([5], [1.0]) and written.series("np") == ([5], [1.5])
    assert written.series("text", kind="LogStrings") == ([5], ["ok"])
    assert written.series("nan") == ([], []) and written.series("vec") == ([], [])
    assert nep.late_values == 2
    messages = [r.getMessage() for r in caplog.records if "value(s) of" not in r.getMessage()]
    assert sum("non-finite" in m for m in messages) == 1
    assert any("'vec': list values are not numbers or strings" in m for m in messages)
    assert any("'a': Neptune series need increasing steps; 5 came after" in m for m in messages)


@pytest.mark.parametrize(
    ("kwargs", "env", "warnings"),
    [({}, {}, ["NEPTUNE_API_TOKEN is not set", "wants 'workspace/project'"]),
     ({"project": "ws/p"}, {"NEPTUNE_API_TOKEN": FAKE_TOKEN}, []),
     ({}, {"NEPTUNE_API_TOKEN": FAKE_TOKEN, "NEPTUNE_PROJECT": "ws/p"}, []),
     ({"mode": "offline"}, {}, []), ({"mode": "debug"}, {}, []),
     ({"project": "ws/p"}, {"NEPTUNE_MODE": "sync"}, ["NEPTUNE_API_TOKEN is not set"])],
    ids=["async-default", "token-and-project", "from-env", "offline", "debug", "env-sync"],
)  # fmt: skip
def test_async_mode_without_a_token_or_workspace_is_warned_about(monkeypatch, caplog, kwargs,
                                                                 env, warnings):  # fmt: skip
    monkeypatch.delenv("NEPTUNE_API_TOKEN")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        NeptuneLogger(**kwargs)._check_credentials()
    messages = [r.getMessage() for r in caplog.records]
    assert [w for w in warnings if any(w in m for m in messages)] == warnings
    assert len(messages) == len(warnings)
    assert not any(FAKE_TOKEN in m for m in messages)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "read-only"}, ValueError, r"got 'read-only' \(a read-only run can't be logged"),
        ({"mode": "online"}, ValueError, r"mode must be one of \('async', 'sync', 'offline', 'd"),
        ({"api_token": "x"}, ValueError, "takes no api_token.*set NEPTUNE_API_TOKEN instead"),
        ({"base_namespace": "a/"}, ValueError, "base_namespace must be a Neptune path"),
        ({"params_namespace": 3}, TypeError, "params_namespace must be a str, got 3"),
        ({"tags": "one"}, TypeError, "tags must be a list of non-empty str, got 'one'"),
        ({"project": ""}, TypeError, "project must be a non-empty str or None"),
        ({"log_interval": "5sp"}, ValueError, "NeptuneLogger log_interval '5sp'"),
        ({"upload_artifacts": "false"}, TypeError, "NeptuneLogger upload_artifacts must be True or False, got 'false'"),
        ({"log_git": 2}, TypeError, "NeptuneLogger log_git must be True or False, got 2"),
        ({"close_timeout": 0}, ValueError, "close_timeout must be a finite number of seconds > 0, got 0"),
    ],
    ids=["read-only", "unknown-mode", "api-token", "namespace-slash", "namespace-type",
         "str-tags", "empty-project", "interval", "str-artifacts", "int-git", "zero-timeout"],
)  # fmt: skip
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        NeptuneLogger(**kwargs)


def test_a_missing_neptune_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "neptune", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[neptune\]'"):
        NeptuneLogger()


def test_importing_the_module_does_not_import_neptune():
    code = "import obsbus.loggers.neptune_logger, sys; print('neptune' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_async_run_that_can_not_start_is_reported_once_and_training_goes_on(caplog):
    nep = NeptuneLogger(project="ws/p", log_env=False, log_git=False)  # async, a fake token
    with (
        caplog.at_level(logging.WARNING, logger="obsbus"),
        Run(max_duration="3ba", loggers=[nep]) as run,
    ):
        for _ in run.train([[0]] * 3):
            run.state.loss = torch.tensor(1.0)
    assert run.state.timestamp.batch.value == 3 and nep.undelivered_writes == 3
    failures = [r.getMessage() for r in caplog.records if "NeptuneLogger" in r.getMessage()]
    assert sum("NeptuneInvalidApiTokenException" in m for m in failures) == 1
    assert any("3 write(s) were not delivered" in m for m in failures)
    assert not any(FAKE_TOKEN in r.getMessage() for r in caplog.records)
