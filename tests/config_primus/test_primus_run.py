"""from_primus's output is real: its plug-ins build from the obsbus classes and run 4 batches."""

from __future__ import annotations

import inspect
import json
import warnings

import pytest

from obsbus import Run
from obsbus._primus import from_primus
from obsbus.callbacks import (
    LRMonitor,
    MemoryMonitor,
    OOMObserver,
    OptimizerMonitor,
    RocmSmiMonitor,
    RuntimeEstimator,
    SpeedMonitor,
)
from obsbus.callbacks.memory_snapshot import MemorySnapshot
from obsbus.errors import ObsbusWarning
from obsbus.loggers import LoguruLogger, MLFlowLogger, TensorboardLogger, WandBLogger
from obsbus.profiler import JSONTraceHandler, Profiler, cyclic_schedule, step_window_schedule

pytest.importorskip("torch")
pytest.importorskip("tensorboard")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")

_CLASSES = {
    "lr_monitor": LRMonitor, "memory_monitor": MemoryMonitor, "speed_monitor": SpeedMonitor,
    "runtime_estimator": RuntimeEstimator, "optimizer_monitor": OptimizerMonitor,
    "rocm_smi_monitor": RocmSmiMonitor, "memory_snapshot": MemorySnapshot,
    "oom_observer": OOMObserver, "loguru": LoguruLogger, "tensorboard": TensorboardLogger,
    "wandb": WandBLogger, "mlflow": MLFlowLogger, "step_window": step_window_schedule,
    "cyclic": cyclic_schedule, "json_trace_handler": JSONTraceHandler,
}  # fmt: skip


def _construct(cfg):
    """The plug-ins of a generic config, each from its class, without obsbus.config."""
    default = cfg.get("log_interval")

    def make(name, args):
        args = dict(args)
        params = inspect.signature(_CLASSES[name]).parameters
        # RocmSmiMonitor's log_interval means "probe every interval", not a default to fill.
        if (default is not None and "log_interval" in params and "log_interval" not in args
                and name != "rocm_smi_monitor"):  # fmt: skip
            args["log_interval"] = default
        return _CLASSES[name](**args)

    callbacks = [make(n, a) for n, a in cfg["callbacks"].items()]
    loggers = [make(n, a) for n, a in cfg["loggers"].items()]
    profiler = None
    if "profiler" in cfg:
        section = dict(cfg["profiler"])
        [(name, args)] = section.pop("schedule").items()
        handlers = [_CLASSES[n](**a) for n, a in section.pop("trace_handlers").items()]
        profiler = Profiler(_CLASSES[name](**args), handlers, **section)
    return callbacks, loggers, profiler


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """Trackers offline, their files inside tmp_path."""
    for var in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_NAME", "MLFLOW_TRACKING_URI",
                "MLFLOW_EXPERIMENT_NAME"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def _train(run, torch):
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run.state.model, run.state.optimizers = model, [optimizer]
    for batch in run.train([torch.ones(3, 2)] * 4):
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        run.state.loss = loss.detach()


