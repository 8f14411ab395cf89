"""The resolved config: the plug-ins a run was built with, as a config that builds them again.

It reads what ``config/plugins.json`` reads: each plug-in's constructor
arguments as recorded by :mod:`obsbus._init_args`, defaults applied, masked
with :func:`obsbus.masking.mask_value`. Each class is named by its registry
name (:func:`obsbus.registry.name_of`). The Profiler's own parts (its trace
handlers, its TorchProfiler and SystemProfiler) are written as its
``profiler:`` section, not as callbacks.

What a config can not express is kept, for the reader, under two keys that
:func:`obsbus.config.build` skips with a warning:

``unregistered``
    ``[{"kind", "class", "args"}]``: plug-ins whose class has no registry name
    (your own classes), a profiler whose schedule is not a registered one, and
    plug-ins whose arguments were not recorded (a copied object).
``python_args``
    ``{path: {argument: repr}}``: arguments of registered plug-ins whose value
    is a Python object (a callable, a stream); rebuilt from the file, those
    take their defaults.
"""

from __future__ import annotations

import ast
import enum
import inspect
import math
import os
from collections.abc import Mapping
from typing import Any

from obsbus import registry
from obsbus._init_args import init_args
from obsbus.masking import mask_value

__all__ = ["HEADER", "export", "to_yaml"]

HEADER = (
    "# The observability config this run was built with, defaults filled in.\n"
    "# Build the same plug-ins again: obsbus.config.build('resolved.yaml').\n"
    "# 'unregistered' and 'python_args' are for reading only: build() skips them.\n"
)
_NOT_PLAIN = object()


def _plain(value: Any) -> Any:
    """``value`` as YAML data, or ``_NOT_PLAIN``."""
    from obsbus.time import Time

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NOT_PLAIN
    if isinstance(value, Time):
        return str(value)
    if isinstance(value, enum.Enum) and isinstance(value.value, (str, int)):
        return value.value
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
        return path if isinstance(path, str) else _NOT_PLAIN
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return _NOT_PLAIN if any(v is _NOT_PLAIN for v in items) else items
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        out = {k: _plain(v) for k, v in value.items()}
        return _NOT_PLAIN if any(v is _NOT_PLAIN for v in out.values()) else out
    return _NOT_PLAIN


def _flatten(obj: object, args: dict[str, Any]) -> dict[str, Any]:
    """``**kwargs`` spread back into keyword arguments."""
    try:
        params = inspect.signature(type(obj)).parameters
    except (TypeError, ValueError):
        return dict(args)
    out = dict(args)
    for name, param in params.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD and isinstance(out.get(name), Mapping):
            out.update(out.pop(name))
    return out


def _split(obj: object) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``obj``'s arguments as (YAML data, Python objects as text), masked; ``None``: unknown."""
    from obsbus._run_record import json_safe

    args = init_args(obj)
    if args is None:
        return None
    data, objects = {}, {}
    for key, value in _flatten(obj, args).items():
        plain = _plain(value)
        if plain is _NOT_PLAIN:
            objects[key] = json_safe(value)
        else:
            data[key] = plain
    return mask_value(data), mask_value(objects)


def _class_name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _unregistered(kind: str, obj: object) -> dict[str, Any]:
    from obsbus._run_record import json_safe

    args = init_args(obj)
    return {"kind": kind, "class": _class_name(obj),
            "args": None if args is None else mask_value(json_safe(args))}  # fmt: skip


def _section(
    found: list[tuple[str, dict[str, Any], dict[str, Any]]], path: str, python: dict[str, Any]
) -> dict[str, Any]:
    """``{name: args}``; a name built more than once gets a list. Objects go to ``python``."""
    counts: dict[str, int] = {}
    for name, _, _ in found:
        counts[name] = counts.get(name, 0) + 1
    section: dict[str, Any] = {}
    for name, data, objects in found:
        if counts[name] == 1:
            section[name] = data
            at = name
        else:
            section.setdefault(name, []).append(data)
            at = f"{name}[{len(section[name]) - 1}]"
        if objects:
            python[f"{path}.{at}"] = objects
    return section


