"""One bad key or value never costs another value (issue 34, section 1).

Each test logs one bad entry at one step of a real run and reads back what
every destination stored: every other value of every step is there, and the
bad one is refused at the call (a key that is not a ``str``) or skipped and
counted by name (a value the destination can't store), in the close summary,
``run-status-rank0.json`` and the report's Failures section.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from obsbus import Logger, Run, State
from obsbus.loggers import FileLogger, InMemoryLogger
from obsbus.loggers.run_report import RunReport

from .test_odd_values import loopback_only, trackers_offline  # noqa: F401 (fixtures)

STEPS = 30
BAD_AT = 5


def train(folder: Path, loggers: list[Any], bad: dict[Any, Any]) -> Run:
    """``STEPS`` batches logging the loss (Run's own) and ``good`` every step, ``bad`` at one."""
    with Run(max_duration=f"{STEPS}ba", run_folder=folder, run_name="r", loggers=loggers) as run:
        for _ in run.train([[1]] * STEPS):
            run.state.loss = 0.5
            run.log_metrics({"good": float(run.state.timestamp.batch)})
            if run.state.timestamp.batch == BAD_AT:
                run.log_metrics(bad)
    return run


def jsonl_rows(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "metrics-rank0.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"]}


def status_failures(folder: Path) -> list[str]:
    return json.loads((folder / "run-status-rank0.json").read_text())["failures"]


# ------------------------------------------------------------- keys
@pytest.mark.parametrize("key", [("a", "b"), 7, None, b"k"], ids=["tuple", "int", "None", "bytes"])
def test_a_key_that_is_not_a_str_is_a_type_error_at_the_call_naming_key_and_caller(key):
    mem = InMemoryLogger()
    logger = Logger(State(run_name="r"), [mem])
    with pytest.raises(TypeError, match=r"metric keys must be str") as info:
        logger.log_metrics({"fine": 1.0, key: 0.5})
    message = str(info.value)
    assert repr(key) in message and type(key).__name__ in message
    assert f"{Path(__file__).name}:" in message  # the caller's file and line
    assert mem.data == {}  # refused whole: nothing half-logged


def test_a_bad_key_refused_at_batch_5_costs_no_other_row(tmp_path):
    from obsbus.loggers.tensorboard_logger import TensorboardLogger

    tb = TensorboardLogger(log_env=False, log_git=False, write_period=0)
    refused: list[str] = []
    with Run(max_duration=f"{STEPS}ba", run_folder=tmp_path, run_name="r",
             loggers=[FileLogger(), tb, RunReport()]) as run:  # fmt: skip
        for _ in run.train([[1]] * STEPS):
            run.state.loss = 0.5
            if run.state.timestamp.batch == BAD_AT:
                try:
                    run.log_metrics({("a", "b"): 0.5})
                except TypeError as exc:
                    refused.append(str(exc))
    assert len(refused) == 1 and "('a', 'b')" in refused[0]
    rows = jsonl_rows(tmp_path)
    assert [r["step"] for r in rows if "loss/train/total" in r] == list(range(1, STEPS + 1))
    assert [s for s, _ in tensorboard_scalars(tmp_path)["loss/train/total"]] == list(
        range(1, STEPS + 1)
    )
    assert status_failures(tmp_path) == []  # refused at the call: nothing was lost downstream


def test_a_destination_called_directly_skips_and_counts_a_key_that_is_not_a_str(tmp_path):
    """Past the Logger (a destination's own caller), the writer skips the key by name."""
    dest = FileLogger()
    with Run(max_duration="3ba", run_folder=tmp_path, run_name="r",
             loggers=[dest, RunReport()]) as run:  # fmt: skip
        for _ in run.train([[1]] * 3):
            run.state.loss = 0.5
            dest.log_metrics({("a", "b"): 1.0, "kept": 2.0}, step=run.state.timestamp.batch)
    rows = [r for r in jsonl_rows(tmp_path) if "kept" in r]
    assert [r["kept"] for r in rows] == [2.0, 2.0, 2.0]
    assert [r["step"] for r in jsonl_rows(tmp_path) if "loss/train/total" in r] == [1, 2, 3]
    (line,) = [f for f in status_failures(tmp_path) if f.startswith("FileLogger")]
    assert "('a', 'b')" in line and "3" in line, line


# ------------------------------------------------------------ values
HUGE = 2**1100  # an int no float64 holds