def test_megatron_config_builds_and_runs_four_batches(offline):
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = {
        "work_group": "amd", "user_name": "ada", "exp_name": "tiny",
        "workspace": str(offline / "output"),
        "modules": {"pre_trainer": {"framework": "megatron", "overrides": {
            "log_interval": 2, "log_throughput": True, "log_progress": True,
            "log_params_norm": True, "log_memory_to_tensorboard": True,
            "use_rocm_mem_info_iters": [1], "disable_tensorboard": False, "disable_wandb": False,
            "disable_mlflow": False, "mlflow_upload_traces": True, "profile": True,
            "profile_step_start": 1, "profile_step_end": 3,
        }}},
    }  # fmt: skip
    out = from_primus(cfg)
    callbacks, loggers, profiler = _construct(out)
    assert out["run_folder"] == f"{offline}/output/amd/ada/tiny"
    assert {type(p).__name__ for p in callbacks + loggers} == {
        "LRMonitor", "MemoryMonitor", "SpeedMonitor", "RuntimeEstimator", "OptimizerMonitor",
        "RocmSmiMonitor", "LoguruLogger", "TensorboardLogger", "WandBLogger", "MLFlowLogger",
    }  # fmt: skip
    mlflow = next(p for p in loggers if isinstance(p, MLFlowLogger))
    assert mlflow.logging_rank == "last"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObsbusWarning)  # no rocm-smi, no CUDA here
        with Run(max_duration="4ba", run_name=out["run_name"], run_folder=out["run_folder"],
                 callbacks=callbacks, loggers=loggers, profiler=profiler) as run:  # fmt: skip
            _train(run, torch)
    folder = offline / "output/amd/ada/tiny"
    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss/train/total")] == [1, 2, 3, 4]
    assert any(tag.startswith("lr-") for tag in events.Tags()["scalars"])
    assert list((folder / "wandb").rglob("*.wandb")), "wandb wrote no offline run"
    assert (folder / "mlflow" / "mlflow.db").is_file()
    traces = list((folder / "traces").glob("*.json"))
    assert traces, "the step-window profiler wrote no trace"
    names = {e.get("name") for t in traces for e in json.loads(t.read_text())["traceEvents"]}
    assert "event/batch" in names


def test_torchtitan_config_builds_and_runs_four_batches(offline):
    import torch

    cfg = {
        "metrics": {"log_freq": 1, "enable_tensorboard": True},
        "profiling": {"enable_profiling": True, "profile_freq": 4},
    }
    out = from_primus(cfg)
    callbacks, loggers, profiler = _construct(out)
    folder = offline / "titan"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObsbusWarning)
        with Run(max_duration="4ba", run_folder=folder, callbacks=callbacks, loggers=loggers,
                 profiler=profiler) as run:  # fmt: skip
            _train(run, torch)
    assert list((folder / "tb").rglob("events.out.tfevents.*"))
    assert list((folder / "profile_traces").glob("*.pt.trace.json*")), "no torch.profiler trace"


def test_end_to_end_through_config_build_with_the_primus_dialect(offline):
    import torch

    from obsbus import config

    cfg = {
        "exp_name": "e2e", "work_group": "amd", "user_name": "ada",
        "workspace": str(offline / "ws"),
        "log_interval": 2, "log_throughput": True, "use_rocm_mem_info": True,
        "disable_tensorboard": False, "tensorboard_queue_size": 50,
        "disable_mlflow": False, "profile": True, "profile_step_start": 1, "profile_step_end": 2,
        "sink_level": "WARNING", "enable_one_logger": True,
    }  # fmt: skip
    with pytest.warns(ObsbusWarning, match=r"enable_one_logger \(NVIDIA One-Logger"):
        built = config.build(cfg, dialect="primus")
    by_type = {type(p).__name__: p for p in built.callbacks + built.loggers}
    assert sorted(by_type) == ["LRMonitor", "LoguruLogger", "MLFlowLogger", "RocmSmiMonitor",
                               "SpeedMonitor", "TensorboardLogger"]  # fmt: skip
    assert by_type["SpeedMonitor"].window_size == 10
    assert by_type["TensorboardLogger"].queue_size == 50
    assert by_type["MLFlowLogger"].logging_rank == "last"
    assert by_type["MLFlowLogger"].experiment_name == "amd_ada"
    assert by_type["RocmSmiMonitor"].log_interval is not None
    assert built.run_name == "e2e" and built.run_folder == f"{offline}/ws/amd/ada/e2e"
    assert built.logging == {"sink_level": "WARNING", "file_sink_level": "WARNING",
                             "stderr_sink_level": "WARNING", "team": "amd", "user": "ada",
                             "exp": "e2e"}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObsbusWarning)
        with Run(max_duration="4ba", **built.kwargs()) as run:
            _train(run, torch)
    assert list((offline / "ws/amd/ada/e2e/traces").glob("*.json"))


def test_config_build_reports_a_bad_primus_value_as_one_error():
    from obsbus import config

    with pytest.raises(config.ConfigError, match=r"log_interval: -1 is not an integer >= 1"):
        config.build({"log_interval": -1}, dialect="primus")
