"""Odd values through every destination: no crash, no failure, the documented handling.

NaN, ±inf, numpy scalars and arrays, big ints, bools, 1-element and
multi-element tensors (a NaN one too) and odd keys (unicode, a leading
``/``, 300 characters, ``''``, spaces, ``.``) are logged for two steps
through each destination. None may raise or record a failure (the logger's
``failures`` and obsbus's error log stay empty), and where the result can be
read back (InMemoryLogger, the console, progress bar and loguru text, the
JSON Lines, TensorBoard's event files, the MLflow store), it is what the
README's "Odd values" table says. W&B, Comet and Neptune run offline and are
checked for no failure only.
"""

from __future__ import annotations

import io
import json
import logging
import math
import socket
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from obsbus import Run
from obsbus.loggers import ConsoleLogger, FileLogger, InMemoryLogger, ProgressBarLogger

NAN, INF = float("nan"), float("inf")
LONG_KEY = "k" * 300
ODD_KEYS = {"loss/🔥": 1.0, "/lead": 2.0, LONG_KEY: 3.0, "": 4.0, "with space": 5.0, ".": 6.0}


def odd_metrics() -> dict[str, Any]:
    """What is logged at each step (fresh tensors each time)."""
    return {
        "nan": NAN, "inf": INF, "neg_inf": -INF,
        "np_float32": np.float32(0.5), "np_int64": np.int64(7), "np_bool": np.bool_(True),
        "np_0d": np.array(1.5), "np_vec": np.array([1.0, 2.0]),
        "big_int": 2**70, "int64_min": -(2**63), "bool": True,
        "tensor_1": torch.tensor([3.0]), "tensor_vec": torch.tensor([1.0, 2.0, 3.0]),
        "tensor_nan": torch.tensor(NAN), "tensor_nan_vec": torch.full((2,), NAN),
        **ODD_KEYS,
    }  # fmt: skip


#: What every destination is handed: Python numbers and lists (values.HostValues.result).
AS_PYTHON = {
    "nan": NAN, "inf": INF, "neg_inf": -INF, "np_float32": 0.5, "np_int64": 7,
    "np_bool": True, "np_0d": 1.5, "np_vec": [1.0, 2.0], "big_int": 2**70,
    "int64_min": -(2**63), "bool": True, "tensor_1": 3.0, "tensor_vec": [1.0, 2.0, 3.0],
    "tensor_nan": NAN, "tensor_nan_vec": [NAN, NAN], **ODD_KEYS,
}  # fmt: skip
LISTS = {k for k, v in AS_PYTHON.items() if isinstance(v, list)}

ODD_HPARAMS = {"np_lr": np.float32(0.5), "big": 2**70, "nan": NAN, "/lead": 1, "🔥": 2, "": 3}


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN, and of the same Python type (1 is not 1.0 or True)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    return (math.isnan(a) and math.isnan(b)) if isinstance(a, float) and a != a else a == b


