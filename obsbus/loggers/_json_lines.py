"""The JSON Lines :class:`~obsbus.loggers.FileLogger` writes, and the repair before appending.

Rows are encoded on the writer thread, with encoders built once, as strict
JSON (RFC 8259: what ``jq`` and JavaScript's ``JSON.parse`` read). A
non-finite float is written as the string ``"NaN"``, ``"Infinity"`` or
``"-Infinity"`` (the protobuf JSON mapping's choice: ``float(value)`` gives
it back in any language, and the three stay apart). Ints beyond int64 become
floats (pandas can't read them), beyond the float range their digits as a
string. A value that still can't be encoded is left out of its row and
reported by key; the row's other values are written. A last line a killed
run left half-written is cut before a resumed run appends, so the file never
holds a corrupt line in its middle.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "drop_torn_tail", "encode_table", "json_line", "non_finite"]

log = logging.getLogger("obsbus")

#: ``json.dumps(obj, default=str)`` without an encoder built per call (5-key row: 15 -> 9 µs).
#: ``allow_nan=False``: a non-finite float raises, and the row takes the slow path below.
_encode = json.JSONEncoder(default=str, check_circular=False, allow_nan=False).encode
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: A table as pandas' ``to_json(orient="split", index=False)`` writes it (Composer's lines).
encode_table = json.JSONEncoder(default=str, separators=(",", ":")).encode
#: The columns FileLogger writes in every row; a metric of one of these names is written as
#: ``metric:<name>`` (see FileLogger), so it never replaces the column.
COLUMNS = frozenset({"step", "epoch", "batch", "wall_time"})
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def non_finite(value: float) -> str:
    """The string a non-finite float is written as: ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``.

    Example:
        >>> non_finite(float("nan")), non_finite(float("-inf")), float(non_finite(float("inf")))
        ('NaN', '-Infinity', inf)
    """
    return _NON_FINITE.get(value, "NaN")


def json_line(row: dict[str, Any], skip: Callable[[str, str], None] | None = None) -> str:
    """One strict JSON Lines row (see the module); ``skip(key, reason)`` hears of each value
    left out because it could not be encoded (without ``skip`` the error is raised)."""
    try:
        return _encode(_portable_row(row))
    except _ENCODE_ERRORS:
        if skip is None:
            raise
    kept: dict[str, Any] = {}
    for key, value in row.items():  # the one bad value costs no other
        try:
            _encode(_portable_row({key: value}))
        except _ENCODE_ERRORS as exc:
            skip(key, f"it can't be written as JSON ({type(exc).__name__}: {exc})")
            continue
        kept[key] = value
    return _encode(_portable_row(kept))


_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)


def _portable_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` itself when every value encodes as it is (the usual row: a few type checks),
    else a copy with non-finite floats and big ints made portable (:func:`_portable`)."""
    for value in row.values():
        kind = type(value)
        if (
            (kind is float and not math.isfinite(value))
            or (kind is int and not _INT64_MIN <= value <= _INT64_MAX)
            or kind is list
            or kind is dict
        ):
            return {key: _portable(v) for key, v in row.items()}
    return row


def _portable(value: Any) -> Any:
    kind = type(value)
    if kind is float and not math.isfinite(value):
        return non_finite(value)
    if kind is int and not _INT64_MIN <= value <= _INT64_MAX:
        try:
            return float(value)
        except OverflowError:  # beyond the float range too: its digits, as text
            return str(value)
    if kind is list:
        return [_portable(v) for v in value]
    if kind is dict:
        return {key: _portable(v) for key, v in value.items()}
    return value


def drop_torn_tail(path: Path) -> None:
    """Cut a last line the previous run did not finish (killed mid-write, disk full).

    Appending after it would leave a corrupt line in the middle of the file.
    """
    if not path.is_file():
        return
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return
        keep = 0
        pos = end
        while pos > 0:  # back to the last whole line, a block at a time
            start = max(pos - 65536, 0)
            f.seek(start)
            newline = f.read(pos - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            pos = start
        f.truncate(keep)
    log.warning(
        "obsbus: FileLogger: the last line of %r was cut short (the previous run was killed "
        "while writing it); its %d byte(s) are dropped before appending.",
        str(path),
        end - keep,
    )
