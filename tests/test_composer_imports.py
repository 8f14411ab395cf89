"""Composer's import lines work with ``composer`` changed to ``obsbus`` (issue 14, item 1).

The data below is what Composer exports, read from mosaicml/composer at commit
6405188805a0054b4551ec49e4919c54c971d0e8: the ``__all__`` of ``composer/__init__.py``,
``composer/core/__init__.py``, ``composer/loggers/__init__.py``,
``composer/callbacks/__init__.py`` and ``composer/profiler/__init__.py``, and the
``from composer.<package>.<module> import <names>`` lines of those files (the module
each name is defined in). Every name obsbus deliberately lacks is in :data:`LACKING`,
with the reason and what a Composer user writes instead (the README's
"Coming from Composer" table); the tests fail when a name is neither there nor in
obsbus, and when a name in the table appears in obsbus (so the table stays true).
"""

from __future__ import annotations

import importlib

import pytest

import obsbus

COMPOSER_COMMIT = "6405188805a0054b4551ec49e4919c54c971d0e8"

#: ``__all__`` of each Composer package (order as in Composer's files).
COMPOSER_EXPORTS: dict[str, tuple[str, ...]] = {
    "composer": (
        "Algorithm",
        "Callback",
        "DataSpec",
        "Engine",
        "Evaluator",
        "Event",
        "State",
        "Time",
        "Timestamp",
        "TimeUnit",
        "Logger",
        "ComposerModel",
        "Trainer",
        "__version__",
    ),
    "composer.core": (
        "Algorithm",
        "AlgorithmPass",
        "Callback",
        "DataSpec",
        "Dataset",
        "ensure_data_spec",
        "Engine",
        "Trace",
        "Evaluator",
        "Event",
        "Precision",
        "get_precision_context",
        "Serializable",
        "State",
        "Time",
        "Timestamp",
        "TimeUnit",
        "ensure_time",
        "ensure_evaluator",
        "Batch",
        "JSON",
        "MemoryFormat",
        "TrainerMode",
    ),
    "composer.loggers": (
        "Logger",
        "LoggerDestination",
        "FileLogger",
        "InMemoryLogger",
        "NeptuneLogger",
        "ProgressBarLogger",
        "WandBLogger",
        "RemoteUploaderDownloader",
        "TensorboardLogger",
        "CometMLLogger",
        "ConsoleLogger",
        "MLFlowLogger",
        "MosaicMLLogger",
        "SlackLogger",
    ),
    "composer.callbacks": (
        "ActivationMonitor",
        "OptimizerMonitor",
        "LRMonitor",
        "MemoryMonitor",
        "NaNMonitor",
        "SpeedMonitor",
        "CheckpointSaver",
        "MLPerfCallback",
        "EarlyStopper",
        "ExportForInferenceCallback",
        "ThresholdStopper",
        "ImageVisualizer",
        "RuntimeEstimator",
        "SystemMetricsMonitor",
        "Generate",
        "FreeOutputs",
        "MemorySnapshot",
        "OOMObserver",
        "LoadCheckpoint",
    ),
    "composer.profiler": (
        "Marker",
        "Profiler",
        "ProfilerAction",
        "TraceHandler",
        "cyclic_schedule",
        "JSONTraceHandler",
        "SystemProfiler",
        "TorchProfiler",
    ),
}

