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
    >>> check_choice("Run", "device", "cdua", ["cpu", "cuda"])
    Traceback (most recent call last):
    ...
    ValueError: Run device must be one of 'cpu', 'cuda', got 'cdua'. Did you mean 'cuda'?
"""

from __future__ import annotations

import contextlib
import difflib
import math
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict, TypeGuard, TypeVar, Unpack

__all__ = [
    "NotAFolderError",
    "NumberBounds",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_folder",
    "check_folder_at_init",
    "check_instance",
    "check_int",
    "check_iterable_of",
    "check_mapping",
    "check_number",
    "check_optional_bool",
    "check_optional_choice",
    "check_optional_int",
    "check_optional_number",
    "check_optional_str",
    "check_seconds",
    "check_str",
    "check_stream",
    "did_you_mean",
    "is_int",
    "is_number",
    "type_as_value_error",
]

T = TypeVar("T")


class NotAFolderError(NotADirectoryError, ValueError):
    """A path that must be a folder is an existing file.

    Both a ``NotADirectoryError`` (what the file system would say, later) and
    a ``ValueError`` (bad input, said at construction).
    """


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an int and not a bool (``True`` for a count is a mistake).

    For a place with its own message (a config reader that collects problems,
    a time string); a constructor argument takes :func:`check_int`.
    """
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object, *, real: bool = False) -> TypeGuard[float]:
    """Whether ``value`` is an int or float (any ``numbers.Real`` with ``real``), not a bool."""
    kinds: type | tuple[type, ...] = numbers.Real if real else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool)


def check_bool(owner: str, name: str, value: object) -> bool:
    """``value`` if it is a bool: ``'false'``, ``2`` and ``None`` are refused.

    A string is truthy whatever it says, so ``overwrite='false'`` would mean True.
    """
    if isinstance(value, bool):
        return value
    hint = ""
    if isinstance(value, str):
        hint = " To fix, pass the bool False or True, not a string (any non-empty one is true)."
    elif is_int(value):
        hint = f" To fix, pass {bool(value)} rather than the int."
    raise TypeError(f"{owner} {name} must be True or False, got {value!r}.{hint}")


def check_optional_bool(owner: str, name: str, value: object) -> bool | None:
    """``None`` (decide later, e.g. from the terminal), or what :func:`check_bool` accepts."""
    if value is None or isinstance(value, bool):
        return value
    raise TypeError(f"{owner} {name} must be True, False or None, got {value!r}.")


def check_stream(owner: str, name: str, value: object) -> Any:
    """``value`` if it is ``'stdout'``, ``'stderr'`` or a text stream (an object with ``write()``).

    ``None`` or a number would fail only at the first line printed, mid-run.
    """
    accepted = "'stdout', 'stderr' or a text stream (an object with write())"
    if isinstance(value, str):
        if value in ("stdout", "stderr"):
            return value
        hint = did_you_mean(value, ("stdout", "stderr"))
        raise ValueError(f"{owner} {name} must be {accepted}, got {value!r}.{hint}")
    if not callable(getattr(value, "write", None)):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    return value


def _int_hint(value: object) -> str:
    """How to fix a value that is nearly a whole number."""
    if isinstance(value, float) and value.is_integer():
        return f" To fix, pass {int(value)} rather than the float."
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return f" To fix, pass the int {int(value)}, not a string."
    return ""


def _bounds(low: float | None, high: float | None, *, open_low: bool = False) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if open_low else '>='} {low}")
    if high is not None:
        parts.append(f"<= {high}")
    return (" " + " and ".join(parts)) if parts else ""


def _check_int(
    owner: str, name: str, value: object, minimum: int, maximum: int | None, none: bool
) -> int | None:
    if none and value is None:
        return None
    accepted = f"a whole number{_bounds(minimum, maximum)}" + (" or None" if none else "")
    if not is_int(value):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.{_int_hint(value)}")
    assert isinstance(value, int)
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{owner} {name} must be {accepted}, got {value!r}.")
    return value


