"""Contracts every exported callback and destination keeps, found automatically.

A plug-in added to ``obsbus.callbacks.__all__`` or ``obsbus.loggers.__all__``
is covered here without editing this file; one that needs constructor
arguments gets a row in ``CONSTRUCTOR_KWARGS``.
"""

from __future__ import annotations

import inspect
import pickle
import warnings

import pytest
import torch.nn.functional as F

import obsbus.callbacks
import obsbus.loggers
import obsbus.profiler
from obsbus import Callback, Engine, Logger, LoggerDestination, Run, State, Trainer
from obsbus._hook_names import near_misses

from .helpers import regression_data, tiny_model

#: Arguments for plug-ins that can't be built with none (name -> kwargs factory).
CONSTRUCTOR_KWARGS: dict[str, dict] = {
    "ThresholdStopper": {"monitor": "loss", "dataloader_label": "eval", "threshold": 0.0},
    # Trackers: their offline modes, never the network.
    "CometMLLogger": {"online": False},
    "NeptuneLogger": {"mode": "debug"},
    "WandBLogger": {"mode": "offline"},
    "RemoteUploaderDownloader": {"bucket_uri": "memory://contract-bucket"},
    # Alerts: the URL comes from the environment (a refused local port, set below).
    "SlackLogger": {"close_timeout": 0.5, "max_attempts": 1},
    "WebhookLogger": {"close_timeout": 0.5, "max_attempts": 1},
}


@pytest.fixture(autouse=True)
def _trackers_stay_offline_and_in_tmp(tmp_path, monkeypatch):
    for var, sub in (
        ("WANDB_DIR", "wandb"),
        ("WANDB_CACHE_DIR", "wandb-cache"),
        ("WANDB_CONFIG_DIR", "wandb-config"),
        ("WANDB_DATA_DIR", "wandb-data"),
        ("MPLCONFIGDIR", "mpl"),
        ("NEPTUNE_DATA_DIRECTORY", "neptune"),
        ("COMET_CONFIG", "comet.config"),
    ):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    # MLflow's file store opens in well under a second; a new SQLite store migrates for ~10 s.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("DO_NOT_TRACK", "1")
    monkeypatch.setenv("COMET_DISABLE_AUTO_LOGGING", "1")
    monkeypatch.setenv("COMET_ERROR_TRACKING_ENABLE", "false")
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "http://127.0.0.1:9/hooks/contract")
    monkeypatch.setenv("OBSBUS_WEBHOOK_URL", "http://127.0.0.1:9/hooks/contract")


def exported_plugins():
    found = []
    for module in (obsbus.callbacks, obsbus.loggers):
        for name in module.__all__:
            obj = getattr(module, name)
            # obsbus.loggers re-exports the base class, as composer.loggers does
            if inspect.isclass(obj) and issubclass(obj, Callback) and obj is not LoggerDestination:
                found.append(obj)
    return found


PLUGINS = exported_plugins()


def build(cls):
    return cls(**CONSTRUCTOR_KWARGS.get(cls.__name__, {}))


def split(plugin):
    return ([], [plugin]) if isinstance(plugin, LoggerDestination) else ([plugin], [])


def test_discovery_finds_the_first_destinations():
    names = {cls.__name__ for cls in PLUGINS}
    assert {"InMemoryLogger", "ConsoleLogger"} <= names


@pytest.mark.parametrize("cls", PLUGINS, ids=lambda c: c.__name__)
def test_exported_in_sorted_all(cls):
    module = obsbus.loggers if issubclass(cls, LoggerDestination) else obsbus.callbacks
    assert module.__all__ == sorted(module.__all__)


@pytest.mark.parametrize("cls", PLUGINS, ids=lambda c: c.__name__)
def test_two_fits_in_a_row_and_close_twice(cls):
    plugin = build(cls)
    callbacks, loggers = split(plugin)
    trainer = Trainer(
        tiny_model(),
        regression_data(3),
        "1ep",
        loss_fn=F.mse_loss,
        eval_dataloader=regression_data(2, seed=1),
        callbacks=callbacks,
        loggers=loggers,
        device="cpu",
        strict=True,
    )
    trainer.fit()
    trainer.fit(duration="2ba")
    assert trainer.state.timestamp.batch == "5ba"
    trainer.close()
    trainer.close()


@pytest.mark.parametrize("cls", PLUGINS, ids=lambda c: c.__name__)
def test_works_under_run(cls):
    plugin = build(cls)
    callbacks, loggers = split(plugin)
    model = tiny_model()
    with Run(
        model=model, max_duration="3ba", callbacks=callbacks, loggers=loggers, strict=True
    ) as run:
        for x, y in run.train(regression_data(3)):
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
    assert run.engine.closed


@pytest.mark.parametrize("cls", PLUGINS, ids=lambda c: c.__name__)
def test_state_dict_pickles_and_loads(cls):
    plugin = build(cls)
    state = pickle.loads(pickle.dumps(plugin.state_dict()))
    build(cls).load_state_dict(state)


@pytest.mark.parametrize("cls", PLUGINS, ids=lambda c: c.__name__)
def test_documented_with_an_example(cls):
    assert cls.__doc__ and "Example" in cls.__doc__


PROFILER_PLUGINS = [
    getattr(obsbus.profiler, name)
    for name in obsbus.profiler.__all__
    if inspect.isclass(getattr(obsbus.profiler, name))
    and issubclass(getattr(obsbus.profiler, name), Callback)
]


def test_discovery_skips_the_base_classes():
    assert LoggerDestination not in PLUGINS and Callback not in PLUGINS
    assert {cls.__name__ for cls in PROFILER_PLUGINS} >= {"JSONTraceHandler", "TraceHandler"}


@pytest.mark.parametrize("cls", PLUGINS + PROFILER_PLUGINS, ids=lambda c: c.__name__)
def test_no_method_looks_like_a_misspelt_hook(cls):
    """obsbus's own plug-ins never trip the near-miss warning (issue 14: no false positives)."""
    assert near_misses(cls) == ()
    if cls in PLUGINS:
        plugin = build(cls)
        callbacks, loggers = split(plugin)
        state = State(run_name="contract")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine = Engine(state, Logger(state, loggers), callbacks)
        engine.close()
        assert [str(w.message) for w in caught if "is not an obsbus" in str(w.message)] == []
