"""Plug-ins by name: ``speed_monitor``, ``tensorboard``, ``cyclic``, ``json_trace_handler``...

Every public callback, logger destination, profiler schedule and trace
handler has a snake_case name (Composer's and llm-foundry's). The table holds
import paths, so nothing is imported until a name is built. Third-party
packages add their own through entry points in the groups ``obsbus.callbacks``
and ``obsbus.loggers``::

    # pyproject.toml of the package "acme-obs"
    [project.entry-points."obsbus.callbacks"]
    acme_monitor = "acme_obs.monitor:AcmeMonitor"

A built-in name wins over an entry point of the same name (which is
reported once with a warning). Entry points are read once per ``sys.path``.

Example:
    >>> from obsbus.registry import build_callback, names
    >>> build_callback("speed_monitor", window_size=10).window_size
    10
    >>> "tensorboard" in names("loggers")
    True
    >>> build_callback("speed_monitr")
    Traceback (most recent call last):
    ...
    ValueError: unknown callback 'speed_monitr'; did you mean 'speed_monitor'? ...
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata as metadata
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from obsbus._check import check_choice, type_as_value_error
from obsbus.errors import ObsbusWarning

if TYPE_CHECKING:
    from obsbus.callback import Callback
    from obsbus.logger import LoggerDestination

__all__ = [
    "ENTRY_POINT_GROUPS",
    "KINDS",
    "Kind",
    "build",
    "build_callback",
    "build_logger",
    "import_path",
    "load",
    "name_of",
    "names",
    "suggest",
]

Kind = Literal["callbacks", "loggers", "schedules", "trace_handlers"]
KINDS: tuple[Kind, ...] = ("callbacks", "loggers", "schedules", "trace_handlers")
#: The entry-point group each kind's third-party plug-ins are found in.
ENTRY_POINT_GROUPS: dict[Kind, str] = {"callbacks": "obsbus.callbacks", "loggers": "obsbus.loggers"}
_SINGULAR = {
    "callbacks": "callback",
    "loggers": "logger",
    "schedules": "schedule",
    "trace_handlers": "trace handler",
}

_C = "obsbus.callbacks."
_L = "obsbus.loggers."
_BUILTIN: dict[Kind, dict[str, str]] = {
    "callbacks": {
        "early_stopper": _C + "early_stopper:EarlyStopper",
        "hang_watchdog": _C + "hang_watchdog:HangWatchdog",
        "loss_spike_detector": _C + "loss_spike_detector:LossSpikeDetector",
        "lr_monitor": _C + "lr_monitor:LRMonitor",
        "memory_monitor": _C + "memory_monitor:MemoryMonitor",
        "memory_snapshot": _C + "memory_snapshot:MemorySnapshot",
        "nan_monitor": _C + "nan_monitor:NaNMonitor",
        "oom_observer": _C + "oom_observer:OOMObserver",
        "optimizer_monitor": _C + "optimizer_monitor:OptimizerMonitor",
        "rocm_smi_monitor": _C + "rocm_smi_monitor:RocmSmiMonitor",
        "runtime_estimator": _C + "runtime_estimator:RuntimeEstimator",
        "speed_monitor": _C + "speed_monitor:SpeedMonitor",
        "system_metrics_monitor": _C + "system_metrics_monitor:SystemMetricsMonitor",
        "threshold_stopper": _C + "threshold_stopper:ThresholdStopper",
    },
    "loggers": {
        "comet_ml": _L + "comet_ml_logger:CometMLLogger",
        "console": _L + "console_logger:ConsoleLogger",
        "file": _L + "file_logger:FileLogger",
        "in_memory": _L + "in_memory_logger:InMemoryLogger",
        "loguru": _L + "loguru_logger:LoguruLogger",
        "mlflow": _L + "mlflow_logger:MLFlowLogger",
        "neptune": _L + "neptune_logger:NeptuneLogger",
        "progress_bar": _L + "progress_bar_logger:ProgressBarLogger",
        "remote_uploader_downloader": _L + "remote_uploader_downloader:RemoteUploaderDownloader",
        "run_report": _L + "run_report:RunReport",
        "slack": _L + "alerts:SlackLogger",
        "tensorboard": _L + "tensorboard_logger:TensorboardLogger",
        "wandb": _L + "wandb_logger:WandBLogger",
        "webhook": _L + "alerts:WebhookLogger",
    },
    "schedules": {
        "cyclic": "obsbus.profiler.schedule:cyclic_schedule",
        "step_window": "obsbus.profiler.schedule:step_window_schedule",
    },
    "trace_handlers": {
        "json_trace_handler": "obsbus.profiler.json_trace_handler:JSONTraceHandler",
    },
}
_SHADOWED: set[tuple[Kind, str]] = set()


def _plugin_kind(kind: str) -> Kind:
    with type_as_value_error():  # a wrong type has always been a ValueError here
        return check_choice("obsbus.registry", "kind", kind, KINDS)  # type: ignore[return-value]


def _entry_points(kind: Kind) -> dict[str, str]:
    # Scanning the installed distributions takes milliseconds and every run's resolved.yaml
    # names its plug-ins: read once per sys.path (a folder added to it is scanned again).
    return dict(_scan(kind, tuple(sys.path)))


@functools.lru_cache(maxsize=16)
def _scan(kind: Kind, _path: tuple[str, ...]) -> dict[str, str]:
    group = ENTRY_POINT_GROUPS.get(kind)
    if group is None:
        return {}
    found: dict[str, str] = {}
    for ep in metadata.entry_points(group=group):
        if ep.name in _BUILTIN[kind]:
            if (kind, ep.name) not in _SHADOWED:
                _SHADOWED.add((kind, ep.name))
                warnings.warn(
                    f"the entry point {ep.name!r} = {ep.value!r} in group {group!r} is ignored: "
                    f"{ep.name!r} is a built-in {_SINGULAR[kind]}. To fix, rename the entry point.",
                    ObsbusWarning,
                    stacklevel=4,
                )
            continue
        found.setdefault(ep.name, ep.value.split("[", 1)[0].strip())  # "mod:Class [extra]"
    return found


def _table(kind: Kind) -> dict[str, str]:
    return {**_entry_points(kind), **_BUILTIN[kind]}


def names(kind: Kind) -> list[str]:
    """The registered names of ``kind`` (built-in and entry points), sorted."""
    return sorted(_table(_plugin_kind(kind)))


def import_path(kind: Kind, name: str) -> str | None:
    """``"module:attribute"`` registered for ``name``, or ``None``."""
    return _table(_plugin_kind(kind)).get(name)


def suggest(name: str, choices: list[str]) -> str:
    """``"; did you mean 'x'?"`` for the nearest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _unknown(kind: Kind, name: object) -> ValueError:
    known = names(kind)
    hint = suggest(name, known) if isinstance(name, str) else ""
    return ValueError(
        f"unknown {_SINGULAR[kind]} {name!r}{hint or '.'} Accepted: {', '.join(known)}. "
        "(`obsbus config keys` lists them with their arguments.)"
    )


