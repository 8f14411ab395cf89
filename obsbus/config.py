"""Build a run's observability from a YAML file or a dict, checked before anything starts.

The shape is llm-foundry's::

    run_name: my-run              # optional
    run_folder: runs/x            # optional
    log_interval: 10ba            # the default of every plug-in's log_interval
    callbacks: {speed_monitor: {window_size: 10}, lr_monitor: {}, memory_monitor: {}}
    loggers: {tensorboard: {}, file: {}, wandb: {project: p}}
    profiler:
      schedule: {cyclic: {skip_first: 1, wait: 0, warmup: 1, active: 2, repeat: 1}}
      trace_handlers: {json_trace_handler: {folder: traces}}
    logging: {sink_level: INFO}   # optional: setup_logging's arguments (RunConfig.setup_logging)

Each plug-in is named as in :mod:`obsbus.registry`; its value is its
arguments (``{}`` or nothing for the defaults), or a list of them for several
instances (``file: [{filename: a.txt}, {filename: b.txt}]``). ``log_interval``
fills the ``log_interval`` of every plug-in that has one (with a time as its
default) and doesn't set it. The ``profiler:`` section is described in
:mod:`obsbus._config_profiler`.

:func:`build` checks the whole file first: unknown plug-ins and arguments
(with the nearest name: "did you mean 'window_size'?"), wrong types, bad time
strings and credential-looking keys (secrets come from the environment, never
from a file) are all reported in one :class:`ConfigError`, each with its path
(``callbacks.speed_monitor.windw_size``). Then it builds the plug-ins; a
constructor's own ``ValueError``/``TypeError`` is collected the same way.

The result's :meth:`RunConfig.kwargs` goes straight into ``Trainer``,
``Run`` and the transformers and Lightning bridges.

Example:
    >>> from obsbus import config
    >>> cfg = config.build({"log_interval": "5ba",
    ...                     "callbacks": {"speed_monitor": {"window_size": 10}},
    ...                     "loggers": {"in_memory": {}}})
    >>> [type(p).__name__ for p in cfg.callbacks + cfg.loggers]
    ['SpeedMonitor', 'InMemoryLogger']
    >>> from obsbus import Run
    >>> with Run(**cfg.kwargs()) as run:
    ...     pass
    >>> config.build({"callbacks": {"speed_monitor": {"windw_size": 10}, "lr_montor": {}}})
    Traceback (most recent call last):
    ...
    obsbus.config.ConfigError: 2 problems in the config:
      callbacks.speed_monitor.windw_size: SpeedMonitor has no argument 'windw_size'; ...
      callbacks.lr_montor: unknown callback 'lr_montor'; did you mean 'lr_monitor'? ...
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsbus import registry
from obsbus._check import check_optional_choice, type_as_value_error
from obsbus._config_check import Problem, check_arguments, check_secrets, check_time, parameters
from obsbus.errors import MissingExtraError, ObsbusError, ObsbusWarning
from obsbus.masking import mask_secrets

__all__ = [
    "DIALECTS",
    "IGNORED_KEYS",
    "ConfigError",
    "RunConfig",
    "build",
    "dump",
    "from_primus",
    "load",
    "resolve",
    "resolved_config",
]

#: The dialects :func:`build` translates from.
DIALECTS = ("primus",)
#: Top-level keys the export writes and :func:`build` skips, with a warning.
IGNORED_KEYS = ("unregistered", "python_args")
_TOP = ("run_name", "run_folder", "log_interval", "callbacks", "loggers", "profiler", "logging")
_SECTIONS: dict[str, registry.Kind] = {"callbacks": "callbacks", "loggers": "loggers"}
Source = Mapping[str, Any] | str | os.PathLike[str]


class ConfigError(ObsbusError, ValueError):
    """Every problem in a config, each with its path in the file.

    Attributes:
        problems: ``[(path, message), ...]``, in the order found.
        source: the file, or ``"the config"`` for a dict.
    """

    def __init__(self, problems: list[Problem], source: str = "the config") -> None:
        self.problems = list(problems)
        self.source = source
        count = len(self.problems)
        lines = "\n".join(f"  {path}: {message}" for path, message in self.problems)
        super().__init__(f"{count} problem{'s' * (count != 1)} in {source}:\n{lines}")


@dataclass
class RunConfig:
    """What :func:`build` made: splat :meth:`kwargs` into ``Trainer``, ``Run`` or a bridge."""

    callbacks: list[Any] = field(default_factory=list)
    loggers: list[Any] = field(default_factory=list)
    profiler: Any = None
    run_name: str | None = None
    run_folder: str | None = None
    #: The ``logging:`` section: :func:`obsbus.log.setup_logging`'s arguments, checked.
    logging: dict[str, Any] | None = None

    def setup_logging(self, run_folder: Any = None) -> Any:
        """Call :func:`obsbus.log.setup_logging` with the ``logging:`` section's arguments.

        ``run_folder`` defaults to the config's. Returns loguru's logger.
        """
        from obsbus.log import setup_logging

        folder = run_folder if run_folder is not None else self.run_folder
        if folder is None:
            raise ValueError(
                "RunConfig.setup_logging needs a run folder: the config has no run_folder. "
                "To fix, add run_folder: to the config or pass run_folder=."
            )
        return setup_logging(folder, **(self.logging or {}))

    def kwargs(self) -> dict[str, Any]:
        """``callbacks=, loggers=, profiler=, run_folder=, run_name=``."""
        return {
            "callbacks": list(self.callbacks),
            "loggers": list(self.loggers),
            "profiler": self.profiler,
            "run_folder": self.run_folder,
            "run_name": self.run_name,
        }


def from_primus(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Primus's (and TorchTitan's) observability keys as this module's shape.

    Every key it does not map is reported in one warning. See :mod:`obsbus._primus`.
    """
    from obsbus import _primus

    result: dict[str, Any] = _primus.from_primus(cfg)
    return result