#: Where Composer defines each name of the observability surface obsbus has
#: (``from composer.loggers.logger import Logger`` works in Composer too).
COMPOSER_MODULES: dict[str, tuple[str, ...]] = {
    "composer.core.callback": ("Callback",),
    "composer.core.engine": ("Engine",),
    "composer.core.event": ("Event",),
    "composer.core.state": ("State",),
    "composer.core.time": ("Time", "Timestamp", "TimeUnit", "ensure_time"),
    "composer.loggers.logger": ("Logger",),
    "composer.loggers.logger_destination": ("LoggerDestination",),
    "composer.loggers.cometml_logger": ("CometMLLogger",),
    "composer.loggers.console_logger": ("ConsoleLogger",),
    "composer.loggers.file_logger": ("FileLogger",),
    "composer.loggers.in_memory_logger": ("InMemoryLogger",),
    "composer.loggers.mlflow_logger": ("MLFlowLogger",),
    "composer.loggers.neptune_logger": ("NeptuneLogger",),
    "composer.loggers.progress_bar_logger": ("ProgressBarLogger",),
    "composer.loggers.remote_uploader_downloader": ("RemoteUploaderDownloader",),
    "composer.loggers.tensorboard_logger": ("TensorboardLogger",),
    "composer.loggers.wandb_logger": ("WandBLogger",),
    "composer.callbacks.early_stopper": ("EarlyStopper",),
    "composer.callbacks.lr_monitor": ("LRMonitor",),
    "composer.callbacks.memory_monitor": ("MemoryMonitor",),
    "composer.callbacks.memory_snapshot": ("MemorySnapshot",),
    "composer.callbacks.nan_monitor": ("NaNMonitor",),
    "composer.callbacks.oom_observer": ("OOMObserver",),
    "composer.callbacks.optimizer_monitor": ("OptimizerMonitor",),
    "composer.callbacks.runtime_estimator": ("RuntimeEstimator",),
    "composer.callbacks.speed_monitor": ("SpeedMonitor",),
    "composer.callbacks.system_metrics_monitor": ("SystemMetricsMonitor",),
    "composer.callbacks.threshold_stopper": ("ThresholdStopper",),
    "composer.profiler.json_trace_handler": ("JSONTraceHandler",),
    "composer.profiler.marker": ("Marker",),
    "composer.profiler.profiler": ("Profiler",),
    "composer.profiler.profiler_action": ("ProfilerAction",),
    "composer.profiler.profiler_schedule": ("cyclic_schedule",),
    "composer.profiler.system_profiler": ("SystemProfiler",),
    "composer.profiler.torch_profiler": ("TorchProfiler",),
    "composer.profiler.trace_handler": ("TraceHandler",),
}

_TRAINER = "obsbus observes a training loop and leaves the loop itself to your trainer"

#: ``composer.<package>.<Name>`` -> (why obsbus lacks it, what a Composer user writes instead).
LACKING: dict[str, tuple[str, str]] = {
    "composer.Algorithm": (_TRAINER, "apply the method in your model or loop"),
    "composer.DataSpec": (_TRAINER, "pass a dataloader; Trainer(num_tokens_fn=...) counts tokens"),
    "composer.Evaluator": (_TRAINER, "Trainer(eval_dataloader=...) or Run(eval_fn=...)"),
    "composer.ComposerModel": (
        "obsbus trains any torch.nn.Module",
        "a plain module plus Trainer(loss_fn=...)",
    ),
    "composer.core.Algorithm": (_TRAINER, "apply the method in your model or loop"),
    "composer.core.AlgorithmPass": (_TRAINER, "nothing: there are no algorithms to order"),
    "composer.core.DataSpec": (_TRAINER, "Trainer(num_tokens_fn=...) counts tokens"),
    "composer.core.Dataset": (_TRAINER, "torch.utils.data.Dataset"),
    "composer.core.ensure_data_spec": (_TRAINER, "pass the dataloader as it is"),
    "composer.core.Trace": (_TRAINER, "nothing: there are no algorithms to trace"),
    "composer.core.Evaluator": (_TRAINER, "Trainer(eval_dataloader=...) or Run(eval_fn=...)"),
    "composer.core.ensure_evaluator": (_TRAINER, "Trainer(eval_dataloader=...)"),
    "composer.core.Precision": (
        "precision is a string here, as Composer's enum values are",
        "Trainer(precision='amp_bf16') (a Composer Precision member is accepted too)",
    ),
    "composer.core.get_precision_context": (
        _TRAINER,
        "torch.autocast(device_type, dtype) in your loop",
    ),
    "composer.core.Serializable": (
        "plug-ins resume through Callback.state_dict/load_state_dict",
        "subclass Callback",
    ),
    "composer.core.Batch": (_TRAINER, "typing.Any"),
    "composer.core.JSON": ("a typing alias obsbus does not need", "typing.Any"),
    "composer.core.MemoryFormat": (_TRAINER, "torch.memory_format"),
    "composer.core.TrainerMode": (_TRAINER, "the events say the mode (eval_*, predict_*)"),
    "composer.loggers.MosaicMLLogger": (
        "logs to the MosaicML platform, which obsbus does not target",
        "a tracker destination (WandBLogger, MLFlowLogger, ...)",
    ),
    "composer.callbacks.ActivationMonitor": (
        "not ported: per-layer forward hooks cost every step",
        "a Callback that registers forward hooks at fit_start and logs at an interval",
    ),
    "composer.callbacks.CheckpointSaver": (
        "checkpointing is the trainer's job",
        "your trainer's checkpointing; obsbus fires "
        "batch_checkpoint/epoch_checkpoint where a save belongs",
    ),
    "composer.callbacks.LoadCheckpoint": (
        "checkpointing is the trainer's job",
        "load in your trainer; callbacks restore their own state at after_load (load_state_dict)",
    ),
    "composer.callbacks.MLPerfCallback": (
        "MLPerf submission logging is benchmark tooling",
        "the MLPerf logging library",
    ),
    "composer.callbacks.ExportForInferenceCallback": (
        "exporting a model is not observability",
        "torch.export / torch.onnx after fit",
    ),
    "composer.callbacks.ImageVisualizer": (
        "depends on Composer's image-model conventions",
        "logger.log_images(...) in a callback",
    ),
    "composer.callbacks.Generate": (
        "text generation is model code, not observability",
        "a Callback calling model.generate at batch_end",
    ),
    "composer.callbacks.FreeOutputs": (
        _TRAINER,
        "drop the outputs in your loop (state.outputs = None at after_loss)",
    ),
}

