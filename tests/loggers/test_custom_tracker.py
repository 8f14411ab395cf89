"""A sixth tracker is one client class: a tiny JSON-lines tracker, built and tested here.

``JsonLinesClient`` is all there is to it: each protocol method writes one
line. The destination around it brings the policy (held values, one transfer,
the writer thread, rank choice, the environment and git, flush, finish).
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from obsbus import Run
from obsbus.loggers import (
    CometMLLogger,
    MLFlowLogger,
    NeptuneLogger,
    TensorboardLogger,
    WandBLogger,
)
from obsbus.loggers._shared_options import SHARED_OPTIONS
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers._tracker_client import RunInfo, TrackerClient


class JsonLinesClient(TrackerClient):
    """Writes every call as one JSON line to ``{run folder}/tracker.jsonl``."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.threads: set[str] = set()

    def _write(self, kind: str, **fields: Any) -> None:
        assert self.path is not None
        self.threads.add(threading.current_thread().name)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, **fields}, default=str) + "\n")

    def can_upload_files(self) -> bool:
        return True

    def start(self, info: RunInfo) -> None:
        self.path = info.run_folder / "tracker.jsonl"
        self._write("start", run=info.run_name, project=info.project, rank=info.rank)

    def log_metrics(self, values: dict[str, Any], step: int) -> None:
        self._write("metrics", step=step, values=values)

    def log_params(self, params: dict[str, Any]) -> None:
        self._write("params", params=params)

    def set_tags(self, tags: dict[str, str]) -> None:
        self._write("tags", tags=tags)

    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        self._write("table", name=name, step=step, columns=columns, rows=rows)

    def log_images(self, images: list[Any], name: str, step: int) -> None:
        shapes = [list(image.shape) for image in images]
        self._write("images", name=name, step=step, shapes=shapes)

    def log_traces(self, traces: dict[str, Any], step: int) -> None:
        self._write("traces", step=step, traces=traces)

    def upload_file(self, remote_file_name: str, file_path: Path) -> None:
        self._write("file", name=remote_file_name, text=file_path.read_text())

    def flush(self) -> None:
        self._write("flush")

    def finish(self, failed: bool, exception: BaseException | None) -> None:
        self._write("finish", failed=failed, exception=type(exception).__name__)