def load(kind: Kind, name: str) -> Callable[..., Any]:
    """Import what ``name`` stands for (a class or a function); ``ValueError`` if unknown."""
    path = import_path(kind, name) if isinstance(name, str) else None
    if path is None:
        raise _unknown(kind, name)
    module, _, attr = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"the {_SINGULAR[kind]} {name!r} ({path}) is not callable.")
    return target  # type: ignore[no-any-return]


def name_of(kind: Kind, qualified: str) -> str | None:
    """The registered name of ``"module.QualName"`` (a class or function), or ``None``.

    Compared by import path, so nothing is imported. Example:
        >>> name_of("callbacks", "obsbus.callbacks.speed_monitor.SpeedMonitor")
        'speed_monitor'
    """
    for name, path in _table(_plugin_kind(kind)).items():
        module, _, attr = path.partition(":")
        if f"{module}.{attr}" == qualified:
            return name
    return None


def build(kind: Kind, name: str, **kwargs: Any) -> Any:
    """Build the plug-in ``name`` of ``kind`` with ``kwargs``."""
    return load(kind, name)(**kwargs)


def _check_name(owner: str, kind: Kind, name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(
            f"{owner} name must be a registered name (a str such as "
            f"{'speed_monitor' if kind == 'callbacks' else 'tensorboard'!r}), got {name!r}. "
            "`obsbus config keys` lists them."
        )


def build_callback(name: str, **kwargs: Any) -> Callback:
    """Build the callback registered as ``name`` (``"speed_monitor"``) with ``kwargs``."""
    from obsbus.callback import Callback

    _check_name("build_callback", "callbacks", name)
    built = build("callbacks", name, **kwargs)
    if not isinstance(built, Callback):
        raise TypeError(f"the callback {name!r} built {built!r}, which is not a Callback.")
    return built


def build_logger(name: str, **kwargs: Any) -> LoggerDestination:
    """Build the logger destination registered as ``name`` (``"tensorboard"``) with ``kwargs``."""
    from obsbus.logger import LoggerDestination

    _check_name("build_logger", "loggers", name)
    built = build("loggers", name, **kwargs)
    if not isinstance(built, LoggerDestination):
        raise TypeError(f"the logger {name!r} built {built!r}, which is not a LoggerDestination.")
    return built
