"""Reading a Primus config: its nesting flattened, its placeholders filled, its values typed.

:func:`merge` flattens ``modules.<name>``, ``overrides`` and the ``metrics.``/
``profiling.`` sections into one table of keys, each with its path in the
YAML, and fills Primus's ``${VAR:default}`` placeholders from the
environment. :func:`secrets_in` finds credential-looking keys and values.
:class:`Keys` reads the table with a type per key, collecting what is wrong
(with its path) instead of raising at the first problem, so one
``ConfigError`` lists them all. :mod:`obsbus._primus` maps the keys onto
obsbus's plug-ins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from obsbus._check import is_int
from obsbus._secret_shapes import is_secret_name
from obsbus.masking import mask_secrets

__all__ = ["Keys", "merge", "secrets_in"]

#: Keys that say which framework, config and model a module config is for.
_LOCATORS = ("framework", "config", "model")
_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "WARN", "ERROR", "CRITICAL")


_CREDENTIAL_KEY = (
    "{key!r} looks like a credential; obsbus never takes secrets from a config. To fix, remove "
    "it and set it in the environment (e.g. WANDB_API_KEY, MLFLOW_TRACKING_TOKEN, "
    "DATABRICKS_TOKEN)"
)
_CREDENTIAL_VALUE = (
    "this value looks like a credential (a token, or a password in a URI); obsbus never takes "
    "secrets from a config. To fix, remove it and set it in the environment"
)


class Keys:
    """The merged keys, where each came from, and the problems and notes found."""

    def __init__(self, flat: dict[str, Any], paths: dict[str, str], defaults: dict[str, Any]):
        self.flat, self.paths, self.defaults = flat, paths, defaults
        self.used: set[str] = set()
        self.problems: list[tuple[str, str]] = []
        self.notes: list[str] = []

    def given(self, key: str) -> bool:
        return key in self.flat

    def raw(self, key: str) -> Any:
        self.used.add(key)
        return self.flat.get(key, self.defaults.get(key))

    def bad(self, key: str, value: Any, accepted: str) -> None:
        path = self.paths.get(key, key)
        if all(path != seen for seen, _ in self.problems):  # a key read twice: told once
            self.problems.append((path, f"{value!r} is not {accepted}"))

    def flag(self, key: str) -> bool:
        value = self.raw(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.bad(key, value, "true or false")
            return False
        return value

    def count(self, key: str, minimum: int = 0) -> int | None:
        value = self.raw(key)
        if value is None:
            return None
        if not is_int(value) or value < minimum:
            self.bad(key, value, f"an integer >= {minimum}")
            return None
        return value

    def text(self, key: str) -> str | None:
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            self.bad(key, value, "a non-empty string or null")
            return None
        return value

    def level(self, key: str) -> str | None:
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, str) or value.strip().upper() not in _LEVELS:
            self.bad(key, value, f"a log level ({', '.join(_LEVELS)})")
            return None
        return value.strip().upper()

    def ints(self, key: str, minimum: int) -> list[int] | None:
        value = self.raw(key)
        if value is None:
            return None
        ok = isinstance(value, (list, tuple)) and all(is_int(v) and v >= minimum for v in value)
        if not ok:
            self.bad(key, value, f"a list of integers >= {minimum}")
            return None
        return list(value)

    def no_effect(self, key: str, why: str) -> None:
        if self.given(key) and self.flat[key] != self.defaults.get(key):
            self.notes.append(f"{self.paths[key]} (no effect {why}, as in Primus)")


def merge(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """Flatten Primus's nesting: keys, their paths in ``cfg``, and the module's facts."""
    flat: dict[str, Any] = {}
    paths: dict[str, str] = {}
    facts: dict[str, Any] = {"notes": [], "problems": []}

    def put(key: Any, value: Any, path: str) -> None:
        key = str(key)
        if key in ("metrics", "profiling") and isinstance(value, Mapping):
            for sub, inner in value.items():
                put(f"{key}.{sub}", inner, f"{path}.{sub}")
            return
        flat[key], paths[key] = _environ(value, path, facts["problems"]), path

    for key, value in cfg.items():
        if key in _LOCATORS:  # a flat module config may say which framework it is for
            facts[key] = value
        elif key != "modules":
            put(key, value, str(key))
    modules = cfg.get("modules")
    if modules is None:
        return flat, paths, facts
    if not isinstance(modules, Mapping) or not modules:
        facts["problems"].append(("modules", f"{modules!r} is not a mapping of Primus modules"))
        return flat, paths, facts
    name = "pre_trainer" if "pre_trainer" in modules else None
    if name is None and len(modules) == 1:
        name = str(next(iter(modules)))
    if name is None:
        facts["problems"].append(
            ("modules", f"several modules {sorted(modules)}, none 'pre_trainer': keep one")
        )
        return flat, paths, facts
    facts["notes"] += [f"modules.{other} (only {name} is translated)" for other in modules
                       if other != name]  # fmt: skip
    module = modules[name]
    if not isinstance(module, Mapping):
        facts["problems"].append((f"modules.{name}", f"{module!r} is not a mapping"))
        return flat, paths, facts
    facts["module"] = name
    for key in _LOCATORS:
        facts[key] = module.get(key)
    for key, value in module.items():
        if key not in (*_LOCATORS, "overrides"):
            put(key, value, f"modules.{name}.{key}")
    overrides = module.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        facts["problems"].append((f"modules.{name}.overrides", f"{overrides!r} is not a mapping"))
        overrides = {}
    for key, value in overrides.items():
        put(key, value, f"modules.{name}.overrides.{key}")
    return flat, paths, facts


_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def _environ(value: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    """Primus's ``${VAR:default}`` placeholders filled from the environment.

    A value that is one placeholder is read as YAML (``${PROFILE:false}`` is ``False``).
    """
    if isinstance(value, Mapping):
        return {k: _environ(v, f"{path}.{k}", problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_environ(v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        default: str | None = match.group(2)  # None: no ":default" given
        found = os.environ.get(name, default)
        if found is None:
            problems.append((path, f"${{{name}}} is not set in the environment and has no "
                                   f"default; accepted: ${{{name}:default}}"))  # fmt: skip
            return ""
        return found

    filled = _PLACEHOLDER.sub(fill, value)
    if _PLACEHOLDER.fullmatch(value):
        import yaml  # type: ignore[import-untyped, unused-ignore]

        try:
            return yaml.safe_load(filled) if filled else None
        except yaml.YAMLError:
            return filled
    return filled


def secrets_in(flat: dict[str, Any], paths: dict[str, str]) -> list[tuple[str, str]]:
    """Credential-looking keys and values (the value is never quoted)."""
    found = []

    def walk(path: str, key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{path}.{k}", str(k), v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{path}[{i}]", key, v)
        elif is_secret_name(key.rsplit(".", 1)[-1]) and value not in (None, ""):
            found.append((path, _CREDENTIAL_KEY.format(key=key)))
        elif isinstance(value, str) and mask_secrets(value) != value:
            found.append((path, _CREDENTIAL_VALUE))

    for key, value in flat.items():
        walk(paths[key], key, value)
    return found
