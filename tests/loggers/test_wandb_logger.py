"""WandBLogger against real wandb in offline mode, read back from its ``.wandb`` transaction log.

wandb 0.31 has no Python reader of its run files any more (the old
``wandb.sdk.internal.datastore`` is gone; wandb-core reads them, e.g.
``wandb leet inspect --json``). The file is a LevelDB-style log (a 7-byte
``:W&B`` header, then 32 KiB blocks of CRC32-checked chunks) of protobuf
``wandb.proto.wandb_internal_pb2.Record`` s: :func:`read_records` splits it
and parses each record with wandb's own protobuf class, and one test checks
the history against ``wandb leet inspect --json``.
"""

from __future__ import annotations

import json
import logging
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Run, Trainer
from obsbus.errors import MissingExtraError
from obsbus.loggers import FileLogger, InMemoryLogger
from obsbus.loggers.wandb_logger import WandBLogger, artifact_name
from obsbus.run_folder import os_user

from ..helpers import regression_data, tiny_model

FAKE_WANDB_KEY = "wandb-fake-key-6f1e2d3c4b5a"
FAKE_MY_KEY = "my-fake-secret-0a9b8c7d"

_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_records(path: Path) -> list[Any]:
    """Every ``Record`` in a ``.wandb`` file, in order, each chunk's CRC checked."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:7] == b":W&B\xe1\xbe\x00", data[:7]  # identifier, magic 0xBEE1, version 0
    pos, raw, parts = 7, [], []
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if (crc, length, kind) == (0, 0, 0) or pos + 7 + length > len(data):
            break  # the end, or a chunk still being written
        chunk = data[pos + 7 : pos + 7 + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"bad CRC at byte {pos}"
        pos += 7 + length
        if kind == _FULL:
            raw.append(chunk)
        elif kind == _FIRST:
            parts = [chunk]
        elif kind == _MIDDLE:
            parts.append(chunk)
        elif kind == _LAST:
            raw.append(b"".join([*parts, chunk]))
    records = []
    for blob in raw:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(blob)
        records.append(record)
    return records


class WandbRun:
    """What one offline run wrote, from its records."""

    def __init__(self, wandb_file: Path) -> None:
        self.file = wandb_file
        self.records = read_records(wandb_file)
        self.history: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self.artifacts: list[Any] = []
        self.exit_code: int | None = None
        self.run: Any = None
        for record in self.records:
            kind = record.WhichOneof("record_type")
            if kind == "history":
                row: dict[str, Any] = {}
                for item in record.history.item:
                    *outer, last = list(item.nested_key) or [item.key]
                    where = row
                    for part in outer:  # media values are nested: {"preds": {"_type": ...}}
                        where = where.setdefault(part, {})
                    where[last] = json.loads(item.value_json)
                assert row["_step"] == record.history.step.num
                self.history.append(row)
            elif kind == "config":
                self._config(record.config.update)
            elif kind == "run":
                self.run = record.run
                self._config(record.run.config.update)
            elif kind == "summary":
                for item in record.summary.update:
                    self.summary["/".join(item.nested_key) or item.key] = json.loads(
                        item.value_json
                    )
            elif kind == "artifact":
                self.artifacts.append(record.artifact)
            elif kind == "exit":
                self.exit_code = record.exit.exit_code

    def _config(self, updates: Any) -> None:
        for item in updates:
            self.config[item.key] = json.loads(item.value_json)

    def series(self, key: str) -> tuple[list[int], list[Any]]:
        rows = [row for row in self.history if key in row]
        return [row["_step"] for row in rows], [row[key] for row in rows]

    def artifact(self, name: str) -> list[Any]:
        """Every version of the artifact ``name``, oldest first."""
        return [a for a in self.artifacts if a.name == name]


def the_run(run_folder: Path, timeout: float = 30.0) -> WandbRun:
    """The run written under ``run_folder``, once its exit record is on disk.

    ``run.finish()`` can return before wandb-core has flushed the log (seen
    under load); everything before the exit record is there once it is.
    """
    (wandb_file,) = run_folder.glob("wandb/*run-*/run-*.wandb")
    deadline = time.monotonic() + timeout
    while True:
        run = WandbRun(wandb_file)
        if run.exit_code is not None or time.monotonic() > deadline:
            return run
        time.sleep(0.1)


@pytest.fixture(scope="module", autouse=True)
def wandb_home(tmp_path_factory):
    """wandb's folders in tmp, offline, fake credentials, and no way out to the network."""
    home = tmp_path_factory.mktemp("wandb-home")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                    "WANDB_ARTIFACT_DIR"):  # fmt: skip
            mp.setenv(var, str(home / var.lower()))
        for var in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_NAME", "WANDB_DISABLED"):
            mp.delenv(var, raising=False)
        mp.setenv("WANDB_SILENT", "true")
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_API_KEY", FAKE_WANDB_KEY)
        mp.setenv("MY_API_KEY", FAKE_MY_KEY)
        for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            mp.setenv(var, "http://127.0.0.1:9")  # anything that tries the network fails at once
        mp.setenv("NO_PROXY", "")
        yield home
        if "wandb" in sys.modules:
            sys.modules["wandb"].teardown()


