"""The JSON Lines :class:`~obsbus.loggers.FileLogger` writes, and the repair before appending.

Rows are encoded on the writer thread, with encoders built once. Ints beyond
int64 become floats (pandas can't read them); NaN and ±inf stay Python's
``NaN``/``Infinity`` tokens. A last line a killed run left half-written is
cut before a resumed run appends, so the file never holds a corrupt line in
its middle.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

__all__ = ["drop_torn_tail", "encode_table", "json_line"]

log = logging.getLogger("obsbus")

#: ``json.dumps(obj, default=str)`` without an encoder built per call (5-key row: 15 -> 9 µs).
#: NaN and ±inf stay Python's ``NaN``/``Infinity`` tokens (FileLogger's docstring says why).
_encode = json.JSONEncoder(default=str, check_circular=False, allow_nan=True).encode
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: A table as pandas' ``to_json(orient="split", index=False)`` writes it (Composer's lines).
encode_table = json.JSONEncoder(default=str, separators=(",", ":")).encode


def json_line(row: dict[str, Any]) -> str:
    """One JSON Lines row; ints beyond int64 become floats, as pandas can't read them."""
    for value in row.values():  # on the writer thread; a few type checks a row
        kind = type(value)
        if (kind is int and not _INT64_MIN <= value <= _INT64_MAX) or kind is list or kind is dict:
            return _encode({key: _int64_safe(v) for key, v in row.items()})
    return _encode(row)


def _int64_safe(value: Any) -> Any:
    if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
        try:
            return float(value)
        except OverflowError:  # beyond the float range too: its digits, as text
            return str(value)
    if type(value) is list:
        return [_int64_safe(v) for v in value]
    if type(value) is dict:
        return {key: _int64_safe(v) for key, v in value.items()}
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