def check_int(
    owner: str, name: str, value: object, *, minimum: int = 0, maximum: int | None = None
) -> int:
    """``value`` if it is an int (not a bool) ``>= minimum`` (and ``<= maximum``, if given).

    A bool is an int to Python, but ``True`` for a count is a mistake.
    """
    checked = _check_int(owner, name, value, minimum, maximum, none=False)
    assert checked is not None
    return checked


def check_optional_int(
    owner: str, name: str, value: object, *, minimum: int = 0, maximum: int | None = None
) -> int | None:
    """``None``, or what :func:`check_int` accepts; the message says "or None"."""
    return _check_int(owner, name, value, minimum, maximum, none=True)


class NumberBounds(TypedDict, total=False):
    """The keywords :func:`check_number` and :func:`check_optional_number` take.

    Keys:
        minimum: the lowest value accepted (``None``, the default: no lower bound).
        maximum: the highest value accepted (``None``, the default: no upper bound).
        above: whether ``minimum`` itself is refused (``> minimum`` rather than
            ``>=``); default False.
        finite: whether inf is refused; default True.
        real: accept any ``numbers.Real`` (``numpy.float32``, ``Fraction``), not only
            int and float; default False.
        unit: words after "number" in the message, e.g. ``" of seconds"``; default ``""``.
    """

    minimum: float | None
    maximum: float | None
    above: bool
    finite: bool
    real: bool
    unit: str


def _check_number(
    owner: str,
    name: str,
    value: object,
    none: bool,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: bool = False,
    finite: bool = True,
    real: bool = False,
    unit: str = "",
) -> float | None:
    if none and value is None:
        return None
    accepted = (
        f"a{' finite' if finite else ''} number{unit}{_bounds(minimum, maximum, open_low=above)}"
        + (" or None" if none else "")
    )
    if not is_number(value, real=real):
        hint = ""
        if isinstance(value, str):
            hint = " To fix, pass the number, not a string."
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.{hint}")
    number = float(value)
    if (
        math.isnan(number)
        or (finite and math.isinf(number))
        or (minimum is not None and (number <= minimum if above else number < minimum))
        or (maximum is not None and number > maximum)
    ):
        raise ValueError(f"{owner} {name} must be {accepted}, got {value!r}.")
    return value


def check_number(owner: str, name: str, value: object, **bounds: Unpack[NumberBounds]) -> float:
    """``value``, unchanged, if it is an int or float (not a bool) within the bounds.

    nan is always refused (it compares false with every bound); inf is refused
    unless ``finite=False``.

    Args:
        owner: who checks, e.g. ``"SpeedMonitor"``.
        name: the parameter, e.g. ``"window_size"``.
        value: what the caller passed.
        **bounds: keyword-only, each optional (see :class:`NumberBounds`):
            ``minimum``, ``maximum``, ``above``, ``finite``, ``real``, ``unit``.
    """
    checked = _check_number(owner, name, value, False, **bounds)
    assert checked is not None
    return checked


def check_optional_number(
    owner: str, name: str, value: object, **bounds: Unpack[NumberBounds]
) -> float | None:
    """``None``, or what :func:`check_number` accepts; the message says "or None"."""
    return _check_number(owner, name, value, True, **bounds)


def _check_choice(
    owner: str, name: str, value: object, choices: Iterable[str], none: bool
) -> str | None:
    if none and value is None:
        return None
    options = list(choices)
    accepted = "one of " + ", ".join(repr(c) for c in options) + (" or None" if none else "")
    if not isinstance(value, str):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    if value in options:
        return value
    hint = did_you_mean(value, options)
    raise ValueError(f"{owner} {name} must be {accepted}, got {value!r}.{hint}")


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the choice nearest ``value`` (another case first), or ``""``."""
    options = list(choices)
    close = [c for c in options if c.lower() == value.strip().lower()]
    close = close or difflib.get_close_matches(value, options, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def check_choice(owner: str, name: str, value: object, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices``.

    A near miss (a typo, another case) gets a "Did you mean ...?" from :mod:`difflib`.
    """
    checked = _check_choice(owner, name, value, choices, none=False)
    assert checked is not None
    return checked