def load(source: Source) -> dict[str, Any]:
    """The config as a dict: ``source`` itself (a mapping) or the YAML file it names."""
    if isinstance(source, Mapping):
        return dict(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"a config is a mapping or a YAML file's path, got {source!r}.")
    import yaml  # type: ignore[import-untyped, unused-ignore]

    path = Path(source)
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([("(file)", f"not valid YAML: {exc}")], str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError([("(file)", "expected a mapping at the top")], str(path))
    return dict(data)


def construct(
    path: str, factory: Callable[..., Any], kwargs: dict[str, Any], problems: list[Problem]
) -> Any:
    """``factory(**kwargs)``; its ``ValueError``/``TypeError``/missing extra becomes a problem."""
    try:
        return factory(**kwargs)
    except (ValueError, TypeError, MissingExtraError) as exc:
        problems.append((path, mask_secrets(str(exc))))
        return None


def named_instances(
    path: str, kind: registry.Kind, value: Any, *, log_interval: Any
) -> tuple[list[tuple[str, Callable[..., Any], dict[str, Any]]], list[Problem]]:
    """``{name: args | [args, ...] | None}`` checked: what to build, and the problems."""
    if value is None:
        return [], []
    if not isinstance(value, Mapping):
        return [], [(path, "expected a mapping {name: arguments}")]
    planned, problems = [], []
    known = registry.names(kind)
    for name, given in value.items():
        where = f"{path}.{name}"
        try:
            factory = registry.load(kind, name)
        except ValueError:
            hint = registry.suggest(name, known) if isinstance(name, str) else ""
            singular = kind.rstrip("s").replace("_", " ")
            problems.append((where, f"unknown {singular} {name!r}{hint or '.'} Accepted: "
                                    f"{', '.join(known)}"))  # fmt: skip
            continue
        except (ImportError, AttributeError) as exc:  # a third party's entry point
            problems.append((where, f"could not be imported: {mask_secrets(str(exc))}"))
            continue
        many = isinstance(given, list)
        for i, args in enumerate(given if many else [given]):
            at = f"{where}[{i}]" if many else where
            if args is None:
                args = {}
            if not isinstance(args, Mapping):
                problems.append((at, f"expected a mapping of arguments, got {args!r}"))
                continue
            args = dict(args)
            params = parameters(factory)
            interval = params.get("log_interval")
            if (log_interval is not None and interval is not None
                    and interval.default not in (None, inspect.Parameter.empty)
                    and "log_interval" not in args):  # fmt: skip
                args["log_interval"] = log_interval
            owner = str(getattr(factory, "__name__", name))
            kwargs, found = check_arguments(at, owner, factory, args)
            problems += found
            planned.append((at, factory, kwargs))
    return planned, problems


def _check_top(cfg: Mapping[str, Any], problems: list[Problem]) -> None:
    for key in cfg:
        if key in IGNORED_KEYS:
            warnings.warn(
                f"the config's {key!r} section is not built (it lists what the export could not "
                "express as a config); add those plug-ins in Python.",
                ObsbusWarning,
                stacklevel=4,
            )
        elif key not in _TOP:
            hint = registry.suggest(str(key), list(_TOP))
            problems.append((str(key), f"unknown section{hint or '.'} Accepted: {', '.join(_TOP)}"))
    for key in ("run_name", "run_folder"):
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            problems.append((key, f"expected a string, got {cfg[key]!r}"))
    interval = cfg.get("log_interval")
    if interval is not None and not isinstance(interval, (str, int)):
        problems.append(
            ("log_interval", f"expected a time string such as '10ba', got {interval!r}")
        )
    problems += check_time("log_interval", interval)


def _check_logging(value: Any, problems: list[Problem]) -> dict[str, Any] | None:
    """The ``logging:`` section against :func:`obsbus.log.setup_logging` (not its run_folder)."""
    from obsbus.log import setup_logging

    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(("logging", "expected a mapping of setup_logging arguments"))
        return None
    if "run_folder" in value:
        problems.append(("logging.run_folder", "give the run folder at the top: run_folder:"))
    args = {k: v for k, v in value.items() if k != "run_folder"}
    kwargs, found = check_arguments("logging", "setup_logging", setup_logging, args)
    problems += [p for p in found if p[0] != "logging.run_folder"]
    return kwargs


def build(source: Source, *, dialect: str | None = None) -> RunConfig:
    """Check ``source`` (a dict or a YAML file) whole, then build its plug-ins.

    ``dialect="primus"`` translates Primus's keys first (:func:`from_primus`).

    Raises:
        ConfigError: every problem found, each with its path.
        TypeError: ``source`` is neither a mapping nor a path.
        OSError: the file can not be read.
    """
    from obsbus._config_profiler import plan_profiler

    where = str(source) if isinstance(source, (str, os.PathLike)) else "the config"
    cfg = load(source)
    if dialect is not None:
        with type_as_value_error():  # a wrong type has always been a ValueError here
            check_optional_choice("build", "dialect", dialect, DIALECTS)
        cfg = from_primus(cfg)
    # The export's read-only sections hold masked values ('api_key': '***') that are never built.
    secrets = check_secrets({k: v for k, v in cfg.items() if k not in IGNORED_KEYS})
    problems: list[Problem] = []
    _check_top(cfg, problems)
    # A bad default is reported once, at its own path, not again in every plug-in.
    interval = None if any(p[0] == "log_interval" for p in problems) else cfg.get("log_interval")
    planned: dict[str, list[tuple[str, Callable[..., Any], dict[str, Any]]]] = {}
    for section, kind in _SECTIONS.items():
        planned[section], found = named_instances(
            section, kind, cfg.get(section), log_interval=interval
        )
        problems += found
    profiler_plan, found = plan_profiler(cfg.get("profiler"))
    problems += found
    logging_args = _check_logging(cfg.get("logging"), problems)
    if problems or secrets:
        # A secret key is also "unknown" to most plug-ins: report it once, as a secret.
        paths = {path for path, _ in secrets}
        raise ConfigError(secrets + [p for p in problems if p[0] not in paths], where)
    built: dict[str, list[Any]] = {}
    for section, items in planned.items():
        built[section] = [construct(path, f, kw, problems) for path, f, kw in items]
    profiler = None
    if profiler_plan is not None:
        profiler, found = profiler_plan.build()
        problems += found
    if problems:
        raise ConfigError(problems, where)
    return RunConfig(
        callbacks=built["callbacks"],
        loggers=built["loggers"],
        profiler=profiler,
        run_name=cfg.get("run_name"),
        run_folder=cfg.get("run_folder"),
        logging=logging_args,
    )


def resolved_config(
    plugins: list[Any], profiler: Any = None, *, run_name: str | None = None,
    run_folder: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The config that builds ``plugins`` (and ``profiler``) again, defaults filled in.

    What ``config/resolved.yaml`` holds; :mod:`obsbus._config_export` describes it.
    """
    from obsbus._config_export import export

    return export(plugins, profiler, run_name=run_name, run_folder=run_folder)


def resolve(source: Source, *, dialect: str | None = None) -> dict[str, Any]:
    """Build ``source`` and return its resolved config (what ``obsbus config show`` prints)."""
    cfg = build(source, dialect=dialect)
    return resolved_config(
        [*cfg.loggers, *cfg.callbacks], cfg.profiler, run_name=cfg.run_name,
        run_folder=cfg.run_folder,
    )  # fmt: skip


def dump(cfg: Mapping[str, Any]) -> str:
    """``cfg`` as YAML text, with the header ``config/resolved.yaml`` carries."""
    from obsbus._config_export import to_yaml

    return to_yaml(cfg)
