"""Copy what a program prints to ``sys.stdout``/``sys.stderr`` into a log, line by line.

:class:`~obsbus.loggers.FileLogger` uses it for ``capture_stdout`` and
``capture_stderr``: every write still reaches the real stream; whole lines
are handed to the owner, and a partial line waits for its newline.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import TextIO

__all__ = ["Tee", "tee_into", "untee"]


class Tee(io.TextIOBase):
    """Passes writes through to the real stream and hands whole lines to ``on_lines``."""

    def __init__(
        self,
        owner: object,
        stream: TextIO,
        tag: str,
        on_lines: Callable[[str, list[str]], None],
    ) -> None:
        self._owner, self._stream, self._tag, self._on_lines = owner, stream, tag, on_lines
        self._partial = ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        self._partial += text
        if "\n" in self._partial:
            *lines, self._partial = self._partial.split("\n")
            self._on_lines(self._tag, lines)
        return written

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")


def tee_into(tag: str, owner: object, on_lines: Callable[[str, list[str]], None]) -> TextIO:
    """Put a :class:`Tee` of ``owner`` on ``sys.<tag>``; returns the stream it replaced."""
    original: TextIO = getattr(sys, tag)
    setattr(sys, tag, Tee(owner, original, tag, on_lines))
    return original


def untee(tag: str, owner: object, original: TextIO) -> None:
    """Put ``original`` back on ``sys.<tag>`` if ``owner``'s tee is still there.

    Something installed after it (another tee, a test's capture) is left alone.
    """
    current = getattr(sys, tag)
    if isinstance(current, Tee) and current._owner is owner:
        setattr(sys, tag, original)
