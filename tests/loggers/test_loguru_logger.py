"""LoguruLogger: metric lines in the rank-aware log, values synced once per line."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from loguru import logger

import obsbus.loggers.loguru_logger as loguru_logger_module
from obsbus import RunFolder, Trainer
from obsbus.log import reset_logging, setup_logging
from obsbus.loggers.loguru_logger import LoguruLogger
from obsbus.run import Run

from ..helpers import regression_data, tiny_model


@pytest.fixture(autouse=True)
def _clean_logging(monkeypatch):
    for name in ("OBSBUS_LOG_LEVEL", "OBSBUS_LOG_TIMESTAMP", "OBSBUS_LOG_COLOR"):
        monkeypatch.delenv(name, raising=False)
    yield
    reset_logging()


def read(root, name="info.log", rank=0):
    return (RunFolder(root).logs_dir("train", rank) / name).read_text()


def messages(text):
    return re.findall(r"^\S+ \S+ \| \w+ +\| .*? - (.*)$", text, flags=re.M)


def fit(dest, duration="2ep", **kwargs):
    with Trainer(
        tiny_model(),
        regression_data(4),
        duration,
        loss_fn=F.mse_loss,
        loggers=[dest],
        device="cpu",
        **kwargs,
    ) as trainer:
        trainer.fit()
    return trainer


def test_writes_a_line_every_n_batches_to_this_ranks_file(tmp_path):
    setup_logging(tmp_path, rank=1, world_size=2, stderr=False)
    fit(LoguruLogger(log_interval="2ba"))
    reset_logging()
    text = read(tmp_path, rank=1)
    lines = [m for m in messages(text) if m.startswith("[")]
    assert [m.split(" ")[0] for m in lines] == [
        "[epoch=1][batch=2/4]",
        "[epoch=1][batch=4/4]",
        "[epoch=2][batch=2/4]",
        "[epoch=2][batch=4/4]",
    ]
    assert all(re.fullmatch(r"\S+ loss/train/total=\d+\.\d{4}", m) for m in lines)
    assert all("| rank-1/2 |" in line for line in text.splitlines())


def test_values_are_synced_once_per_line_all_together(tmp_path, monkeypatch):
    calls = []
    real = loguru_logger_module.to_host

    def spy(values):
        calls.append(dict(values))
        return real(values)

    monkeypatch.setattr(loguru_logger_module, "to_host", spy)
    setup_logging(tmp_path, stderr=False)
    dest = LoguruLogger(log_interval="3ba")
    with Run(max_duration="6ba", loggers=[dest]) as run:
        for i, _ in enumerate(run.train([[i] for i in range(6)])):
            run.state.loss = torch.tensor(float(i))
            run.logger.log_metrics({"lr": torch.tensor(0.5), "grad_norm": torch.tensor(2.0)})
            assert len(calls) == i // 3  # batch i ends after this body: 0, 0, 0, 1, 1, 1
    reset_logging()
    assert len(calls) == 2
    assert all(set(c) == {"loss/train/total", "lr", "grad_norm"} for c in calls)
    assert all(isinstance(v, torch.Tensor) for c in calls for v in c.values())
    lines = [m for m in messages(read(tmp_path)) if m.startswith("[epoch")]
    assert lines == [  # keys sorted by name, whatever order they were logged in
        "[epoch=1][batch=3/6] grad_norm=2.0000 loss/train/total=2.0000 lr=0.5000",
        "[epoch=1][batch=6/6] grad_norm=2.0000 loss/train/total=5.0000 lr=0.5000",
    ]


def test_epoch_interval_and_eval_metrics(tmp_path):
    setup_logging(tmp_path, stderr=False)
    fit(LoguruLogger(log_interval="1ep"), eval_dataloader=regression_data(2, seed=1))
    reset_logging()
    lines = messages(read(tmp_path))
    assert sum(m.startswith("[epoch=1][end] ") for m in lines) == 1
    assert sum(m.startswith("[epoch=2][end] ") for m in lines) == 1
    evals = [m for m in lines if "[eval=" in m]
    assert [m.split(" metrics")[0] for m in evals] == [  # the epoch each eval ended
        "[epoch=1][eval=eval] after batch 4",
        "[epoch=2][eval=eval] after batch 8",
    ]
    assert all(
        re.fullmatch(r"\S+\[eval=eval\] after batch \d metrics/eval/loss=\d+\.\d{4,}", m)
        for m in evals
    )
    assert not any("[eval eval]" in m for m in lines)
    train = [m for m in lines if m.startswith("[epoch") and "[eval=" not in m]
    assert train and not any("metrics/eval" in m for m in train)


def test_hyperparameters_once_and_structured_extras(tmp_path):
    records = []
    sink = logger.add(lambda m: records.append(m.record), level="INFO")
    try:
        setup_logging(tmp_path, stderr=False)
        trainer = Trainer(
            tiny_model(),
            regression_data(2),
            "1ep",
            loss_fn=F.mse_loss,
            loggers=[LoguruLogger(log_interval="2ba")],
            device="cpu",
            hparams={"lr": 0.5},
        )
        trainer.fit()
        trainer.fit(duration="1ep")
        trainer.close()
    finally:
        logger.remove(sink)
    reset_logging()
    (hparams,) = [m for m in messages(read(tmp_path)) if "Hyperparameters" in m]
    assert hparams.startswith("Hyperparameters: ") and " lr=0.5" in hparams
    metric_records = [r for r in records if "metrics" in r["extra"]]
    assert [r["extra"]["step"] for r in metric_records] == [2, 4]
    assert all(isinstance(r["extra"]["metrics"]["loss/train/total"], float) for r in metric_records)
    assert all(r["extra"]["rank"] == 0 for r in metric_records)


def test_debug_level_keeps_lines_off_the_console(tmp_path, capsys):
    setup_logging(tmp_path)
    fit(LoguruLogger(log_interval="2ba", level="debug"), duration="2ba")
    reset_logging()
    assert "loss/train/total" not in capsys.readouterr().err
    assert "loss/train/total" not in read(tmp_path)
    assert "[epoch=1][batch=2/4] loss/train/total=" in read(tmp_path, "debug.log")


def test_held_values_are_written_on_exception(tmp_path):
    setup_logging(tmp_path, stderr=False)
    with (
        pytest.raises(RuntimeError, match="boom"),
        Run(max_duration="10ba", loggers=[LoguruLogger(log_interval="10ba")]) as run,
    ):
        for i, _ in enumerate(run.train([[i] for i in range(10)])):
            run.state.loss = torch.tensor(1.5)
            if i == 2:
                raise RuntimeError("boom")
    reset_logging()
    assert [m for m in messages(read(tmp_path)) if "loss" in m] == [
        "[exception] loss/train/total=1.5000"
    ]


def test_works_without_setup_logging():
    seen = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="INFO")
    try:
        fit(LoguruLogger(log_interval="2ba"), duration="2ba")
    finally:
        logger.remove(sink)
    lines = [m for m in seen if m.startswith("[")]
    assert len(lines) == 1 and lines[0].startswith("[epoch=1][batch=2/4] loss/train/total=")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"log_interval": "10sp"}, ValueError, r"'10sp' is not supported.*'10ba' or '1ep'"),
        ({"log_interval": "0ba"}, ValueError, r"'0ba' is not supported"),
        (
            {"level": "VERBOSE"},
            ValueError,
            r"Unknown LoguruLogger level 'VERBOSE'\. Accepted: TRACE",
        ),
        ({"level": 20}, TypeError, r"LoguruLogger level must be a level name, got 20"),
        ({"log_traces": "false"}, TypeError, r"LoguruLogger log_traces must be True or False, got 'false'"),
    ],
    ids=["samples", "zero", "level-name", "level-type", "traces-str"],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        LoguruLogger(**kwargs)
