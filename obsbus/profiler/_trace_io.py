"""Chrome trace files as :func:`~obsbus.profiler.merge_traces` reads and writes them. Not API.

Reading takes gzip (recognised by its magic bytes, several members, a stream
cut short) and a bare array of events whose closing ``]`` (and perhaps a
torn last event) is missing, as a crashed writer leaves it. Writing is one
event per line, to a temporary file renamed into place. Only the standard
library is used, so ``obsbus merge-traces`` stays light.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import warnings
import zlib
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["read_trace", "write_trace"]


def read_trace(raw: bytes, label: str) -> Any:
    """The JSON document in ``raw`` (gzip or not; an array may be left open); ``label`` names it."""
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, label)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{label} is not a JSON trace: not UTF-8 text ({err}).") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("["):
            return _parse_open_array(text, label, err)
        raise ValueError(f"{label} is not valid JSON: {err}.") from None


def _gunzip(raw: bytes, label: str) -> bytes:
    parts = []
    while raw[:2] == b"\x1f\x8b":  # a .gz may hold several members
        stream = zlib.decompressobj(wbits=31)
        try:
            parts.append(stream.decompress(raw))
        except zlib.error as err:
            raise ValueError(f"{label} looks gzip-compressed but can not be read: {err}.") from None
        if not stream.eof:
            warnings.warn(
                f"{label}: the gzip stream is cut short; reading what was written.",
                UserWarning,
                stacklevel=5,
            )
            break
        raw = stream.unused_data
    return b"".join(parts)


def _parse_open_array(text: str, label: str, first_error: json.JSONDecodeError) -> list[Any]:
    """Read an array of events whose closing ``]`` (and maybe last event) is missing."""
    decoder, events = json.JSONDecoder(), list[Any]()
    pos, end = text.index("[") + 1, len(text.rstrip())
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return events  # no closing bracket, which the format allows
        if text[pos] == "]":
            if text[pos + 1 :].strip():
                raise ValueError(f"{label} is not valid JSON: {first_error}.")
            return events
        try:
            event, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            # Torn, not malformed: the writer stopped before closing this event.
            if err.msg.startswith("Unterminated string") or "}" not in text[err.pos : end]:
                warnings.warn(
                    f"{label}: dropped an incomplete last event (from char {pos}).",
                    UserWarning,
                    stacklevel=5,
                )
                return events
            raise ValueError(f"{label} is not valid JSON: {err}.") from None
        events.append(event)
        while pos < end and text[pos].isspace():
            pos += 1
        if pos < end and text[pos] == ",":
            pos += 1
        elif pos < end and text[pos] != "]":
            raise ValueError(f"{label} is not valid JSON: {first_error}.")


def write_trace(trace: dict[str, Any], path: Path) -> None:
    """Write ``trace`` to ``path`` (gzip for ``.gz``), atomically and fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(tmp, "xb") as raw:
            if path.name.endswith(".gz"):
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed:
                    _dump(trace, packed)
            else:
                _dump(trace, raw)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _dump(trace: dict[str, Any], out: BinaryIO | gzip.GzipFile) -> None:
    # One event per line: readable, and a reader can recover all but a torn last line.
    out.write(b'{"traceEvents": [\n')
    for i, event in enumerate(trace["traceEvents"]):
        out.write((",\n" if i else "").encode() + json.dumps(event).encode())
    rest = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"})
    out.write(b"\n], " + rest[1:].encode() + b"\n")
