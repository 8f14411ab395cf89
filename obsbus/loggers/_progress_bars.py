"""The two bars :class:`~obsbus.loggers.ProgressBarLogger` draws: tqdm's, or plain lines.

A terminal gets a live tqdm bar. A stream that is not one (a log file, a CI
console) would fill with carriage returns, so it gets whole lines instead:
tqdm's meter text at each step of the total, at least once a minute, and at
close.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["Bar", "LiveBar", "PlainBar", "isatty"]

_LINE_SECONDS = 60.0  # plain lines: at least one a minute, so a log shows signs of life
_clock = time.monotonic


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


class LiveBar:
    """A tqdm bar; its postfix is refreshed at most every ``interval`` seconds."""

    def __init__(self, stream: TextIO, interval: float, **kwargs: Any) -> None:
        import tqdm as tqdm_module

        # disable=False: TQDM_DISABLE is honoured by the logger itself, at run time.
        self.bar: tqdm[Any] = tqdm_module.tqdm(
            file=stream, dynamic_ncols=True, disable=False, **kwargs
        )
        self._interval = interval
        self._last_postfix = _clock()

    def postfix_due(self, n: float) -> bool:
        return _clock() - self._last_postfix >= self._interval

    def set_postfix(self, text: str) -> None:
        self.bar.set_postfix_str(text, refresh=False)
        self._last_postfix = _clock()

    def set_description(self, text: str) -> None:
        self.bar.set_description_str(text, refresh=False)

    def update_to(self, n: float) -> None:
        if n > self.bar.n:
            self.bar.update(n - self.bar.n)

    def close(self) -> None:
        self.bar.close()


class PlainBar:
    """Whole lines for streams that are not terminals: at each ``1/steps`` of the total
    (never with ``steps=0``), at least every minute, and at close."""

    def __init__(
        self,
        stream: TextIO,
        *,
        desc: str,
        total: float | None,
        initial: float,
        unit: str,
        unit_scale: bool,
        steps: int,
    ) -> None:
        self._stream, self._desc, self._total = stream, desc, total
        self._unit, self._unit_scale, self._steps = unit, unit_scale, steps
        self.n = self._initial = initial
        self._postfix = ""
        self._printed: tuple[float, str] | None = None  # (n, postfix) of the last line
        self._start = self._last_line = _clock()
        self._next = self._step_after(initial)

    def _step_after(self, n: float) -> float:
        if not self._steps or not self._total:
            return math.inf
        return (math.floor(n * self._steps / self._total) + 1) * self._total / self._steps

    def postfix_due(self, n: float) -> bool:
        return n >= self._next or _clock() - self._last_line >= _LINE_SECONDS

    def set_postfix(self, text: str) -> None:
        self._postfix = text

    def set_description(self, text: str) -> None:
        self._desc = text

    def update_to(self, n: float) -> None:
        due = self.postfix_due(n)
        self.n = n
        if due:
            self._print()

    def _print(self) -> None:
        import tqdm as tqdm_module

        now = _clock()
        line = tqdm_module.tqdm.format_meter(
            self.n,
            self._total or 0,  # 0 reads as "no total", as None does (the stubs want a number)
            now - self._start,
            ncols=0,  # the numbers, no bar
            prefix=self._desc,
            unit=self._unit,
            unit_scale=self._unit_scale,
            postfix=self._postfix or None,
            initial=self._initial,
        )
        self._stream.write(line + "\n")
        self._stream.flush()
        self._printed, self._last_line = (self.n, self._postfix), now
        self._next = self._step_after(self.n)

    def close(self) -> None:
        if self._printed != (self.n, self._postfix):
            self._print()


#: What ProgressBarLogger drives: either bar has the same five methods.
Bar = LiveBar | PlainBar