class Media(Callback):
    """Logs a table (with a tensor cell) at batch 2, a batch of CHW images and traces at batch 5."""

    def batch_end(self, state, logger):
        if state.timestamp._batch == 2:
            logger.log_table(["name", "value"], [["a", torch.tensor(0.25)], ["b", 3]], "preds")
        if state.timestamp._batch == 5:
            logger.log_images(torch.rand(2, 3, 4, 5), name="samples")
            logger.log_traces({"algo": "branch-a"})


@pytest.fixture(scope="module")
def trained(tmp_path_factory, wandb_home):
    """One offline run: 2 epochs of 4 batches with eval, hyperparameters, media and FileLogger."""
    root = tmp_path_factory.mktemp("trained")
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
        handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
        wb = WandBLogger(group="g", tags=["baseline"], log_interval="4ba")
        memory = InMemoryLogger()
        trainer = Trainer(tiny_model(), regression_data(4), "2ep", loss_fn=F.mse_loss,
                          loggers=[memory, FileLogger(), wb], callbacks=[Media()], device="cpu",
                          eval_dataloader=regression_data(2, seed=1), run_name="r",
                          run_folder=root / "run", hparams={"optim": {"lr": 0.001}, "seed": 3})  # fmt: skip
        with trainer:
            trainer.fit()
        # wandb.init ran on the writer thread: it set no signal handler there (it could not).
        assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == handlers
    return {"root": root, "memory": memory, "wandb": wb, "commit": commit,
            "run": the_run(root / "run")}  # fmt: skip


def test_history_steps_and_values_equal_what_was_logged(trained):
    run, memory = trained["run"], trained["memory"]
    for key in ("loss/train/total", "metrics/eval/loss"):
        logged = memory.get_timeseries(key)
        assert run.series(key) == (logged["step"], logged[key])
    assert run.series("loss/train/total")[0] == list(range(1, 9))
    assert run.series("metrics/eval/loss")[0] == [4, 8]
    assert trained["wandb"].late_values == 0


def test_wandb_leet_reads_the_same_history(trained):
    done = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(trained["run"].file)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    history = [r["history"] for r in rows if r["type"] == "history"]
    logged = trained["memory"].get_timeseries("loss/train/total")
    loss = [(h["step"]["num"], h["item"]["loss/train/total"]) for h in history
            if "loss/train/total" in h["item"]]  # fmt: skip
    assert loss == list(zip(logged["step"], logged["loss/train/total"], strict=True))