@pytest.fixture(scope="module", autouse=True)
def trackers_offline(tmp_path_factory):
    """Every tracker's folders in tmp, offline, with fake credentials and no way out."""
    home = tmp_path_factory.mktemp("tracker-home")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                    "WANDB_ARTIFACT_DIR", "MPLCONFIGDIR", "NEPTUNE_DATA_DIRECTORY"):  # fmt: skip
            mp.setenv(var, str(home / var.lower()))
        mp.setenv("COMET_CONFIG", str(home / ".comet.config"))
        env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_API_KEY": "wandb-fake-1",
               "NEPTUNE_API_TOKEN": "neptune-fake-1", "MLFLOW_DISABLE_TELEMETRY": "true",
               "DO_NOT_TRACK": "true", "COMET_DISABLE_AUTO_LOGGING": "1",
               "COMET_ERROR_TRACKING_ENABLE": "false", "COMET_DISABLE_ANNOUNCEMENT": "1",
               "NO_PROXY": ""}  # fmt: skip
        for var, value in env.items():
            mp.setenv(var, value)
        for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            mp.setenv(var, "http://127.0.0.1:9")  # anything that tries the network fails at once
        for var in ("WANDB_PROJECT", "WANDB_ENTITY", "NEPTUNE_MODE", "NEPTUNE_PROJECT",
                    "COMET_API_KEY", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):  # fmt: skip
            mp.delenv(var, raising=False)
        yield
        if "wandb" in sys.modules:
            sys.modules["wandb"].teardown()


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Any TCP connection beyond this machine fails the test (a UDP connect sends nothing:
    obsbus.log uses one to find this host's address)."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> Any:
        if (sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
                and address[0] not in ("127.0.0.1", "::1", "localhost")):  # fmt: skip
            attempts.append(address)
            raise OSError(f"the odd-values suite is offline: {address}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    yield
    assert attempts == []


def log_odd_values(tmp_path, destination, caplog, steps: int = 2) -> list[str]:
    """Two steps of :func:`odd_metrics` through ``destination``; obsbus's warnings back.

    Fails if the run raised, a destination call failed, or obsbus logged an error.
    """
    with caplog.at_level(logging.WARNING, logger="obsbus"), Run(
        max_duration=f"{steps}ba", run_folder=tmp_path / "run", run_name="odd",
        loggers=[destination], hparams=dict(ODD_HPARAMS)) as run:  # fmt: skip
        for _ in run.train([[1]] * steps):
            run.log_metrics(odd_metrics())
    records = [r for r in caplog.records if r.name == "obsbus"]
    errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
    assert errors == [] and not run.logger.failures.counts, errors
    warnings = [r.getMessage() for r in records]
    assert not [w for w in warnings if "time(s); first:" in w], warnings  # the close summary
    return warnings


# ------------------------------------------------------------ in process
def test_in_memory_logger_holds_python_numbers_and_lists(tmp_path, caplog):
    memory = InMemoryLogger()
    log_odd_values(tmp_path, memory, caplog)
    for key, want in AS_PYTHON.items():
        series = memory.get_timeseries(key)
        assert series["step"] == [0, 1], key
        assert all(same(v, want) for v in series[key]), (key, series[key])


def test_console_and_progress_bar_print_every_value(tmp_path, caplog):
    text = io.StringIO()
    log_odd_values(tmp_path, ConsoleLogger(log_interval="1ba", stream=text), caplog)
    out = text.getvalue()
    for shown in ("nan: nan", "inf: inf", "neg_inf: -inf", "np_float32: 0.5000", "np_int64: 7",
                  "np_bool: True", "np_vec: [1.0, 2.0]", "big_int: 1,180,591,620,717,411,303,424",
                  "bool: True", "tensor_1: 3.0000", "tensor_nan_vec: [nan, nan]",
                  "loss/🔥: 1.0000", f"{LONG_KEY}: 3.0000", "with space: 5.0000"):  # fmt: skip
        assert shown in out, shown
    bar_text = io.StringIO()
    bar = ProgressBarLogger(stream=bar_text, postfix_interval=0.0,
                            postfix_keys=["nan", "np_float32", "big_int"])  # fmt: skip
    log_odd_values(tmp_path / "bar", bar, caplog)
    assert "np_float32=0.5" in bar_text.getvalue(), bar_text.getvalue()[-500:]


def test_loguru_lines_show_python_numbers(tmp_path, caplog):
    from obsbus.log import reset_logging, setup_logging
    from obsbus.loggers.loguru_logger import LoguruLogger
    from obsbus.run_folder import RunFolder

    setup_logging(tmp_path / "logs", rank=0, world_size=1, stderr=False)
    try:
        log_odd_values(tmp_path, LoguruLogger(log_interval="1ba"), caplog)
    finally:
        reset_logging()
    text = (RunFolder(tmp_path / "logs").logs_dir("train", 0) / "info.log").read_text()
    for shown in ("nan=nan", "np_float32=0.5000", "np_int64=7", "np_vec=[1.0, 2.0]",
                  "tensor_1=3.0000", "loss/🔥=1.0000"):  # fmt: skip
        assert shown in text, shown


# ------------------------------------------------------------- on disk
def test_file_logger_json_lines_read_back_with_json_and_pandas(tmp_path, caplog):
    log_odd_values(tmp_path, FileLogger(), caplog)
    path = tmp_path / "run" / "metrics-rank0.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    metric_rows = [r for r in rows if "nan" in r]
    assert [r["step"] for r in metric_rows] == [0, 1]
    # The documented handling: Python numbers, lists, NaN/±inf as the strings "NaN",
    # "Infinity", "-Infinity" (strict JSON), int64 exact, bigger ints as floats, every key as
    # it was logged.
    strings = {"nan": "NaN", "inf": "Infinity", "neg_inf": "-Infinity", "tensor_nan": "NaN",
               "tensor_nan_vec": ["NaN", "NaN"]}  # fmt: skip
    want = {**AS_PYTHON, "big_int": float(2**70), **strings}
    for row in metric_rows:
        for key, value in want.items():
            assert same(row[key], value), (key, row[key])
    assert all(t in path.read_text() for t in ('"nan": "NaN"', '"inf": "Infinity"'))
    frame = pd.read_json(path, lines=True)  # the whole file reads: no "Value is too big"
    assert list(frame["np_int64"].dropna()) == [7, 7]
    assert frame["inf"].dropna().tolist() == [INF, INF]
    text = (tmp_path / "run" / "logs-rank0.txt").read_text()
    assert "[metric][batch=0]: np_float32: 0.5000" in text and "loss/🔥: 1.0000" in text


def test_tensorboard_holds_every_number_as_a_float32_scalar(tmp_path, caplog):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from obsbus.loggers.tensorboard_logger import TensorboardLogger

    warnings = log_odd_values(tmp_path, TensorboardLogger(log_env=False, log_git=False), caplog)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    written = {tag: [(e.step, e.value) for e in events.Scalars(tag)]
               for tag in events.Tags()["scalars"]}  # fmt: skip
    numbers = {k: float(np.float32(v)) for k, v in AS_PYTHON.items() if k not in LISTS}
    assert set(written) == set(numbers)  # lists are skipped; every key as it was logged
    for key, want in numbers.items():
        assert [s for s, _ in written[key]] == [0, 1], key
        assert all(same(v, want) for _, v in written[key]), (key, written[key])
    skipped = [w for w in warnings if "writes numbers only" in w and "value(s) of" not in w]
    assert sorted(LISTS) == sorted(k for k in LISTS if any(repr(k) in w for w in skipped))
    assert len(skipped) == len(LISTS)  # once per key, not per step


def test_mlflow_sqlite_store_holds_numbers_under_names_it_takes(tmp_path, caplog):
    from mlflow import MlflowClient

    from obsbus.loggers.mlflow_logger import MLFlowLogger

    mlf = MLFlowLogger(log_env=False, log_git=False)
    warnings = log_odd_values(tmp_path, mlf, caplog)
    client = MlflowClient(mlf.resolved_tracking_uri(tmp_path / "run"))
    run = client.get_run(mlf.run_id)
    # Renamed keys are warned about once each; '' and '.' would both be '_': kept apart.
    renamed = [w for w in warnings if "as '" in w and "MLFlowLogger logs metric" in w]
    assert len(renamed) == 5  # 🔥, /lead, 300 characters, '', '.'
    names = {key: name for key in AS_PYTHON for name in run.data.metrics
             if any(f"metric {key!r} as {name!r}" in w for w in renamed)}  # fmt: skip
    assert names["loss/🔥"] == "loss/_" and names["/lead"] == "lead" and names[""] == "_"
    assert names[LONG_KEY] == "k" * 250 and names["."].startswith("_")
    history = {}
    for key in AS_PYTHON:
        if key not in LISTS:
            points = client.get_metric_history(mlf.run_id, names.get(key, key))
            history[key] = sorted((m.step, m.value) for m in points)
    # Numbers as floats; MLflow's SQL store keeps NaN and clamps ±inf to ±1.797e308.
    want = {k: float(v) for k, v in AS_PYTHON.items() if k not in LISTS}
    want |= {"inf": sys.float_info.max, "neg_inf": -sys.float_info.max}
    for key, value in want.items():
        assert [s for s, _ in history[key]] == [0, 1], key
        assert all(same(v, value) for _, v in history[key]), (key, history[key])
    assert set(run.data.metrics) == {names.get(k, k) for k in want}  # lists are skipped
    assert mlf.skipped_values == 2 * len(LISTS)
    assert run.data.params["np_lr"] == "0.5" and run.data.params["big"] == str(2**70)


# ----------------------------------------------------- offline trackers
def equal(a: Any, b: Any) -> bool:
    """Equal as numbers (a tracker may store 6.0 as 6), NaN equal to NaN."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_wandb_offline_keeps_every_value_and_key(tmp_path, caplog):
    from obsbus.loggers.wandb_logger import WandBLogger

    from ..loggers.test_wandb_logger import the_run

    wb = WandBLogger(log_env=False, log_git=False, log_artifacts=False)
    warnings = log_odd_values(tmp_path, wb, caplog)
    run = the_run(tmp_path / "run")
    # Its JSON turns ints beyond int64 to floats; wandb drops the key '': obsbus skips it,
    # warned and counted.
    want = {k: v for k, v in AS_PYTHON.items() if k != ""} | {"big_int": float(2**70)}
    assert run.series("") == ([], [])
    assert [w for w in warnings if w.startswith("obsbus: WandBLogger could not write ''")]
    for key, value in want.items():
        steps, values = run.series(key)
        assert steps == [0, 1] and all(equal(v, value) for v in values), (key, values)
    assert all(type(v) is float for v in run.series("big_int")[1])
    assert all(type(v) is int for v in run.series("int64_min")[1])
    assert run.exit_code == 0


def test_comet_offline_keeps_numbers_and_skips_lists(tmp_path, caplog):
    from obsbus.loggers.comet_ml_logger import CometMLLogger

    from ..loggers.test_comet_ml_logger import Zip

    comet = CometMLLogger(online=False, log_env=False, log_git=False)
    warnings = log_odd_values(tmp_path, comet, caplog)
    metrics = Zip(tmp_path / "run" / "comet").metrics()
    # Comet cuts names to 100 characters, marked ' [truncated]' (its own warning).
    want = {k: v for k, v in AS_PYTHON.items() if k not in LISTS and k != LONG_KEY}
    want |= {"k" * 88 + " [truncated]": 3.0}
    for key, value in want.items():
        assert [s for s, _ in metrics[key]] == [0, 1], key
        assert all(equal(float(v), float(value)) for _, v in metrics[key]), (key, metrics[key])
    assert not LISTS & set(metrics)
    for key in ("big_int", "int64_min"):  # exact ints in its JSON
        assert [v for _, v in metrics[key]] == [AS_PYTHON[key]] * 2, metrics[key]
        assert all(type(v) is int for _, v in metrics[key])
    skipped = [w for w in warnings if "logs numbers only" in w and "value(s) of" not in w]
    assert sorted(k for k in LISTS if any(repr(k) in w for w in skipped)) == sorted(LISTS)
    assert len(skipped) == len(LISTS)  # once per key


@pytest.mark.filterwarnings(r"ignore:Info \(NVML\)")
def test_neptune_offline_keeps_finite_numbers(tmp_path, caplog, monkeypatch):
    from obsbus.loggers.neptune_logger import NeptuneLogger

    from ..loggers.test_neptune_logger import offline_runs

    monkeypatch.setenv("NEPTUNE_DATA_DIRECTORY", str(tmp_path / "neptune"))
    nep = NeptuneLogger(mode="offline", log_env=False, log_git=False)
    warnings = log_odd_values(tmp_path, nep, caplog)
    (run,) = offline_runs(tmp_path / "neptune")
    # Neptune series take finite numbers only; its paths drop empty parts ('/lead' -> 'lead'),
    # and '' would be the 'training' namespace itself: it can't be logged (warned).
    kept = {
        k: v
        for k, v in AS_PYTHON.items()
        if k not in LISTS and k != "" and not (isinstance(v, float) and not math.isfinite(v))
    }
    kept = {("lead" if k == "/lead" else k): v for k, v in kept.items()}  # fmt: skip
    for key, value in kept.items():
        steps, values = run.series(f"training/{key}")
        assert steps == [0, 1] and all(equal(v, float(value)) for v in values), (key, values)
    skipped = {"nan", "inf", "neg_inf", "tensor_nan", *LISTS}
    assert not [k for k in skipped if run.series(f"training/{k}")[0]]
    warnings = [w for w in warnings if "value(s) of" not in w]  # the close summary
    assert len([w for w in warnings if "non-finite" in w]) == 4  # once per key
    assert len([w for w in warnings if "are not numbers or strings" in w]) == len(LISTS)
    assert any("could not log 'training'" in w for w in warnings)  # the key ''
