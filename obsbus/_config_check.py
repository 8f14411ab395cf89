"""The checks :func:`obsbus.config.build` runs on a plug-in's arguments before building it.

Each check returns the problems it finds as ``(path, message)`` pairs, so that
one :class:`~obsbus.config.ConfigError` lists every problem in the file. Types
come from the constructor's annotations where they are simple (``int``,
``float``, ``str``, ``bool``, ``None``, lists, mappings, ``Literal[...]`` and
``TimeLike``); an annotation it does not know is the constructor's to check.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from obsbus.masking import is_secret_name, mask_secrets
from obsbus.registry import suggest

__all__ = ["Problem", "check_arguments", "check_secrets", "check_time", "parameters"]

Problem = tuple[str, str]
_SEQUENCES = ("list", "tuple", "Sequence", "Iterable", "Collection")
_MAPPINGS = ("dict", "Mapping", "MutableMapping")
_NAMES = {int: "int", float: "float", str: "str", bool: "bool", type(None): "None"}


def parameters(target: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The keyword-settable parameters of ``target`` (a class: its ``__init__``), by name."""
    params = inspect.signature(target).parameters
    return {
        name: p
        for name, p in params.items()
        if p.kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
    }


def _split(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _literal(part: str) -> tuple[Any, ...] | None:
    inner = part[part.index("[") + 1 : -1]
    try:
        values = ast.literal_eval(f"({inner},)")
    except (ValueError, SyntaxError):
        return None
    return values if isinstance(values, tuple) else None


def _accepts(part: str, value: Any, path: str) -> bool | None:
    """Whether one union member accepts ``value``; ``None``: the member is not understood."""
    base = part.split("[", 1)[0].strip().removeprefix("typing.").removeprefix("collections.abc.")
    if base == "None":
        return value is None
    if base == "bool":
        return isinstance(value, bool)
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base in ("str", "os.PathLike", "PathLike"):
        return isinstance(value, str)
    if base == "TimeLike":
        if isinstance(value, str):
            return not check_time(path, value)
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base in _SEQUENCES:
        return isinstance(value, list)
    if base in _MAPPINGS:
        return isinstance(value, Mapping)
    if base == "Literal":
        choices = _literal(part)
        return None if choices is None else value in choices
    return None


def _annotation(param: inspect.Parameter) -> str | None:
    ann = param.annotation
    if ann is inspect.Parameter.empty:
        return None
    if isinstance(ann, str):
        return ann
    if ann in _NAMES:
        return _NAMES[ann]
    return None  # a real typing object: left to the constructor


def _describe(annotation: str) -> str:
    return annotation.replace("os.PathLike[str]", "path").replace("TimeLike", "time string")


def check_time(path: str, value: Any) -> list[Problem]:
    """A bad time string (``"10ba"``, ``"1ep"`` are good) as a problem at ``path``."""
    from obsbus.time import Time

    if not isinstance(value, str):
        return []
    try:
        Time.from_timestring(value)
    except (ValueError, TypeError) as exc:
        return [(path, mask_secrets(str(exc)))]
    return []


def _coerce_float(annotation: str, value: Any) -> Any:
    # YAML 1.1 (PyYAML) reads 1e15 as a string: take it as the number the user meant.
    parts = [p.split("[", 1)[0].strip() for p in _split(annotation, "|")]
    if isinstance(value, str) and "float" in parts and "str" not in parts:
        try:
            return float(value)
        except ValueError:
            return value
    return value


def check_type(path: str, annotation: str, value: Any) -> tuple[Any, list[Problem]]:
    """``value`` (a float string made a float) and its problems against ``annotation``."""
    value = _coerce_float(annotation, value)
    parts = _split(annotation, "|")
    verdicts = [_accepts(part, value, path) for part in parts]
    if any(v is True for v in verdicts) or any(v is None for v in verdicts):
        return value, []
    for part in parts:
        base = part.split("[", 1)[0].strip()
        if base == "TimeLike" and isinstance(value, str):
            return value, check_time(path, value)
        if base == "Literal" and isinstance(value, str):
            choices = [c for c in _literal(part) or () if isinstance(c, str)]
            hint = suggest(value, choices)
            return value, [(path, f"{value!r} is not one of {choices}{hint}")]
    shown = repr(value) if not isinstance(value, (list, dict)) else type(value).__name__
    return value, [(path, f"expected {_describe(annotation)}, got {shown}")]


def check_arguments(
    path: str, owner: str, target: Callable[..., Any], args: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Problem]]:
    """``args`` checked against ``target``'s signature: unknown names, types, time strings.

    Returns the arguments to call it with (float strings made floats) and the problems.
    """
    params = parameters(target)
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in args.items():
        where = f"{path}.{key}"
        param = params.get(key) if isinstance(key, str) else None
        if param is None or param.kind is inspect.Parameter.VAR_KEYWORD:
            if open_ended and isinstance(key, str):
                out[key] = value
                continue
            hint = suggest(key, named) if isinstance(key, str) else ""
            problems.append((where, f"{owner} has no argument {key!r}{hint}"))
            continue
        annotation = _annotation(param)
        if annotation is not None:
            value, found = check_type(where, annotation, value)
            problems += found
        out[key] = value
    missing = [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_KEYWORD,)
        and n not in args
    ]
    for name in missing:
        problems.append((f"{path}.{name}", f"{owner} needs the argument {name!r}"))
    return out, problems


def _walk(path: str, value: Any) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            yield where, key, item
            yield from _walk(where, item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(f"{path}[{i}]", item)


def check_secrets(cfg: Any) -> list[Problem]:
    """Keys that name a credential, and values shaped like one, anywhere in ``cfg``.

    The message never quotes the value.
    """
    problems: list[Problem] = []
    for where, key, value in _walk("", cfg):
        if isinstance(key, str) and is_secret_name(key) and value not in (None, ""):
            problems.append(
                (
                    where,
                    f"{key!r} looks like a credential; obsbus never takes secrets from a config "
                    "file. To fix, remove it and set the tracker's environment variable instead "
                    "(e.g. WANDB_API_KEY, COMET_API_KEY, NEPTUNE_API_TOKEN, "
                    "MLFLOW_TRACKING_TOKEN, AWS_SECRET_ACCESS_KEY)",
                )
            )
        elif isinstance(value, str) and mask_secrets(value) != value:
            problems.append(
                (
                    where,
                    "this value looks like it holds a credential (a token, or a password in a "
                    "URI); obsbus never takes secrets from a config file. To fix, remove it and "
                    "set the credential in the environment instead",
                )
            )
    return problems