def test_tables_and_images_land_at_their_step_without_pushing_earlier_metrics_back(trained):
    run = trained["run"]
    (table_row,) = [row for row in run.history if "preds" in row]
    assert table_row["_step"] == 2 and table_row["preds"]["_type"] == "table-file"
    (images_row,) = [row for row in run.history if "samples" in row]
    assert images_row["_step"] == 5 and images_row["samples"]["count"] == 2
    (table_file,) = run.file.parent.glob("files/media/table/preds_2_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["name", "value"] and table["data"] == [["a", 0.25], ["b", 3]]


def test_traces_go_to_the_run_summary(trained):
    assert trained["run"].summary["traces/algo"] == "branch-a"


def test_run_config_holds_hyperparameters_environment_and_git(trained):
    run, config = trained["run"], trained["run"].config
    assert run.run.display_name == "r" and run.run.run_group == "g"
    assert list(run.run.tags) == ["baseline"] and run.run.project == f"default_{os_user()}"
    assert config["optim/lr"] == 0.001 and config["seed"] == 3
    assert config["env__OBSBUS_TEST_VISIBLE"] == "yes"
    assert "env__MY_API_KEY" not in config and "env__WANDB_API_KEY" not in config
    assert config["git.commit"] == trained["commit"] and config["git.branch"] == "main"
    assert config["git.dirty"] == "false"
    assert run.exit_code == 0


def test_uploaded_files_become_artifacts_with_sanitized_names_and_latest(trained):
    run = trained["run"]
    (git,) = run.artifact("system.git_metadata.json")
    assert git.type == "json" and list(git.aliases) == ["latest"]
    (entry,) = git.manifest.contents
    assert entry.path == "system/git_metadata.json"
    assert trained["commit"] in Path(entry.local_path).read_text()  # wandb's staged copy
    versions = run.artifact("r.logs-rank0.txt")  # FileLogger uploads at each flush: versions
    assert len(versions) >= 2 and all(list(v.aliases) == ["latest"] for v in versions)
    assert {v.type for v in versions} == {"txt"}
    assert [c.path for c in versions[-1].manifest.contents] == ["r/logs-rank0.txt"]
    assert "[metric][batch=8]" in Path(versions[-1].manifest.contents[0].local_path).read_text()


def test_no_secret_reaches_any_file_wandb_or_the_run_wrote(trained, wandb_home):
    files = [p for base in (trained["root"], wandb_home) for p in base.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files) and len(files) > 10
    for path in files:
        data = path.read_bytes()
        assert FAKE_WANDB_KEY.encode() not in data, path
        assert FAKE_MY_KEY.encode() not in data, path


def test_a_failed_run_finishes_with_exit_code_1_and_ranks_get_grouped_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    wb = WandBLogger(rank_zero_only=False, log_env=False, log_git=False)
    with (
        pytest.raises(RuntimeError, match="boom"),
        Run(max_duration="3ba", loggers=[wb], run_name="crashy", run_folder=tmp_path) as run,
    ):
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(i + 0.5)
            if i == 1:
                raise RuntimeError("boom")
    written = the_run(tmp_path)
    assert written.run.display_name == "crashy-rank1" and written.run.run_group == "crashy"
    assert written.exit_code == 1
    assert written.series("loss/train/total") == ([1], [0.5])


def test_values_for_a_step_already_written(tmp_path, caplog):
    wb = WandBLogger(mode="offline", log_env=False, log_git=False)
    with (
        caplog.at_level(logging.WARNING, logger="obsbus"),
        Run(loggers=[wb], run_folder=tmp_path) as run,
    ):
        run.logger.log_metrics({"a": 1.0}, step=5)
        run.logger.log_metrics({"a": 2.0, "b": 3.0}, step=3)  # W&B can't go back: dropped
        run.logger.log_table(["x"], [[1]], name="late", step=3)  # shown at step 5
        run.logger.log_metrics({"a": 4.0}, step=6)
    written = the_run(tmp_path)
    assert written.series("a") == ([5, 6], [1.0, 4.0])
    assert written.series("b") == ([], [])
    assert [row["_step"] for row in written.history if "late" in row] == [5]
    assert wb.late_values == 3
    assert any("for step 3 after step 5" in r.getMessage() for r in caplog.records)


def test_disabled_mode_writes_nothing(tmp_path):
    wb = WandBLogger(mode="disabled")
    assert not wb.can_upload_files()
    with Run(max_duration="2ba", loggers=[wb], run_folder=tmp_path) as run:
        run.logger.log_table(["x"], [[1]])
        for _ in run.train([[0]] * 2):
            run.state.loss = torch.tensor(1.0)
    assert not (tmp_path / "wandb").exists() or not list((tmp_path / "wandb").rglob("*.wandb"))
    assert wb.undelivered_writes == 0


@pytest.mark.parametrize(
    ("mode", "env", "warned"),
    [(None, {}, True), ("online", {"WANDB_API_KEY": FAKE_WANDB_KEY}, False),
     ("offline", {}, False), (None, {"WANDB_MODE": "disabled"}, False),
     (None, {"WANDB_MODE": "online"}, True)],
    ids=["default-online", "key-set", "offline", "env-disabled", "env-online"],
)  # fmt: skip
def test_online_mode_without_an_api_key_is_warned_about(monkeypatch, caplog, mode, env, warned):
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.delenv("WANDB_MODE")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        WandBLogger(mode=mode)._check_credentials()
    messages = [r.getMessage() for r in caplog.records]
    assert any("WANDB_API_KEY is not set" in m for m in messages) == warned
    assert not any(FAKE_WANDB_KEY in m for m in messages)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "dryrun"}, ValueError, r"mode must be one of \('online', 'offline', 'disa"),
        ({"project": "a/b"}, ValueError, r"project must be at most 128 .* got 'a/b'"),
        ({"project": ""}, TypeError, "project must be a non-empty str or None, got ''"),
        ({"tags": "one"}, TypeError, "tags must be a list of str, got 'one'"),
        ({"tags": ["x" * 65]}, ValueError, "tags must be str of 1 to 64 characters"),
        ({"init_kwargs": {"project": "a/b"}}, ValueError, r"project must be at most 128 .* got 'a/b'"),
        ({"init_kwargs": {"mode": "dryrun"}}, ValueError, r"mode must be one of \('online'"),
        ({"init_kwargs": ["x"]}, TypeError, "init_kwargs must be a dict"),
        ({"log_interval": "5sp"}, ValueError, "WandBLogger log_interval '5sp'"),
        ({"log_artifacts": "false"}, TypeError, "WandBLogger log_artifacts must be True or False, got 'false'"),
        ({"init_kwargs": {3: "x"}}, TypeError, "init_kwargs must be a dict with str keys; the key 3 is not a str"),
        ({"save_dir": 5}, TypeError, r"save_dir must be a folder path \(str or os.PathLike\) or None, got 5"),
        ({"close_timeout": float("nan")}, ValueError, "close_timeout must be a finite number of seconds > 0, got nan"),
    ],
    ids=["mode", "project-slash", "empty-project", "str-tags", "long-tag", "init-project",
         "init-dir", "init-list", "interval", "str-artifacts", "int-init-key", "int-save-dir",
         "nan-timeout"],
)  # fmt: skip
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        WandBLogger(**kwargs)