def check_optional_choice(
    owner: str, name: str, value: object, choices: Iterable[str]
) -> str | None:
    """``None``, or what :func:`check_choice` accepts; the message says "or None"."""
    return _check_choice(owner, name, value, choices, none=True)


def check_instance(
    owner: str,
    name: str,
    value: object,
    kind: type[T] | tuple[type, ...],
    *,
    accepted: str = "",
    allow_none: bool = False,
) -> Any:
    """``value`` if it is a ``kind`` (or ``None`` where allowed).

    A bool is refused where it would pass only as an ``int`` (``(str, int)``
    for a device index: ``True`` is not device 1). ``accepted`` says what is
    accepted, for the message; by default the type's name.
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (allow_none and value is None) or (
        isinstance(value, kinds)
        and (
            not isinstance(value, bool)
            or isinstance(value, tuple(k for k in kinds if k is not int))
        )
    ):
        return value
    if not accepted:
        accepted = " or ".join(f"a {k.__name__}" for k in kinds)
    accepted += " or None" if allow_none else ""
    raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")


def check_seconds(owner: str, name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` as a finite float of seconds, ``> 0`` (``>= 0`` with ``allow_zero``).

    A timeout or backoff of nan compares false with everything, so a wait on
    it ends at once or never; inf never ends; 0 waits for nothing.
    """
    return float(
        check_number(owner, name, value, minimum=0, above=not allow_zero, unit=" of seconds")
    )


def check_str(owner: str, name: str, value: object) -> str:
    """``value`` if it is a non-empty str."""
    if not isinstance(value, str):
        raise TypeError(f"{owner} {name} must be a non-empty str, got {value!r}.")
    if not value:
        raise ValueError(f"{owner} {name} must be a non-empty str, got {value!r}.")
    return value


def check_optional_str(
    owner: str, name: str, value: object, *, allow_empty: bool = False
) -> str | None:
    """``None``, or a str (non-empty unless ``allow_empty``)."""
    if value is None:
        return None
    accepted = ("a str" if allow_empty else "a non-empty str") + " or None"
    if not isinstance(value, str):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    if not value and not allow_empty:
        raise ValueError(f"{owner} {name} must be {accepted}, got {value!r}.")
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
        raise TypeError(f"{owner} {name} must be {accepted}, got {_masked_repr(value)}.")
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{owner} {name} must be {accepted}; the key {key!r} is not a str.")
        if values is not None and not values(item):
            raise TypeError(
                f"{owner} {name} must be {accepted}; {key!r} holds {_masked_repr(item)}."
            )
    return dict(value)


def _masked_repr(value: object) -> str:
    """``repr(value)`` with its secrets masked: a wrong hyperparameters object (a Namespace
    holding a token) must not print the token in the error that refuses it."""
    from obsbus.masking import mask_secrets

    return mask_secrets(repr(value))


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


@contextlib.contextmanager
def type_as_value_error() -> Iterator[None]:
    """Re-raise a check's ``TypeError`` as a ``ValueError``, with the same message.

    For the few arguments whose wrong type has always been a ``ValueError``
    (Composer raises one for ``State(run_name=3)``): the message stays the
    shared one, the exception type stays what callers catch.

    Example:
        >>> with type_as_value_error():
        ...     check_int("X", "n", "3")
        Traceback (most recent call last):
        ...
        ValueError: X n must be a whole number >= 0, got '3'. To fix, pass the int 3, not a string.
    """
    try:
        yield
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def short(items: list[Any]) -> str:
    """``repr(items)``, cut to 200 characters for a message."""
    text = repr(items)
    return text if len(text) <= 200 else text[:197] + "..."
