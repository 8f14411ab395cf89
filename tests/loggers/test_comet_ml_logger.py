"""CometMLLogger, offline only, read back from the zip comet_ml writes (messages.json)."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Run, Trainer
from obsbus.callbacks import LRMonitor
from obsbus.errors import MissingExtraError
from obsbus.loggers import FileLogger, InMemoryLogger
from obsbus.loggers.comet_ml_logger import CometMLLogger

from ..helpers import regression_data, tiny_model

# comet_ml is not imported here: it reads its settings when first imported, which must
# happen inside the fixture's environment. It is a test dependency (the 'test' extra).


@pytest.fixture(autouse=True)
def offline_comet(tmp_path, monkeypatch):
    """comet_ml's config in tmp, none of its patching or error reporting, and no network."""
    monkeypatch.setenv("COMET_CONFIG", str(tmp_path / ".comet.config"))
    monkeypatch.setenv("COMET_DISABLE_AUTO_LOGGING", "1")
    monkeypatch.setenv("COMET_ERROR_TRACKING_ENABLE", "false")
    monkeypatch.setenv("COMET_DISABLE_ANNOUNCEMENT", "1")
    monkeypatch.delenv("COMET_API_KEY", raising=False)
    attempts: list = []
    real_connect = socket.socket.connect

    def connect(sock, address):
        if sock.family == socket.AF_UNIX:
            return real_connect(sock, address)
        attempts.append(address)
        raise OSError("these tests are offline")

    monkeypatch.setattr(socket.socket, "connect", connect)
    yield
    assert attempts == [], f"comet_ml tried the network: {attempts}"


class Zip:
    """The offline archive: its messages by type, and every file in it."""

    def __init__(self, folder: Path) -> None:
        (path,) = folder.glob("*.zip")
        with zipfile.ZipFile(path) as archive:
            self.files = {name: archive.read(name) for name in archive.namelist()}
        self.experiment = json.loads(self.files["experiment.json"])
        self.messages = [json.loads(line) for line in self.files["messages.json"].splitlines()]

    def of(self, kind):
        return [m["payload"] for m in self.messages if m["type"] == kind]

    def metrics(self):
        series: dict[str, list] = {}
        for payload in self.of("metric_msg"):
            metric = payload["metric"]
            series.setdefault(metric["metricName"], []).append(
                (metric["step"], metric["metricValue"])
            )
        return series

    def params(self):
        out = {}
        for payload in self.of("parameter_msg"):
            param = payload.get("param") or payload["params"]
            if param["source"] == "manual":
                out[param["paramName"]] = param["paramValue"]
        return out

    def others(self):
        return {p["key"]: p["value"] for p in self.of("log_other")}

    def assets(self):
        """``{file name: content}`` of the last upload of each name."""
        out = {}
        for payload in self.of("file_upload"):
            extra = payload["additional_params"]
            out[extra.get("fileName") or extra.get("figName")] = self.files[payload["file_path"]]
        return out


def fit(tmp_path, loggers, callbacks=(), duration="2ep", **kwargs):
    return Trainer(
        tiny_model(),
        regression_data(4),
        duration,
        loss_fn=F.mse_loss,
        loggers=loggers,
        callbacks=list(callbacks),
        device="cpu",
        run_folder=tmp_path / "run",
        run_name="r",
        **kwargs,
    )


def test_every_metric_parameter_and_file_reaches_the_offline_archive(tmp_path):
    comet, memory, files = CometMLLogger(online=False), InMemoryLogger(), FileLogger()
    with fit(
        tmp_path,
        [files, comet, memory],
        [LRMonitor()],
        eval_dataloader=regression_data(2, seed=1),
        hparams={"optim": {"lr": 0.001, "betas": [0.9, 0.99]}, "seed": 7},
    ) as trainer:
        trainer.fit()
    assert comet.offline_dir == tmp_path / "run" / "comet"
    archive = Zip(comet.offline_dir)
    metrics = archive.metrics()
    assert set(metrics) - set(memory.data) <= {"process duration"}  # comet's own
    for key in memory.data:
        series = memory.get_timeseries(key)
        assert metrics[key] == list(zip(series["step"], series[key], strict=True)), key
    assert [s for s, _ in metrics["loss/train/total"]] == list(range(1, 9))
    assert {"metrics/eval/loss", "lr-AdamW/group0"} <= set(metrics)
    params = archive.params()
    assert params["optim/lr"] == 0.001 and params["optim/betas"] == [0.9, 0.99]
    assert params["seed"] == 7 and params["device"] == "cpu"
    assert any(name.startswith("env__") for name in params)
    others = archive.others()
    assert others["Name"] == "r" and others["obsbus.status"] == "finished"
    assert archive.experiment["project_name"] == comet.default_project()
    text = (tmp_path / "run" / "logs-rank0.txt").read_bytes()
    assert archive.assets()["r/logs-rank0.txt"] == text  # FileLogger's upload, as closed


