"""Near-miss hook names: a method that was probably meant to be a hook, and never runs.

Other trainers spell their hooks ``on_train_batch_end`` (Lightning, Keras) or
``on_step_end`` (transformers); a typo such as ``after_backwards`` is as
silent. The engine asks :func:`near_misses` about every plug-in it takes and
warns with what to write instead.

The rules, applied to public methods that are not themselves obsbus names:

1. Rewrites that other trainers' names need: a leading ``on_`` is dropped
   (then ``train_`` is dropped, ``validation_``/``val_``/``test_`` become
   ``eval_``, and a few whole names are mapped, e.g. ``train_start`` to
   ``fit_start``); ``pre_``/``post_`` become ``before_``/``after_``;
   ``_begin`` becomes ``_start``; a leading ``after_``/``before_`` is
   dropped (``after_batch_end``); a plural ``s`` is dropped.
2. One edit (a letter added, dropped, changed, or two swapped) from a hook of
   seven letters or more, before or after those rewrites.

Skipped, so helpers stay quiet: names starting with ``_``, bare words that
only a prefix would make a hook (``forward``, ``loss``: both ``before_`` and
``after_`` fit, and they are common helper names), names whose suggestion the
class already defines, and every class that overrides ``run_event`` (its
``run_event`` may call whatever it likes).
"""

from __future__ import annotations

import inspect
import sys
import warnings
import weakref
from typing import Any

from obsbus.callback import Callback
from obsbus.errors import ObsbusWarning
from obsbus.event import Event
from obsbus.logger import LoggerDestination

__all__ = ["near_misses", "user_stacklevel", "warn_near_misses"]

_HOOK_NAMES = frozenset(event.value for event in Event)
_CALLBACK_NAMES = frozenset(name for name in dir(Callback) if not name.startswith("_"))
_DESTINATION_NAMES = frozenset(name for name in dir(LoggerDestination) if not name.startswith("_"))
#: Whole names (after ``on_`` and the prefix rewrites) of other trainers' hooks.
_ALIASES = {
    "train_start": "fit_start",
    "train_end": "fit_end",
    "step_start": "batch_start",
    "step_end": "batch_end",
    "init_start": "init",
    "init_end": "init",
    "eval_epoch_start": "eval_start",
    "eval_epoch_end": "eval_end",
}
#: Whole names, with no ``on_``, of other libraries' methods.
_NAME_ALIASES = {"log_hyperparams": "log_hyperparameters"}  # Lightning's Logger
_EVAL_PREFIXES = ("validation_", "valid_", "val_", "test_")
_MIN_EDIT_LENGTH = 7  # shorter hooks (init) are one letter away from ordinary words (unit)
_CACHE: weakref.WeakKeyDictionary[type, tuple[tuple[str, str], ...]] = weakref.WeakKeyDictionary()


def near_misses(cls: type) -> tuple[tuple[str, str], ...]:
    """``(method, probable hook)`` for each method of ``cls`` that looks like a misspelt hook.

    Example:
        >>> class Mine(Callback):
        ...     def on_batch_end(self, state, logger): ...
        ...     def after_backwards(self, state, logger): ...
        ...     def summary(self): ...
        >>> near_misses(Mine)
        (('after_backwards', 'after_backward'), ('on_batch_end', 'batch_end'))
    """
    try:
        return _CACHE[cls]
    except KeyError:
        pass
    found: tuple[tuple[str, str], ...] = ()
    if issubclass(cls, Callback) and _own(cls, "run_event") is None:
        targets = _DESTINATION_NAMES if issubclass(cls, LoggerDestination) else _CALLBACK_NAMES
        pairs = []
        for name in sorted(_methods(cls)):
            if name.startswith("_") or name in targets:
                continue
            meant = _probable(name, targets)
            if meant is not None and _own(cls, meant) is None:
                pairs.append((name, meant))
        found = tuple(pairs)
    _CACHE[cls] = found
    return found


def warn_near_misses(plugin: object) -> None:
    """Warn (:class:`~obsbus.ObsbusWarning`) once per method :func:`near_misses` finds."""
    cls = type(plugin)
    pairs = near_misses(cls)
    if not pairs:
        return
    level = user_stacklevel()
    for name, meant in pairs:
        what = "hook" if meant in _HOOK_NAMES else "method"
        warnings.warn(
            f"{cls.__qualname__}.{name} is not an obsbus {what}, so nothing ever calls it; "
            f"did you mean {meant!r}? To fix, rename it to {meant} (obsbus hooks are named "
            "after the Event values, as in Composer: no 'on_' prefix), or start its name with "
            "'_' if it is a helper.",
            ObsbusWarning,
            stacklevel=level,
        )


def _own(cls: type, name: str) -> object:
    """What ``cls`` defines as ``name`` below the obsbus base classes, or ``None``."""
    for klass in cls.__mro__:
        if klass in (Callback, LoggerDestination, object):
            return None
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _methods(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (Callback, LoggerDestination, object):
            break
        for name, value in vars(klass).items():
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                names.add(name)
    return names


def _probable(name: str, targets: frozenset[str]) -> str | None:
    variants = _rewrites(name)
    for variant in variants:
        if variant in targets:
            return variant
    for variant in (name, *variants):
        for target in sorted(targets):
            if len(target) >= _MIN_EDIT_LENGTH and _one_edit(variant, target):
                return target
    return None


def _rewrites(name: str) -> list[str]:
    """The names ``name`` may have been meant as, by rule 1."""
    foreign = name.startswith("on_")
    candidates = [_affixes(name)]
    if foreign:
        stem = _affixes(name[3:])
        candidates += [stem, _ALIASES.get(stem, stem)]
        stem = stem.removeprefix("train_")
        for prefix in _EVAL_PREFIXES:
            if stem.startswith(prefix):
                stem = "eval_" + stem[len(prefix) :]
                break
        candidates += [stem, _ALIASES.get(stem, stem)]
    candidates.append(_NAME_ALIASES.get(name, name))
    for prefix in ("after_", "before_"):  # after_batch_end, before_fit_start
        if name.startswith(prefix):
            candidates.append(name[len(prefix) :])
    out: list[str] = []
    for candidate in candidates:
        out.append(candidate)
        if candidate.endswith("s"):
            out.append(candidate[:-1])
    return [v for v in out if v != name]


def _affixes(stem: str) -> str:
    for old, new in (("pre_", "before_"), ("post_", "after_")):
        if stem.startswith(old):
            stem = new + stem[len(old) :]
    if stem.endswith("_begin"):
        stem = stem[: -len("_begin")] + "_start"
    return stem


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` becomes ``b`` by one insertion, deletion, substitution or swap."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return True
        i, j = diff[0], diff[-1]
        return len(diff) == 2 and j == i + 1 and a[i] == b[j] and a[j] == b[i]
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1 :]


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside obsbus."""
    frame: Any = sys._getframe(1)
    level = 1
    while frame is not None and _in_obsbus(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
        level += 1
    return level


def _in_obsbus(module: str) -> bool:
    return module == "obsbus" or module.startswith("obsbus.")
