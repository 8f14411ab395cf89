"""Error messages without secrets: :func:`mask_error` and :func:`masks_errors`.

Re-exported by :mod:`obsbus.masking`; here so that module stays short.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["mask_error", "masks_errors"]

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E", bound=BaseException)


def mask_error(exc: E) -> E:
    """``exc`` with its str arguments masked in place, and those of its causes; returned.

    The exception keeps its type and traceback, so ``raise mask_error(exc)``
    (or a bare ``raise`` after the call) reads as the original, without secrets.

    Example:
        >>> str(mask_error(ValueError("bad uri 's3://ada:hunter2@b/x'")))
        "bad uri 's3://***@b/x'"
    """
    from obsbus.masking import mask_value

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.args = tuple(mask_value(a) if isinstance(a, str) else a for a in current.args)
        current = current.__cause__ or current.__context__
    return exc


def masks_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a constructor (or any function) whose ``TypeError``/``ValueError`` messages
    quote its arguments, so they never show a secret in them (:func:`mask_error`).

    Example:
        >>> @masks_errors
        ... def connect(uri):
        ...     raise ValueError(f"cannot reach {uri!r}")
        >>> connect("postgresql://admin:hunter2@db/x")
        Traceback (most recent call last):
        ...
        ValueError: cannot reach 'postgresql://***@db/x'
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (TypeError, ValueError) as exc:
            mask_error(exc)
            raise

    return wrapper