def _schedule(schedule: object) -> dict[str, Any] | None:
    """``{name: args}`` read back from a registered schedule's repr (a call with literals)."""
    try:
        call = ast.parse(repr(schedule), mode="eval").body
    except Exception:  # a user's schedule: its repr may be anything, or raise
        return None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
        return None
    name = registry.name_of("schedules", f"obsbus.profiler.schedule.{call.func.id}")
    if name is None:
        return None
    try:
        args = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except ValueError:
        return None
    return {name: args}


def _profiler(profiler: Any, out: dict[str, Any], python: dict[str, Any]) -> None:
    from obsbus._run_record import json_safe

    args = init_args(profiler)
    schedule = None if args is None else _schedule(args.get("schedule"))
    if args is None or schedule is None:
        out.setdefault("unregistered", []).append(_unregistered("profiler", profiler))
        return
    section: dict[str, Any] = {"schedule": schedule}
    handlers = args.get("trace_handlers") or ()
    found = []
    for handler in [handlers] if not isinstance(handlers, (list, tuple)) else handlers:
        name = registry.name_of("trace_handlers", _class_name(handler))
        split = None if name is None else _split(handler)
        if name is None or split is None:
            out.setdefault("unregistered", []).append(_unregistered("trace_handler", handler))
        else:
            found.append((name, *split))
    section["trace_handlers"] = _section(found, "profiler.trace_handlers", python)
    rest = {k: v for k, v in args.items() if k not in ("schedule", "trace_handlers")}
    for key, value in rest.items():
        plain = _plain(value)
        if plain is _NOT_PLAIN:
            python.setdefault("profiler", {})[key] = mask_value(json_safe(value))
        else:
            section[key] = mask_value(plain)
    out["profiler"] = section


def _parts_of(profiler: Any) -> set[int]:
    parts = [getattr(profiler, "torch_profiler", None), getattr(profiler, "system_profiler", None)]
    parts += list(getattr(profiler, "trace_handlers", None) or [])
    return {id(p) for p in parts if p is not None}


def export(
    plugins: list[Any], profiler: Any = None, *, run_name: str | None = None,
    run_folder: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The resolved config of ``plugins`` (callbacks and destinations) and ``profiler``."""
    from obsbus.logger import LoggerDestination

    out: dict[str, Any] = {}
    if run_name is not None:
        out["run_name"] = run_name
    if run_folder is not None:
        out["run_folder"] = run_folder
    found: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {
        "callbacks": [],
        "loggers": [],
    }
    python: dict[str, Any] = {}
    unregistered: list[dict[str, Any]] = []
    own = _parts_of(profiler) if profiler is not None else set()
    for plugin in plugins:
        if id(plugin) in own:
            continue
        is_logger = isinstance(plugin, LoggerDestination)
        kind: registry.Kind = "loggers" if is_logger else "callbacks"
        name = registry.name_of(kind, _class_name(plugin))
        split = None if name is None else _split(plugin)
        if name is None or split is None:
            unregistered.append(_unregistered("destination" if is_logger else "callback", plugin))
            continue
        found[kind].append((name, *split))
    sections = {kind: _section(items, kind, python) for kind, items in found.items()}
    out.update(sections)
    if unregistered:
        out["unregistered"] = unregistered
    if profiler is not None:
        _profiler(profiler, out, python)
    if python:
        out["python_args"] = python
    return out


def to_yaml(cfg: Mapping[str, Any]) -> str:
    """``cfg`` as YAML (keys in the export's order), after :data:`HEADER`."""
    import yaml  # type: ignore[import-untyped, unused-ignore]

    body: str = yaml.safe_dump(
        dict(cfg), sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return HEADER + body