def _lines(folder: Path) -> list[dict[str, Any]]:
    text = (folder / "tracker.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_a_client_gets_every_logging_call_on_the_writer_thread(tmp_path):
    client = JsonLinesClient()
    tracker = TrackerDestination(client, log_interval="2ba", log_env=False, log_git=False)
    report = tmp_path / "report.txt"
    report.write_text("all good")
    with Run(max_duration="3ba", run_folder=tmp_path, run_name="demo", loggers=[tracker]) as run:
        run.logger.log_hyperparameters({"optim": {"lr": 0.1}})
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(i + 0.5)
            if i == 1:
                run.logger.log_table(["name", "score"], [["a", torch.tensor(0.25)]], name="preds")
                run.logger.log_images(torch.zeros(2, 3, 4, 5), name="samples")
                run.logger.log_traces({"algo": "branch-a"})
                run.logger.upload_file("report.txt", report)
    lines = _lines(tmp_path)
    kinds = [line["kind"] for line in lines]
    assert kinds[0] == "start" and lines[0]["run"] == "demo" and lines[0]["rank"] == 0
    assert kinds[-2:] == ["flush", "finish"] and lines[-1] == {
        "kind": "finish",
        "failed": False,
        "exception": "NoneType",
    }
    assert [line["params"] for line in lines if line["kind"] == "params"] == [{"optim/lr": 0.1}]
    losses = [
        (line["step"], line["values"]["loss/train/total"])
        for line in lines
        if line["kind"] == "metrics"
    ]
    assert losses == [(1, 0.5), (2, 1.5), (3, 2.5)]
    (table,) = [line for line in lines if line["kind"] == "table"]
    assert (table["step"], table["rows"]) == (1, [["a", 0.25]])  # the tensor cell, a number
    (images,) = [line for line in lines if line["kind"] == "images"]
    assert images["shapes"] == [[4, 5, 3], [4, 5, 3]]  # NCHW, as HWC arrays
    assert [line["traces"] for line in lines if line["kind"] == "traces"] == [{"algo": "branch-a"}]
    assert [line["text"] for line in lines if line["kind"] == "file"] == ["all good"]
    # A table or image goes after the metrics held before it: batch 1's loss first.
    assert kinds.index("metrics") < kinds.index("table")
    assert client.threads == {"obsbus-writer-TrackerDestination"}


def test_a_failed_run_flushes_and_finishes_the_client_as_failed(tmp_path):
    tracker = TrackerDestination(JsonLinesClient(), log_env=False, log_git=False)
    with (
        pytest.raises(RuntimeError, match="boom"),
        Run(max_duration="3ba", run_folder=tmp_path, loggers=[tracker]) as run,
    ):
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(1.0)
            if i == 1:
                raise RuntimeError("boom")
    lines = _lines(tmp_path)
    assert [line["step"] for line in lines if line["kind"] == "metrics"] == [1]
    assert lines[-1] == {"kind": "finish", "failed": True, "exception": "RuntimeError"}
    assert [line["kind"] for line in lines].count("flush") >= 1


def test_a_client_without_tables_images_or_traces_is_never_queued_them(tmp_path, caplog):
    class MetricsOnly(TrackerClient):
        def __init__(self) -> None:
            self.calls: list[tuple[int, dict[str, Any]]] = []

        def log_metrics(self, values: dict[str, Any], step: int) -> None:
            self.calls.append((step, values))

    client = MetricsOnly()
    tracker = TrackerDestination(client, log_env=False, log_git=False)
    with Run(max_duration="2ba", run_folder=tmp_path, loggers=[tracker]) as run:
        for i, _ in enumerate(run.train([[0]] * 2)):
            run.logger.log_traces({"algo": "x"})
            run.logger.log_images(np.zeros((2, 4, 5)), name="img")  # no image: would raise
            run.logger.log_table(["a"], [[object()]], name="t")
            run.logger.log_metrics({"m": torch.tensor(float(i))})
    assert client.calls == [(0, {"m": 0.0}), (1, {"m": 1.0})]
    assert tracker.undelivered_writes == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records


def test_a_client_that_is_not_one_is_refused_at_construction():
    with pytest.raises(TypeError, match=r"TrackerDestination client must be a TrackerClient .*"
                       r"got <object object"):  # fmt: skip
        TrackerDestination(object())  # type: ignore[arg-type]


TRACKERS = [WandBLogger, MLFlowLogger, CometMLLogger, NeptuneLogger, TensorboardLogger]


@pytest.mark.parametrize("cls", TRACKERS, ids=lambda c: c.__name__)
def test_every_tracker_takes_the_shared_options_by_the_same_names(cls):
    base = inspect.signature(TrackerDestination).parameters
    params = inspect.signature(cls).parameters
    assert set(SHARED_OPTIONS) <= set(params), set(SHARED_OPTIONS) - set(params)
    for name in SHARED_OPTIONS:
        if (cls, name) == (MLFlowLogger, "logging_rank"):
            assert params[name].default == "last"  # Megatron's and Primus's choice
            continue
        assert params[name].default == base[name].default, name


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (WandBLogger, {"mode": "offline"}),
        (MLFlowLogger, {}),
        (CometMLLogger, {"online": False}),
        (NeptuneLogger, {"mode": "debug"}),
        (TensorboardLogger, {}),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_the_shared_options_reach_the_destination(cls, kwargs):
    tracker = cls(**kwargs, logging_rank="last", max_queue_size=7, write_period=2.5)
    assert tracker.logging_rank == "last" and tracker.write_period == 2.5
    assert tracker._writer.max_queue_size == 7