def test_git_metadata_becomes_others_and_an_asset(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], check=True)
    Path("a.txt").write_text("x")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    comet = CometMLLogger(online=False, log_env=False, offline_directory="archives/{run_name}")
    with Run(max_duration="1ba", run_folder=tmp_path / "run", run_name="g", loggers=[comet]) as run:
        for _ in run.train([[0]]):
            run.state.loss = 0.5
    assert comet.offline_dir == tmp_path / "run" / "archives" / "g"
    archive = Zip(comet.offline_dir)
    others = archive.others()
    assert (others["git.commit"], others["git.branch"], others["git.dirty"]) == (
        commit,
        "main",
        "false",
    )
    assert json.loads(archive.assets()["system/git_metadata.json"])["commit"] == commit
    assert archive.params() == {}


def test_a_failed_run_per_rank_with_images_tables_and_traces(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")

    class Crash(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch >= "2ba":
                raise RuntimeError("crash at batch 2")

    comet, memory = (
        CometMLLogger(online=False, rank_zero_only=False, log_env=False),
        InMemoryLogger(),
    )
    with (
        pytest.raises(RuntimeError, match="crash at batch 2"),
        Run(
            max_duration="3ba",
            run_folder=tmp_path / "run",
            run_name="r",
            loggers=[comet, memory],
            callbacks=[Crash()],
        ) as run,
    ):
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(i + 1 / 3)
            run.logger.log_images(np.full((2, 4, 5, 3), 0.5), name="batch", channels_last=True)
            run.logger.log_table(["a", "b"], [[1, 2]], name="tbl")
            run.logger.log_traces({"algo": "branch-a"})
            run.log_metrics({"vector": torch.tensor([1.0, 2.0]), "flag": True})
    archive = Zip(comet.offline_dir)
    others = archive.others()
    assert others["Name"] == "r-rank1" and others["obsbus.group"] == "r"
    assert others["obsbus.rank"] == 1 and archive.experiment["tags"] == ["r"]
    assert others["obsbus.status"] == "failed" and others["traces/algo"] == "branch-a"
    metrics = archive.metrics()
    losses = memory.get_timeseries("loss/train/total")
    assert metrics["loss/train/total"] == list(
        zip(losses["step"], losses["loss/train/total"], strict=True)
    )
    assert losses["step"] == [1, 2]  # every metric before the crash
    assert metrics["flag"] == [(0, 1), (1, 1)] and "vector" not in metrics
    warned = [
        r.getMessage() for r in caplog.records if "could not write 'vector'" in r.getMessage()
    ]
    assert len(warned) == 1 and "numbers only, and this value is a list" in warned[0]
    images = [
        p["additional_params"]
        for p in archive.of("file_upload")
        if p["upload_type"] == "visualization"
    ]
    assert [(i["figName"], i["step"]) for i in images] == [
        ("batch_0", 0),
        ("batch_1", 0),
        ("batch_0", 1),
        ("batch_1", 1),
    ]
    from PIL import Image as pil

    png = pil.open(io.BytesIO(archive.assets()["batch_0"]))
    assert png.size == (5, 4) and png.convert("RGB").getpixel((0, 0)) == (128, 128, 128)
    assert archive.assets()["tbl.csv"].decode().splitlines() == ["a,b", "1,2"]


def test_secrets_never_reach_the_run_folder_or_the_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-live-comet-0123456789")
    monkeypatch.setenv("COMET_API_KEY", "comet-key-FAKE-9876543210")
    monkeypatch.setenv("SOME_URI", "https://ada:sk-live-comet-0123456789@host/x")
    monkeypatch.setenv("OBSBUS_TEST_VISIBLE", "visible-value")
    comet = CometMLLogger(online=False)
    with fit(tmp_path, [FileLogger(), comet], duration="2ba") as trainer:
        trainer.fit()
    blobs = [p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()]
    blobs += list(Zip(comet.offline_dir).files.values())
    assert any(b"visible-value" in b for b in blobs)
    for secret in (b"sk-live-comet-0123456789", b"comet-key-FAKE-9876543210"):
        assert not any(secret in b for b in blobs)
    params = Zip(comet.offline_dir).params()
    assert "env__COMET_API_KEY" not in params and params["env__SOME_URI"] == "https://***@host/x"


def test_the_command_line_comet_records_is_masked(tmp_path, monkeypatch):
    """With parse_args (or log_env_host) on, comet reads sys.argv as the experiment starts
    (each flag a parameter): a secret on it is masked, the rest kept."""
    argv = ["train.py", "--api-key=cliSecret0042", "--password", "cliPass0042", "--lr", "0.1"]
    monkeypatch.setattr(sys, "argv", argv)
    comet = CometMLLogger(online=False, exp_kwargs={"log_env_host": True, "parse_args": True})
    with fit(tmp_path, [comet], duration="2ba") as trainer:
        trainer.fit()
    assert sys.argv == argv  # put back
    files = Zip(comet.offline_dir).files
    params = [p.get("param") or p["params"] for p in Zip(comet.offline_dir).of("parameter_msg")]
    cli = {p["paramName"]: p["paramValue"] for p in params if p["source"] == "cli"}
    assert cli == {"api-key": "***", "password": "***", "lr": 0.1}
    assert not any(b"cliSecret0042" in d or b"cliPass0042" in d for d in files.values())


def test_online_without_a_key_warns_without_printing_one(monkeypatch, caplog):
    online = CometMLLogger()
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        online._check_credentials()
        CometMLLogger(online=False)._check_credentials()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "COMET_API_KEY is not set" in warnings[0]
    assert "online=False" in warnings[0]
    caplog.clear()
    monkeypatch.setenv("COMET_API_KEY", "comet-key-FAKE-9876543210")
    with caplog.at_level(logging.DEBUG, logger="obsbus"):
        online._check_credentials()
    assert not caplog.records


def test_comet_patching_and_error_reports_are_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv("COMET_DISABLE_AUTO_LOGGING")
    monkeypatch.delenv("COMET_ERROR_TRACKING_ENABLE")
    monkeypatch.delitem(sys.modules, "comet_ml", raising=False)  # as if not imported yet
    CometMLLogger(auto_metric_logging=True)._check_credentials()
    assert "COMET_DISABLE_AUTO_LOGGING" not in os.environ
    assert "COMET_ERROR_TRACKING_ENABLE" not in os.environ  # online: comet's choice
    CometMLLogger(online=False)._check_credentials()
    assert os.environ["COMET_DISABLE_AUTO_LOGGING"] == "1"
    assert os.environ["COMET_ERROR_TRACKING_ENABLE"] == "false"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"online": "no"}, TypeError, "online must be True or False, got 'no'"),
        ({"project_name": ""}, TypeError, "project_name must be a non-empty str or None, got ''"),
        ({"offline_directory": "x"}, ValueError, "offline_directory='x' is only used offline"),
        (
            {"online": False, "offline_directory": 3},
            TypeError,
            r"offline_directory must be a folder path \(str or os.PathLike\) or None, got 3\.",
        ),
        ({"online": False, "offline_directory": "{rnak}"}, ValueError, "unknown placeholder"),
        ({"exp_kwargs": {"api_key": "k"}}, ValueError, "credentials from the environment only"),
        ({"exp_kwargs": ["x"]}, TypeError, r"exp_kwargs must be a dict with str keys, got \['x'\]"),
        ({"log_interval": "5sp"}, ValueError, "CometMLLogger log_interval '5sp'"),
        ({"exp_kwargs": {3: "x"}}, TypeError, "exp_kwargs must be a dict with str keys; the key 3"),
        ({"close_timeout": float("inf")}, ValueError, "close_timeout must be a finite .*got inf"),
    ],
    ids=[
        "str-online",
        "empty-project",
        "online-dir",
        "int-dir",
        "bad-placeholder",
        "api-key",
        "list-kwargs",
        "sample-interval",
        "int-kwargs-key",
        "inf-timeout",
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        CometMLLogger(**kwargs)


def test_a_file_for_offline_directory_fails_at_construction(tmp_path):
    """It was found at close, when the offline zip was written."""
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(
        NotADirectoryError,
        match=r"CometMLLogger offline_directory must be a "
        r"folder, and " + repr(str(tmp_path / "taken")),
    ):
        CometMLLogger(online=False, offline_directory=tmp_path / "taken")


def test_missing_comet_ml_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "comet_ml", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[comet\]'"):
        CometMLLogger(online=False)


def test_importing_the_module_does_not_import_comet_ml():
    code = "import sys, obsbus.loggers.comet_ml_logger; print('comet_ml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("folder", ["taken", "{run_name}"], ids=["relative", "placeholder"])
def test_a_file_for_a_relative_offline_directory_fails_at_init(tmp_path, folder):
    """A relative offline_directory resolves against the run folder only at init: a file there
    is named then, not found at close when the zip is written."""
    from obsbus import Run

    (tmp_path / "taken").write_text("a file")
    comet = CometMLLogger(online=False, offline_directory=folder, log_env=False, log_git=False)
    with pytest.raises(
        NotADirectoryError,
        match=r"CometMLLogger offline_directory must be a "
        rf"folder, and {str(tmp_path / 'taken')!r} is an existing file\. To fix",
    ):
        Run(max_duration="1ba", run_name="taken", run_folder=tmp_path, loggers=[comet])


def test_composers_positional_order():
    """Composer's ``CometMLLogger(workspace, project_name, log_code, log_graph, name,
    rank_zero_only, exp_kwargs)``."""
    comet = CometMLLogger(
        "ws", "proj", True, False, "exp", False, {"log_env_gpu": True}, online=False
    )
    assert (comet.workspace, comet.project_name, comet.experiment_name) == ("ws", "proj", "exp")
    assert comet.rank_zero_only is False
    assert comet.exp_kwargs["log_code"] is True and comet.exp_kwargs["log_env_gpu"] is True
