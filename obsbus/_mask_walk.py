"""The walk :func:`obsbus.masking.mask_value` makes through a value: containers and objects.

Not API. Hyperparameters are often objects -- a dataclass, an
``argparse.Namespace``, a pydantic model, an OmegaConf config -- and a
destination prints them whole (``str``/``repr``), secrets and all. So every
object that holds settings is opened into a ``dict`` of its fields, walked
like a dict (each str masked by the same rules, the str under a secret name
masked whole), and handed on as that dict: trackers flatten it like one
(``cfg/lr``). Nothing is ``repr()``-ed first: a repr hides a field's name
from the rules that mask by name. The module imports none of those
libraries; each shape is known by what the object has.

Values that are not containers or records stay as they are, unless their
text (``str`` or ``repr``) holds a secret: then they become their masked
``str``. Tensors and arrays are never turned into text (that would read
them). A cycle becomes ``"<cycle>"``; a value nested deeper than
:data:`MAX_DEPTH` becomes ``"<... nested too deep>"``, not shown, since its
strings were not masked.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any

from obsbus._secret_shapes import MASK, is_secret_name

__all__ = ["MAX_DEPTH", "record_fields", "walk"]

#: Containers and records nested deeper than this are not shown (their strings are not masked).
MAX_DEPTH = 32
_SCALARS = (bool, int, float, complex, type(None))
_NOT_SEQUENCES = (str, bytes, bytearray, memoryview, range)
# Whose text is never made: making it would read a tensor or print a whole model.
_NEVER_TEXT = frozenset({"torch", "numpy", "jax", "jaxlib", "cupy", "tensorflow"})


def _omegaconf_container(value: Any) -> Any:
    """A ``DictConfig``/``ListConfig`` as plain dicts and lists, interpolations resolved
    where they resolve; ``???`` stays ``"???"``."""
    omegaconf = sys.modules.get("omegaconf")
    if omegaconf is None or not omegaconf.OmegaConf.is_config(value):
        return None
    try:
        return omegaconf.OmegaConf.to_container(value, resolve=True)
    except Exception:  # an interpolation that does not resolve: show it as written
        return omegaconf.OmegaConf.to_container(value, resolve=False)


def _public_attributes(value: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for klass in reversed(type(value).__mro__):
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if not name.startswith("_") and hasattr(value, name):
                fields[name] = getattr(value, name)
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        fields.update((k, v) for k, v in attributes.items() if not k.startswith("_"))
    return fields


def _plain_text(kind: type) -> bool:
    """Whether ``kind`` prints as ``<... object at 0x...>`` (keeps ``object``'s repr and str)."""
    repr_of: object = kind.__repr__
    str_of: object = kind.__str__
    return repr_of is object.__repr__ and str_of is object.__str__


def _named(value: Any, names: Any) -> dict[str, Any]:
    missing = object()
    got = {str(name): getattr(value, str(name), missing) for name in names}
    return {name: field for name, field in got.items() if field is not missing}


def record_fields(value: Any) -> Any:
    """What the record ``value`` holds, as plain data: a dict of its fields (a list for an
    OmegaConf ``ListConfig``); ``None`` if ``value`` is not a record.

    Records: dataclass instances, attrs instances, pydantic v2 and v1 models (their
    fields and extras), ``argparse.Namespace``, ``types.SimpleNamespace``, OmegaConf
    configs, and any other object whose class keeps ``object``'s ``repr`` and ``str``
    (it prints as ``<Config object at 0x...>``): its public attributes, from
    ``__dict__`` and ``__slots__``. An object with a ``repr`` of its own (a tensor, a
    ``Timestamp``, a path, a date, an enum) is a value, not a record; so is a pydantic
    ``SecretStr``, which hides itself.

    Example:
        >>> import argparse
        >>> record_fields(argparse.Namespace(lr=0.1, api_key="k"))
        {'lr': 0.1, 'api_key': 'k'}
        >>> record_fields(0.1) is None, record_fields("text") is None
        (True, True)
    """
    kind = type(value)
    if isinstance(value, type) or hasattr(kind, "get_secret_value"):
        return None
    if kind.__module__.startswith("omegaconf"):
        return _omegaconf_container(value)
    if dataclasses.is_dataclass(value):
        return _named(value, (f.name for f in dataclasses.fields(value)))
    if hasattr(kind, "__attrs_attrs__"):
        return _named(value, (a.name for a in kind.__attrs_attrs__))
    if isinstance(getattr(kind, "model_fields", None), dict) and hasattr(value, "model_dump"):
        extra = getattr(value, "__pydantic_extra__", None)  # pydantic v2
        return _named(value, kind.model_fields) | (extra if isinstance(extra, dict) else {})
    if isinstance(getattr(kind, "__fields__", None), dict) and hasattr(value, "__fields_set__"):
        return _named(value, kind.__fields__)  # pydantic v1
    argparse = sys.modules.get("argparse")
    if isinstance(value, types.SimpleNamespace) or (
        argparse is not None and isinstance(value, argparse.Namespace)
    ):
        return dict(vars(value))
    if _plain_text(kind):
        return _public_attributes(value) or None
    return None


def _never_text(value: Any) -> bool:
    kind = type(value)  # the class's attributes: an instance's __getattr__ may raise anything
    if hasattr(kind, "__dlpack__") or hasattr(kind, "__array_interface__"):
        return True
    return any(k.__module__.partition(".")[0] in _NEVER_TEXT for k in kind.__mro__)


def _as_text(value: Any, mask: Callable[[str], str]) -> Any:
    """``value``, or its masked ``str`` if its text shows a secret."""
    if _never_text(value):
        return value
    try:
        text, shown = str(value), repr(value)
    except Exception:  # a destination that prints it fails the same way, and says so
        return value
    masked = mask(text)
    if masked != text or mask(shown) != shown:
        return masked
    return value


def _rebuilt(value: Any, items: list[Any]) -> Any:
    kind = type(value)
    try:
        if hasattr(value, "_fields"):  # a namedtuple
            return kind(*items)
        return kind(items)
    except Exception:  # a set of records (now unhashable dicts), a tuple subclass
        return items


def walk(value: Any, mask: Callable[[str], str]) -> Any:
    """``value`` with every str in it masked by ``mask``, records opened into dicts."""
    return _walk(value, mask, 0, set(), False)


def _walk(value: Any, mask: Callable[[str], str], depth: int, path: set[int], secret: bool) -> Any:
    # ``path``: the ids of the containers above (a cycle guard); ``secret``: ``value`` sits
    # under a secret name (a str in a sequence under ``credentials`` is masked whole).
    if isinstance(value, str):
        return MASK if secret and value else mask(value)
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (bytes, bytearray)):
        return MASK if secret and value else _as_text(value, mask)
    kind = type(value)
    opened = None
    if kind is not dict and kind is not list and kind is not tuple:
        try:
            opened = record_fields(value)
        except Exception:  # an odd __getattr__: the object is shown as a value, masked
            opened = None
    if opened is None and not isinstance(value, (Mapping, Sequence, Set)):
        if isinstance(value, os.PathLike):
            text = os.fspath(value)
            if isinstance(text, str) and mask(text) != text:
                return mask(text)
            return value
        return MASK if secret else _as_text(value, mask)
    if isinstance(value, _NOT_SEQUENCES):
        return _as_text(value, mask)
    if id(value) in path:
        return "<cycle>"
    if depth >= MAX_DEPTH:
        return f"<{kind.__name__} nested too deep>"
    path.add(id(value))
    try:
        if opened is not None:
            return _walk(opened, mask, depth + 1, path, secret)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for key, inner in value.items():
                named = isinstance(key, str) and is_secret_name(key)
                out[mask(key) if isinstance(key, str) else key] = _walk(
                    inner, mask, depth + 1, path, named
                )
            return out
        items = [_walk(v, mask, depth + 1, path, secret) for v in value]
        if isinstance(value, (list, tuple, set, frozenset)):
            return _rebuilt(value, items)
        return items  # any other sequence (a deque, a UserList)
    finally:
        path.discard(id(value))
