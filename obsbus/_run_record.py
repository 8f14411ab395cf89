"""The run's own record in ``config/``, written once, when ``init`` has run.

Files, in ``state.run_folder.config_dir``, each written whole (a temporary
file renamed into place), so a crashed run's folder holds complete files:

``run.json``
    ``{"run_name", "world_size", "started", "command", "cwd", "obsbus"}``: the run's
    name, how many ranks, when ``init`` came (UTC, ISO 8601), the command line
    (``sys.argv``, masked with :func:`obsbus.masking.mask_argv`), the working
    directory and obsbus's version.
``plugins.json``
    ``{"plugins": [{"kind": "destination"|"callback"|"profiler", "class":
    "module.QualName", "args": {name: value} or null}]}``: every plug-in with
    its constructor arguments as resolved (defaults applied); ``args`` is
    ``null`` when they are unknown (an object copied or unpickled).
``resolved.yaml``
    the same plug-ins, from the same records, as a config that
    :func:`obsbus.config.build` builds again: registry names, every argument
    with its default, masked (:mod:`obsbus._config_export`); plus the run's
    ``run_name`` and ``run_folder``.
``hparams.json``
    ``state.hparams``.
``env.json``
    ``{NAME: value}``, sorted: the environment without secret-named variables
    (TOKEN|SECRET|KEY|PASSWORD|CREDENTIAL...), values masked
    (:func:`obsbus.loggers._run_metadata.environment_snapshot`).
``git.json``
    ``{"available": true, "commit", "branch", "dirty", "remote", "root"}``, or
    ``{"available": false, "reason": "..."}`` (no git, not a checkout, git failed
    or took longer than 3 s).
``packages.txt``
    ``name==version``, one installed distribution a line, sorted by name.
``system.json``
    :func:`obsbus.collect_env.collect` without torch's slow report.

Values that are not JSON (tensors, modules, paths, callables, objects) are
written as a string (their ``repr``, or ``<Tensor shape=... dtype=...>`` for a
tensor, never read). Every value goes through :mod:`obsbus.masking`.

Only rank 0 writes (the ranks share the code, the hyperparameters and the
plug-ins; ``system.json`` and ``env.json`` are rank 0's node). A failure is
one :class:`~obsbus.errors.ObsbusWarning` per file and training goes on.
``OBSBUS_RUN_RECORD=0`` turns the record off.
"""

from __future__ import annotations

import datetime
import enum
import functools
import importlib.metadata as metadata
import json
import math
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from obsbus._collect_env_probes import run_tool
from obsbus._init_args import init_args
from obsbus._units import units_record
from obsbus.errors import ObsbusWarning
from obsbus.masking import mask_argv, mask_secrets, mask_value

__all__ = ["GIT_TIMEOUT_S", "json_safe", "resolved_yaml", "run_record", "write_run_record"]

GIT_TIMEOUT_S = 3.0
_MAX_ITEMS = 200
_MAX_TEXT = 2000
_WRITTEN = "_obsbus_run_record_written"


def _describe(value: Any) -> str:
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if hasattr(value, "shape") and hasattr(value, "dtype") and kind.__module__.startswith("torch"):
        device = getattr(value, "device", "?")
        return f"<Tensor shape={list(value.shape)} dtype={value.dtype} device={device}>"
    if kind.__module__.startswith("torch") and hasattr(value, "parameters"):
        return f"<{name}>"  # a module's repr prints the whole model
    try:
        text = repr(value)
    except Exception:
        return f"<{name}>"
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON data: containers walked (to depth 8), anything else a string."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum) and isinstance(value.value, (str, int)):
        return value.value
    if isinstance(value, os.PathLike):
        return os.fspath(value) if isinstance(os.fspath(value), str) else repr(value)
    if depth < 8 and isinstance(value, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
    if depth < 8 and isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value[:_MAX_ITEMS]]
    if depth < 8 and isinstance(value, (set, frozenset)):
        return sorted((json_safe(v, depth + 1) for v in value), key=repr)[:_MAX_ITEMS]
    return _describe(value)


def _class_name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def plugins_record(plugins: Iterable[object], profiler: object = None) -> dict[str, Any]:
    """The ``plugins.json`` data for ``plugins`` (and ``profiler``)."""
    from obsbus.logger import LoggerDestination

    rows = []
    for plugin in plugins:
        kind = "destination" if isinstance(plugin, LoggerDestination) else "callback"
        rows.append((kind, plugin))
    if profiler is not None:
        rows.append(("profiler", profiler))
    out = []
    for kind, plugin in rows:
        args = init_args(plugin)
        out.append(
            {
                "kind": kind,
                "class": _class_name(plugin),
                "args": None if args is None else json_safe(mask_value(args)),
            }
        )
    return {"plugins": mask_value(out)}


def resolved_yaml(state: Any, plugins: Iterable[object], profiler: object = None) -> str:
    """``resolved.yaml``: the config that builds ``plugins`` and ``profiler`` again."""
    from obsbus._config_export import export, to_yaml

    folder = getattr(state, "run_folder", None)
    root = getattr(folder, "root", None)
    cfg = export(
        list(plugins),
        profiler,
        run_name=mask_secrets(str(getattr(state, "run_name", ""))) or None,
        run_folder=None if root is None else mask_secrets(str(root)),
    )
    return to_yaml(cfg)