def test_an_int_beyond_float64_costs_no_other_value_in_any_tracker(tmp_path, caplog):
    from mlflow import MlflowClient

    from obsbus.loggers.mlflow_logger import MLFlowLogger
    from obsbus.loggers.tensorboard_logger import TensorboardLogger

    tb = TensorboardLogger(log_env=False, log_git=False, write_period=0)
    mlf = MLFlowLogger(log_env=False, log_git=False, write_period=0)
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        run = train(tmp_path, [FileLogger(), tb, mlf, RunReport()], {"huge": HUGE, "beside": 1.0})
    steps, body_steps = list(range(1, STEPS + 1)), list(range(STEPS))  # the loss: at batch end
    scalars = tensorboard_scalars(tmp_path)
    assert [s for s, _ in scalars["loss/train/total"]] == steps
    assert [s for s, _ in scalars["good"]] == body_steps
    assert scalars["beside"] == [(BAD_AT, 1.0)] and "huge" not in scalars
    client = MlflowClient(mlf.resolved_tracking_uri(tmp_path))
    for key, want in (("loss/train/total", steps), ("good", body_steps)):
        assert sorted(m.step for m in client.get_metric_history(mlf.run_id, key)) == want, key
    assert [m.value for m in client.get_metric_history(mlf.run_id, "beside")] == [1.0]
    assert client.get_metric_history(mlf.run_id, "huge") == []
    # The JSON Lines keep it (as its digits: no float holds it), so it is not a loss there.
    (row,) = [r for r in jsonl_rows(tmp_path) if "huge" in r]
    assert row["huge"] == str(HUGE) and row["beside"] == 1.0
    # Each tracker that could not store it says so, by key, in every place a person looks.
    failures = status_failures(tmp_path)
    for name in ("TensorboardLogger", "MLFlowLogger"):
        (line,) = [f for f in failures if f.startswith(name)]
        assert "'huge'" in line and "float" in line, line
    assert not [f for f in failures if f.startswith("FileLogger")]
    summary = [r.getMessage() for r in caplog.records if "'huge'" in r.getMessage()]
    assert summary, "the close summary names the key"
    html = (tmp_path / "report.html").read_text()
    assert html.count("&#x27;huge&#x27;") + html.count("'huge'") >= 2  # in Failures, per tracker
    assert run.logger.failures.skipped_values == 2


def test_wandb_keeps_none_reserved_keys_and_huge_ints_accounted_for(tmp_path):
    from obsbus.loggers.wandb_logger import WandBLogger

    from ..loggers.test_wandb_logger import the_run

    wb = WandBLogger(log_env=False, log_git=False, log_artifacts=False, write_period=0)
    train(tmp_path, [wb, RunReport()],
          {"none": None, "_step": 3.0, "_runtime": 4.0, "huge": HUGE, "beside": 1.0})  # fmt: skip
    run = the_run(tmp_path)
    steps = list(range(1, STEPS + 1))
    assert (
        run.series("good")[0] == list(range(STEPS)) and run.series("loss/train/total")[0] == steps
    )
    assert run.series("beside") == ([BAD_AT], [1.0])
    # W&B's own columns keep their meaning; the metrics are kept beside them, renamed.
    assert run.series("metric:_step") == ([BAD_AT], [3.0])
    assert run.series("metric:_runtime") == ([BAD_AT], [4.0])
    assert run.series("huge")[0] == []  # never inf
    (line,) = [f for f in status_failures(tmp_path) if f.startswith("WandBLogger")]
    assert "'none'" in line and "'huge'" in line, line


# ------------------------------------------------------ JSON Lines
def test_a_metric_named_like_a_column_keeps_the_column_and_the_metric(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        train(tmp_path, [FileLogger()],
              {"epoch": 0.25, "step": 99, "batch": -1, "wall_time": 7.0})  # fmt: skip
    rows = jsonl_rows(tmp_path)
    (row,) = [r for r in rows if "metric:epoch" in r]
    (beside,) = [r for r in rows if r.get("good") == BAD_AT]
    assert row["step"] == row["batch"] == BAD_AT and row["epoch"] == beside["epoch"]
    assert row["wall_time"] != 7.0
    assert (row["metric:epoch"], row["metric:step"], row["metric:batch"]) == (0.25, 99, -1)
    assert row["metric:wall_time"] == 7.0
    warned = [r.getMessage() for r in caplog.records if "metric:epoch" in r.getMessage()]
    assert len(warned) == 1, warned


def _no_constants(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def test_json_lines_are_strict_json_and_keep_which_non_finite_value(tmp_path):
    import numpy as np
    import torch

    train(tmp_path, [FileLogger()],
          {"nan": math.nan, "inf": math.inf, "neg": -math.inf, "vec": torch.tensor([1.0, math.nan]),
           "np": np.float32("inf")})  # fmt: skip
    text = (tmp_path / "metrics-rank0.jsonl").read_text()
    rows = [json.loads(line, parse_constant=_no_constants) for line in text.splitlines()]
    (row,) = [r for r in rows if "nan" in r]
    assert (row["nan"], row["inf"], row["neg"]) == ("NaN", "Infinity", "-Infinity")
    assert row["vec"] == [1.0, "NaN"] and row["np"] == "Infinity"
    from obsbus.report._read import read_jsonl

    data = read_jsonl(tmp_path / "metrics-rank0.jsonl", 0)
    assert _values_of(data, "inf") == [math.inf] and _values_of(data, "neg") == [-math.inf]
    assert all(math.isnan(v) for v in _values_of(data, "nan"))


def _values_of(data: Any, key: str) -> list[float]:
    """The values the report read for ``key``."""
    _steps, values = data.series[key]
    return values


# ---------------------------------------------------------- MLflow
def test_mlflow_renames_are_warned_and_recorded_in_the_run_folder(tmp_path, caplog):
    from obsbus.loggers.mlflow_logger import MLFlowLogger

    mlf = MLFlowLogger(log_env=False, log_git=False, write_period=0)
    keys = {"loss/🔥": 1.0, "/lead": 2.0, "a\nb": 3.0, "k" * 300: 4.0}
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        train(tmp_path, [mlf], keys)
    mapping = json.loads((tmp_path / "mlflow-key-names.json").read_text())
    assert set(keys) <= set(mapping["metric"]), mapping
    assert mapping["metric"]["/lead"] == "lead" and mapping["metric"]["a\nb"] == "a_b"
    assert mapping["metric"]["k" * 300] == "k" * 250
    renamed = [r.getMessage() for r in caplog.records if " as '" in r.getMessage()]
    assert len([m for m in renamed if "MLFlowLogger logs metric" in m]) == len(keys)