def test_a_file_for_save_dir_fails_at_construction(tmp_path):
    """It was found at fit, when wandb.init tried to make its folder there."""
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(
        NotADirectoryError,
        match=r"WandBLogger save_dir must be a folder, and " + repr(str(tmp_path / "taken")),
    ):
        WandBLogger(mode="offline", save_dir=tmp_path / "taken")
    with pytest.raises(ValueError, match="'taken' is an existing file"):  # relative to the cwd
        WandBLogger(mode="offline", save_dir="taken")


def test_artifact_names_keep_only_what_wandb_allows():
    assert artifact_name("run 1/traces/rank0.trace.json") == "run-1.traces.rank0.trace.json"
    assert artifact_name("/a//b:c?.txt") == "a.b-c-.txt"
    assert artifact_name("***") == "file"
    long = artifact_name("x" * 300)
    assert len(long) == 128 and long != artifact_name("x" * 299)


def test_a_missing_wandb_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[wandb\]'"):
        WandBLogger()


def test_importing_the_module_does_not_import_wandb():
    code = "import obsbus.loggers.wandb_logger, sys; print('wandb' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_wandb_service_is_torn_down():
    import psutil
    import wandb

    wandb.teardown()
    children = psutil.Process().children(recursive=True)
    assert not [p for p in children if "wandb" in " ".join(p.cmdline())]


def test_init_kwargs_may_carry_the_arguments_as_in_composer(tmp_path):
    """Composer's WandBLogger merges ``project``, ``group``, ``name``, ``entity`` and ``tags``
    into ``init_kwargs`` (``composer/loggers/wandb_logger.py``), and its callback tests build
    ``WandBLogger(init_kwargs={'mode': 'offline'})`` (``tests/callbacks/callback_settings.py``)."""
    wb = WandBLogger(init_kwargs={"mode": "offline", "project": "p", "group": "g", "name": "n",
                                  "entity": "e", "tags": ["t"], "dir": str(tmp_path),
                                  "notes": "kept"})  # fmt: skip
    assert wb.resolved_mode() == "offline"
    assert (wb.project, wb.group, wb.run_name, wb.entity, wb.tags) == ("p", "g", "n", "e", ["t"])
    assert wb.save_dir == tmp_path and wb.init_kwargs == {"notes": "kept"}
    same = WandBLogger(project="p", init_kwargs={"project": "p", "name": None})
    assert same.project == "p" and same.init_kwargs == {}


def test_init_kwargs_and_an_argument_that_disagree_are_refused():
    with pytest.raises(
        ValueError,
        match=r"WandBLogger: init_kwargs\['project'\]='a' and "
        r"project='b' disagree\. To fix, give project once",
    ):
        WandBLogger(project="b", init_kwargs={"project": "a"})
    with pytest.raises(ValueError, match=r"init_kwargs\['dir'\]='x' and save_dir='y' disagree"):
        WandBLogger(save_dir="y", init_kwargs={"dir": "x"})


def test_init_kwargs_mode_and_name_reach_the_offline_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "online")  # init_kwargs' mode must win over it
    wb = WandBLogger(
        init_kwargs={"mode": "offline", "name": "from-kwargs"}, log_env=False, log_git=False
    )
    with Run(max_duration="1ba", loggers=[wb], run_folder=tmp_path) as run:
        for _ in run.train([[0]]):
            run.state.loss = torch.tensor(0.5)
    written = the_run(tmp_path)
    assert written.run.display_name == "from-kwargs"
    assert written.series("loss/train/total") == ([1], [0.5])