def run_record(state: Any) -> dict[str, Any]:
    """``run.json``: the run's name, its ranks, when it started, its command line."""
    from obsbus import __version__

    return {
        "run_name": mask_secrets(str(getattr(state, "run_name", ""))),
        "world_size": int(getattr(state, "world_size", 1)),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": mask_argv([sys.executable, *sys.argv]),
        "cwd": mask_secrets(os.getcwd()),
        "obsbus": __version__,
    }


def _git(where: str, exe: str, args: list[str]) -> tuple[str | None, str]:
    out, why = run_tool([exe, "-C", where, *args], GIT_TIMEOUT_S, name=f"git {args[0]}")
    if out is None:
        if "not a git repository" in (why or "").lower():
            return None, f"{where} is not in a git repository"
        return None, why or ""
    return out.strip(), ""


def git_record(cwd: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The ``git.json`` data for the checkout at ``cwd`` (default: the working directory)."""
    exe = shutil.which("git")
    if exe is None:
        return {"available": False, "reason": "git was not found on PATH"}
    where = str(Path.cwd() if cwd is None else cwd)
    commit, why = _git(where, exe, ["rev-parse", "HEAD"])
    if commit is None:
        return {"available": False, "reason": mask_secrets(why)}
    branch, _ = _git(where, exe, ["rev-parse", "--abbrev-ref", "HEAD"])
    status, _ = _git(where, exe, ["status", "--porcelain", "--untracked-files=no"])
    remote, _ = _git(where, exe, ["config", "--get", "remote.origin.url"])
    root, _ = _git(where, exe, ["rev-parse", "--show-toplevel"])
    record: dict[str, Any] = mask_value(
        {
            "available": True,
            "commit": commit,
            "branch": branch or "",
            "dirty": bool(status),
            "remote": remote or "",
            "root": root or "",
        }
    )
    return record


def packages_text() -> str:
    """``packages.txt``: ``name==version`` for every installed distribution, sorted."""
    return mask_secrets(_installed())


@functools.cache
def _installed() -> str:
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.setdefault(name.lower(), f"{name}=={dist.version}")
    return "".join(line + "\n" for _, line in sorted(found.items()))


@functools.lru_cache(maxsize=4)
def _env_for(environ: tuple[tuple[str, str], ...]) -> dict[str, str]:
    from obsbus.loggers._run_metadata import environment_snapshot

    return {k.removeprefix("env__"): v for k, v in environment_snapshot(dict(environ)).items()}


@functools.lru_cache(maxsize=4)
def _system_for(environ: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    from obsbus.collect_env import collect

    # No GPU tool runs at run start (a hung nvidia-smi would hold the run; rocm-smi is the
    # monitors' to call) and CUDA is not initialised here: `obsbus collect-env` has those.
    data: dict[str, Any] = mask_value(collect(torch_report=False, probe_devices=False))
    return data


# Runs in one process share the installed packages and, while the environment is the same,
# the masked environment and system facts: a test suite builds hundreds of runs.
def _env() -> dict[str, str]:
    return _env_for(tuple(sorted(os.environ.items())))


def _system() -> dict[str, Any]:
    return _system_for(tuple(sorted(os.environ.items())))


def _write(path: Path, make: Callable[[], Any]) -> None:
    try:
        content = make()
        text = content if isinstance(content, str) else json.dumps(content, indent=2) + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except Exception as exc:
        warnings.warn(
            f"obsbus could not write the run record {str(path)!r}: "
            f"{mask_secrets(f'{type(exc).__name__}: {exc}')}. Training goes on without it.",
            ObsbusWarning,
            stacklevel=3,
        )


def write_run_record(
    state: Any, plugins: Iterable[object], *, profiler: object = None
) -> Path | None:
    """Write ``config/`` for the run of ``state`` (once; rank 0 only); never raises.

    ``plugins`` are the run's callbacks and destinations (``state.callbacks``).
    Returns the folder written, or ``None`` when this process writes nothing.
    """
    try:
        if os.environ.get("OBSBUS_RUN_RECORD", "1").strip().lower() in ("0", "false", "no", "off"):
            return None
        if getattr(state, _WRITTEN, False) or getattr(state, "rank", 0) != 0:
            return None
        setattr(state, _WRITTEN, True)
        folder = Path(state.run_folder.config_dir)
        listed = list(plugins)
        hparams = dict(getattr(state, "hparams", None) or {})
    except Exception as exc:
        warnings.warn(
            f"obsbus could not write the run record: {mask_secrets(repr(exc))}.",
            ObsbusWarning,
            stacklevel=2,
        )
        return None
    run = run_record(state)
    _write(folder / "run.json", lambda: run)
    _write(folder / "plugins.json", lambda: plugins_record(listed, profiler))
    _write(folder / "units.json", lambda: units_record(listed))
    _write(folder / "resolved.yaml", lambda: resolved_yaml(state, listed, profiler))
    # Masked before json_safe: it repr()s objects and cuts long text, so a secret at the cut
    # would no longer look like one; the walk turns objects into dicts of masked fields.
    _write(folder / "hparams.json", lambda: mask_value(json_safe(mask_value(hparams))))
    _write(folder / "env.json", _env)
    _write(folder / "git.json", git_record)
    _write(folder / "packages.txt", packages_text)
    _write(folder / "system.json", _system)
    return folder
