"""Containment of plug-in failures: report once by name, count, go on."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from obsbus._mask_errors import mask_error
from obsbus.errors import DestinationError

log = logging.getLogger("obsbus")


def plugin_name(plugin: object) -> str:
    """A plug-in's name for messages: its ``name`` attribute if a str, else its class name."""
    name = getattr(plugin, "name", None)
    return name if isinstance(name, str) and name else type(plugin).__name__


class FailureLog:
    """Counts failures per plug-in and logs the first of each with its traceback.

    Thread-safe, so background writers report through it too.
    """

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.counts: Counter[str] = Counter()
        self.first: dict[str, str] = {}
        self._lock = threading.Lock()

    def report(self, name: str, action: str, exc: BaseException) -> None:
        """Count ``exc`` for ``name``; log the first, masked (a tracker's error may quote a
        URI with its password in it, and plain logging has no masking sink)."""
        mask_error(exc)
        with self._lock:
            self.counts[name] += 1
            first = name not in self.first
            if first:
                self.first[name] = f"{action}: {exc!r}"
        if first:
            log.error(
                "obsbus: %s.%s failed; training goes on, and further failures of %s are "
                "counted and summarized at close.",
                name,
                action,
                name,
                exc_info=exc,
            )

    def call(self, plugin: object, action: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)``; on ``Exception`` report it (or raise when strict)."""
        try:
            return fn(*args)
        except Exception as exc:
            self.failed(plugin, action, exc)
            return None

    def failed(self, plugin: object, action: str, exc: Exception) -> None:
        """``plugin.action`` raised ``exc``: report it, and raise when strict.

        For callers that keep the ``try`` inline on a hot path (the logger's
        fan-out), where :meth:`call`'s extra frame would be paid every step.
        """
        name = plugin_name(plugin)
        self.report(name, action, exc)
        if self.strict:
            raise DestinationError(name, action, exc) from exc

    def summary(self) -> list[str]:
        """One line per plug-in that failed, for the close report."""
        with self._lock:
            return [
                f"{name} failed {count} time(s); first: {self.first[name]}"
                for name, count in sorted(self.counts.items())
            ]
