"""Argument checks every public constructor shares, so bad input fails the same clear way.

Each check takes the owner (``"FileLogger"``) and the parameter's name, and
raises ``TypeError`` for a wrong type or ``ValueError`` for a wrong value,
with the value quoted (``{value!r}``) and what is accepted. They run once, at
construction: none of them is on a hot path. Time strings, write periods,
log intervals and file-name templates have their own checks
(:class:`~obsbus.time.Time`, :class:`~obsbus.writer.WritePeriod`,
:class:`~obsbus.interval.LogInterval`, :func:`~obsbus.naming.check_placeholders`).

Example:
    >>> check_bool("FileLogger", "overwrite", "false")
    Traceback (most recent call last):
    ...
    TypeError: FileLogger overwrite must be True or False, got 'false'. To fix, pass the bool ...
    >>> check_seconds("WandBLogger", "close_timeout", float("inf"))
    Traceback (most recent call last):
    ...
    ValueError: WandBLogger close_timeout must be a finite number of seconds > 0, got inf.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "NotAFolderError",
    "check_bool",
    "check_callable",
    "check_folder",
    "check_folder_at_init",
    "check_int",
    "check_iterable_of",
    "check_mapping",
    "check_seconds",
    "check_str",
]

T = TypeVar("T")


class NotAFolderError(NotADirectoryError, ValueError):
    """A path that must be a folder is an existing file.

    Both a ``NotADirectoryError`` (what the file system would say, later) and
    a ``ValueError`` (bad input, said at construction).
    """


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_bool(owner: str, name: str, value: object) -> bool:
    """``value`` if it is a bool: ``'false'``, ``2`` and ``None`` are refused.

    A string is truthy whatever it says, so ``overwrite='false'`` would mean True.
    """
    if isinstance(value, bool):
        return value
    hint = ""
    if isinstance(value, str):
        hint = " To fix, pass the bool False or True, not a string (any non-empty one is true)."
    elif _is_int(value):
        hint = f" To fix, pass {bool(value)} rather than the int."
    raise TypeError(f"{owner} {name} must be True or False, got {value!r}.{hint}")


def check_int(owner: str, name: str, value: object, *, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) ``>= minimum``."""
    accepted = f"a whole number >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{owner} {name} must be {accepted}, got {value!r}.")
    return value


def check_seconds(owner: str, name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` as a finite float of seconds, ``> 0`` (``>= 0`` with ``allow_zero``).

    A timeout or backoff of nan compares false with everything, so a wait on
    it ends at once or never; inf never ends; 0 waits for nothing.
    """
    accepted = f"a finite number of seconds {'>= 0' if allow_zero else '> 0'}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{owner} {name} must be {accepted}, got {value!r}.")
    return seconds


def check_str(owner: str, name: str, value: object) -> str:
    """``value`` if it is a non-empty str."""
    if not isinstance(value, str):
        raise TypeError(f"{owner} {name} must be a non-empty str, got {value!r}.")
    if not value:
        raise ValueError(f"{owner} {name} must be a non-empty str, got {value!r}.")
    return value


def check_callable(owner: str, name: str, value: T, *, allow_none: bool = True) -> T:
    """``value`` if it can be called (or is ``None`` where allowed)."""
    if (allow_none and value is None) or callable(value):
        return value
    accepted = "a function" + (" or None" if allow_none else "")
    raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")


def check_iterable_of(
    owner: str,
    name: str,
    value: object,
    kind: type | tuple[type, ...],
    *,
    accepted: str,
    allow_none: bool = False,
    allow_single: bool = False,
) -> list[Any]:
    """``value`` as a list whose every item is a ``kind``; ``None`` gives ``[]`` where allowed.

    A str is refused rather than read as its characters. With ``allow_single``,
    one ``kind`` on its own is taken as a list of one.

    Args:
        owner: who checks, e.g. ``"Trainer"``.
        name: the parameter, e.g. ``"callbacks"``.
        value: what the caller passed.
        kind: the type (or types) of each item.
        accepted: what is accepted, for the message, e.g. ``"a list of Callback"``.
        allow_none: whether ``None`` means "none".
        allow_single: whether one item on its own is accepted.
    """
    if allow_none and value is None:
        return []
    if allow_single and isinstance(value, kind):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    items = list(value)
    for item in items:
        if not isinstance(item, kind):
            raise TypeError(
                f"{owner} {name} must be {accepted}, got {item!r} among {short(items)}."
            )
    return items


def check_mapping(
    owner: str,
    name: str,
    value: object,
    *,
    allow_none: bool = True,
    values: Callable[[Any], bool] | None = None,
    accepted_values: str = "",
) -> dict[str, Any]:
    """``value`` as a dict with str keys (``{}`` for ``None`` where allowed).

    ``values``, if given, tests each value; ``accepted_values`` says what passes.
    """
    if allow_none and value is None:
        return {}
    accepted = "a dict with str keys" + (f" and {accepted_values} values" if values else "")
    if not isinstance(value, Mapping):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{owner} {name} must be {accepted}; the key {key!r} is not a str.")
        if values is not None and not values(item):
            raise TypeError(f"{owner} {name} must be {accepted}; {key!r} holds {item!r}.")
    return dict(value)


def check_folder(owner: str, name: str, value: object, *, allow_none: bool = False) -> Path | None:
    """``value`` as a ``Path`` if it can be a folder; ``None`` where allowed.

    An absolute path (after ``~``) that is an existing file is refused now. A
    relative one resolves against the run folder, and placeholders are filled,
    only at ``init``: :func:`check_folder_at_init` checks those there.
    """
    if allow_none and value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        accepted = "a folder path (str or os.PathLike)" + (" or None" if allow_none else "")
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    path = Path(value).expanduser()
    if path.is_absolute() and "{" not in str(path):
        check_folder_at_init(owner, name, path)
    return path


def check_folder_at_init(owner: str, name: str, path: Path) -> Path:
    """``path`` unless it exists and is not a folder (:class:`NotAFolderError`)."""
    if path.exists() and not path.is_dir():
        raise NotAFolderError(
            f"{owner} {name} must be a folder, and {str(path)!r} is an existing file. "
            "To fix, remove the file or choose another folder."
        )
    return path


def short(items: list[Any]) -> str:
    """``repr(items)``, cut to 200 characters for a message."""
    text = repr(items)
    return text if len(text) <= 200 else text[:197] + "..."