#: Composer module paths whose names obsbus has under another path.
LACKING_PATHS: dict[str, tuple[str, str]] = {}


def _obsbus_name(composer_name: str) -> str:
    return "obsbus" + composer_name.removeprefix("composer")


NAMES = [
    pytest.param(package, name, id=f"{package}.{name}")
    for package, names in COMPOSER_EXPORTS.items()
    for name in names
]


@pytest.mark.parametrize(("package", "name"), NAMES)
def test_every_composer_name_is_in_obsbus_or_in_the_table(package, name):
    module = importlib.import_module(_obsbus_name(package))
    key = f"{package}.{name}"
    if key in LACKING:
        assert not hasattr(module, name), f"{key} is in obsbus now: remove it from LACKING"
    else:
        assert hasattr(module, name), f"from {_obsbus_name(package)} import {name} fails"
        assert name in module.__all__ or name == "__version__"


def test_the_table_has_only_composer_names_each_with_a_reason_and_what_to_write():
    exported = {f"{p}.{n}" for p, names in COMPOSER_EXPORTS.items() for n in names}
    assert set(LACKING) <= exported
    for key, (reason, instead) in LACKING.items():
        assert reason and instead, key


@pytest.mark.parametrize("path", sorted(COMPOSER_MODULES))
def test_composer_module_paths(path):
    names = COMPOSER_MODULES[path]
    target = _obsbus_name(path)
    if path in LACKING_PATHS:
        try:
            importlib.import_module(target)
        except ModuleNotFoundError:
            pass
        else:
            pytest.fail(f"{target} exists now: remove {path!r} from LACKING_PATHS")
        _, instead = LACKING_PATHS[path]
        package = importlib.import_module(instead.split()[1])
        assert all(hasattr(package, n) for n in names), instead
        return
    module = importlib.import_module(target)
    package = importlib.import_module(target.rsplit(".", 1)[0])
    for name in names:
        assert getattr(module, name) is getattr(package, name)


def test_obsbus_core_is_obsbus_own_objects_and_exactly_composers_names_it_has():
    import obsbus.core
    import obsbus.time

    have = [n for n in COMPOSER_EXPORTS["composer.core"] if f"composer.core.{n}" not in LACKING]
    assert obsbus.core.__all__ == sorted(have)
    for name in obsbus.core.__all__:
        assert getattr(obsbus.core, name) is getattr(obsbus.time, name, getattr(obsbus, name, None))


def test_logger_and_destination_from_obsbus_loggers_as_in_composer():
    from obsbus.loggers import Logger, LoggerDestination

    assert Logger is obsbus.Logger and LoggerDestination is obsbus.LoggerDestination
