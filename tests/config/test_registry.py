"""The registry: complete (found from the packages' __all__), every name builds, entry points."""

from __future__ import annotations

import inspect
import warnings

import pytest

import obsbus
import obsbus.callbacks
import obsbus.loggers
import obsbus.profiler
from obsbus import Callback, LoggerDestination, config, registry
from obsbus._init_args import init_args
from obsbus.errors import ObsbusWarning
from obsbus.profiler import TraceHandler

# Arguments a plug-in can't do without (or that keep a tracker offline, in the test's folder).
MINIMAL = {
    "threshold_stopper": {"monitor": "loss", "dataloader_label": "eval", "threshold": 0.5},
    "remote_uploader_downloader": {"bucket_uri": "file:///bucket"},
    "wandb": {"mode": "offline", "save_dir": "wandb-here"},
    "mlflow": {"tracking_uri": "sqlite:///mlflow-here.db"},
    "comet_ml": {"online": False, "offline_directory": "comet-here"},
    "neptune": {"mode": "debug"},
}
# Alert destinations read their URL from the environment only.
ENV = {"slack": ("SLACK_WEBHOOK_URL",), "webhook": ("OBSBUS_WEBHOOK_URL",)}
TRACKERS = {"wandb": "wandb", "mlflow": "mlflow", "comet_ml": "comet_ml", "neptune": "neptune",
            "tensorboard": "tensorboard"}  # fmt: skip


def _classes(module, base):
    """The exported plug-ins: subclasses of ``base``, less the bases of other exported ones
    (LoggerDestination, TraceHandler, a tracker's base class), which are for subclassing."""
    found = [getattr(module, n) for n in module.__all__]
    found = [c for c in found if inspect.isclass(c) and issubclass(c, base)]
    return {f"{c.__module__}.{c.__name__}" for c in found
            if not any(o is not c and issubclass(o, c) for o in found)}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "module", "base"),
    [
        ("callbacks", obsbus.callbacks, Callback),
        ("loggers", obsbus.loggers, LoggerDestination),
        ("trace_handlers", obsbus.profiler, TraceHandler),
    ],
    ids=["callbacks", "loggers", "trace_handlers"],
)
def test_every_exported_plugin_has_a_name(kind, module, base):
    exported = _classes(module, base)
    named = {registry.import_path(kind, n).replace(":", ".") for n in registry.names(kind)}
    assert exported - named == set(), "add these to obsbus/registry.py"
    for name in registry.names(kind):  # a registered one may not be exported yet
        assert name == name.lower() and " " not in name
        target = registry.load(kind, name)
        assert inspect.isclass(target) and issubclass(target, base)
        assert target not in (LoggerDestination, TraceHandler)


def test_schedules_are_the_profilers():
    assert {registry.load("schedules", n) for n in registry.names("schedules")} == {
        obsbus.profiler.cyclic_schedule, obsbus.profiler.step_window_schedule}  # fmt: skip


ALL = [(kind, name) for kind in ("callbacks", "loggers") for name in registry.names(kind)]


@pytest.mark.parametrize(("kind", "name"), ALL, ids=[f"{k}.{n}" for k, n in ALL])
def test_every_name_builds_from_a_minimal_config(kind, name, monkeypatch):
    if name in TRACKERS:
        pytest.importorskip(TRACKERS[name])
    for var in ENV.get(name, ()):
        monkeypatch.setenv(var, "http://127.0.0.1:9/hook")  # never reached: nothing is sent
    args = MINIMAL.get(name, {})
    built = config.build({kind: {name: args}})
    (plugin,) = getattr(built, kind)
    assert type(plugin) is registry.load(kind, name)
    recorded = init_args(plugin)
    assert recorded is not None
    for key, value in args.items():
        assert recorded[key] == value
    again = (obsbus.build_callback if kind == "callbacks" else obsbus.build_logger)(name, **args)
    assert type(again) is type(plugin)


def test_build_callback_and_build_logger_check_the_kind():
    with pytest.raises(ValueError, match=r"unknown callback 'tensorboard'\. Accepted: early_"):
        obsbus.build_callback("tensorboard")
    with pytest.raises(
        ValueError, match=r"unknown logger 'tensorbord'; did you mean 'tensorboard'"
    ):
        obsbus.build_logger("tensorbord")


def test_import_obsbus_stays_light():
    import subprocess
    import sys

    code = ("import sys, obsbus; obsbus.build_callback; "
            "print(sorted(m for m in ('torch', 'yaml', 'obsbus.config') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _distribution(tmp_path, monkeypatch, name="acme_monitor", target="acme_obs:AcmeMonitor"):
    """A real, tiny installed distribution on sys.path: a module, METADATA, entry_points.txt."""
    site = tmp_path / "site"
    (site / "acme_obs-1.0.dist-info").mkdir(parents=True)
    (site / "acme_obs.py").write_text(
        "from obsbus import Callback\n\n"
        "class AcmeMonitor(Callback):\n"
        '    """Counts what Acme counts.\n\n    Args:\n        every: batches between counts.\n    """\n\n'
        "    def __init__(self, every: int = 3, label: str = 'acme') -> None:\n"
        "        self.every, self.label = every, label\n"
    )
    (site / "acme_obs-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-obs\nVersion: 1.0\n"
    )
    (site / "acme_obs-1.0.dist-info" / "entry_points.txt").write_text(
        f"[obsbus.callbacks]\n{name} = {target}\n"
    )
    monkeypatch.syspath_prepend(str(site))
    return site


def test_an_entry_point_plugin_is_found_by_name(tmp_path, monkeypatch):
    assert "acme_monitor" not in registry.names("callbacks")
    _distribution(tmp_path, monkeypatch)
    assert "acme_monitor" in registry.names("callbacks")
    cfg = config.build({"callbacks": {"acme_monitor": {"every": 5}}})
    (monitor,) = cfg.callbacks
    assert type(monitor).__name__ == "AcmeMonitor" and monitor.every == 5
    with pytest.raises(config.ConfigError, match=r"acme_monitor\.evry: AcmeMonitor has no argument "
                                                  r"'evry'; did you mean 'every'\?"):  # fmt: skip
        config.build({"callbacks": {"acme_monitor": {"evry": 5}}})
    resolved = config.resolved_config(cfg.callbacks)
    assert resolved["callbacks"] == {"acme_monitor": {"every": 5, "label": "acme"}}


def test_an_entry_point_can_not_shadow_a_builtin(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_SHADOWED", set())
    _distribution(tmp_path, monkeypatch, name="speed_monitor")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = registry.names("callbacks")
    assert names.count("speed_monitor") == 1
    assert registry.load("callbacks", "speed_monitor") is obsbus.callbacks.SpeedMonitor
    (warning,) = [w for w in caught if issubclass(w.category, ObsbusWarning)]
    assert "'speed_monitor' = 'acme_obs:AcmeMonitor'" in str(warning.message)


def test_a_broken_entry_point_is_a_problem_with_its_path(tmp_path, monkeypatch):
    _distribution(tmp_path, monkeypatch, name="acme_gone", target="acme_obs:Gone [extra]")
    with pytest.raises(config.ConfigError) as info:
        config.build({"callbacks": {"acme_gone": {}, "lr_monitor": {"log_intervl": "1ba"}}})
    found = dict(info.value.problems)
    assert found["callbacks.acme_gone"].startswith("could not be imported: ")
    assert "Gone" in found["callbacks.acme_gone"] and "callbacks.lr_monitor.log_intervl" in found
    assert registry.import_path("callbacks", "acme_gone") == "acme_obs:Gone"
