"""The constructor arguments each plug-in was built with, for ``config/plugins.json``.

:func:`record_init_args` wraps a class's own ``__init__`` once. The outermost
call (the most derived class's) binds its arguments with
:func:`inspect.signature`, applies the defaults and keeps them outside the
object, keyed by its ``id`` and dropped when it is garbage collected: nothing
appears in ``vars()``, nothing is pickled, ``state_dict`` is untouched. An
object that can't be weakly referenced, or a copy made by ``copy``/``pickle``,
has no record; :func:`init_args` then returns ``None``.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["init_args", "record_init_args"]

T = TypeVar("T", bound=type)
_RECORDS: dict[int, tuple[weakref.ref[Any], dict[str, Any]]] = {}
_MARK = "_obsbus_records_init_args"


def _forget(key: int) -> Callable[[weakref.ref[Any]], None]:
    def forget(_ref: weakref.ref[Any]) -> None:
        _RECORDS.pop(key, None)

    return forget


def init_args(obj: object) -> dict[str, Any] | None:
    """The arguments ``obj``'s outermost ``__init__`` was called with, defaults applied."""
    entry = _RECORDS.get(id(obj))
    return entry[1] if entry is not None and entry[0]() is obj else None


def _bind(sig: inspect.Signature, self: object, args: Any, kwargs: Any) -> None:
    if init_args(self) is not None:
        return  # an outer __init__ already recorded its arguments
    try:
        bound = sig.bind(self, *args, **kwargs)
        ref = weakref.ref(self, _forget(id(self)))
    except TypeError:
        return  # a wrong call is the real __init__'s to report; no weakref slot: no record
    bound.apply_defaults()
    recorded = dict(bound.arguments)
    recorded.pop(next(iter(sig.parameters)), None)
    _RECORDS[id(self)] = (ref, recorded)


def record_init_args(cls: T) -> T:
    """Record the constructor arguments of ``cls``'s instances (once per class)."""
    init = cls.__dict__.get("__init__")
    if init is None or getattr(init, _MARK, False):
        return cls
    try:
        sig = inspect.signature(init)
    except (TypeError, ValueError):
        return cls
    if not sig.parameters:
        return cls

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _bind(sig, self, args, kwargs)
        init(self, *args, **kwargs)

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__  # type: ignore[misc]
    return cls
