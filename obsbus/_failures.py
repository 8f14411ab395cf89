"""Containment of plug-in failures: report once by name, count, go on."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from obsbus._mask_errors import mask_error
from obsbus.errors import DestinationError
from obsbus.masking import mask_secrets

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
        #: Values a destination could not write, by ``(destination, key)``: see :meth:`skipped`.
        self.skips: Counter[tuple[str, str]] = Counter()
        self._why: dict[tuple[str, str], str] = {}
        #: Writes a destination gave up on, by destination (see :meth:`lost`).
        self.losses: Counter[str] = Counter()
        self._lost_why: dict[str, str] = {}
        self._lock = threading.Lock()

    def lost(self, name: str, count: int, reason: str) -> None:
        """``name`` gave up on ``count`` write(s) (a close deadline, a client that hung or
        never started): the caller has logged it; this puts it in :meth:`summary`, so
        ``run-status-rank*.json`` and the report's Failures say so too."""
        if count <= 0:
            return
        with self._lock:
            self.losses[name] += count
            self._lost_why.setdefault(name, reason)

    @property
    def skipped_values(self) -> int:
        """How many values the destinations could not write, all keys together."""
        with self._lock:
            return sum(self.skips.values())

    def skipped(
        self, name: str, key: object, reason: str, count: int = 1, *, warn: bool = True
    ) -> None:
        """``name`` could not write ``count`` value(s) of ``key``: count them by key, and warn
        the first time for each key (with ``reason``); :meth:`summary` lists them at close.

        For one bad entry that a destination leaves out while it writes every other
        value of its row (issue 34: one bad value never costs another value).
        ``warn=False`` where the cause was reported already (a failed call).
        """
        label = key if isinstance(key, str) else repr(key)
        with self._lock:
            first = (name, label) not in self._why
            if first:
                self._why[name, label] = reason
            self.skips[name, label] += count
        if first and warn:
            log.warning(
                "obsbus: %s could not write %r: %s. It is skipped; the other values are "
                "written, and each value of it skipped is counted and listed at close.",
                name,
                key,
                mask_secrets(reason),
            )

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
        """One line per plug-in that failed and one per destination that skipped values,
        for the close report (``run-status-rank*.json`` and the report's Failures)."""
        with self._lock:
            lines = [
                f"{name} failed {count} time(s); first: {self.first[name]}"
                for name, count in sorted(self.counts.items())
            ]
            lines.extend(
                f"{name} did not deliver {count} write(s): {mask_secrets(self._lost_why[name])}"
                for name, count in sorted(self.losses.items())
            )
            by_name: dict[str, list[tuple[str, int]]] = {}
            for (name, key), count in sorted(self.skips.items()):
                by_name.setdefault(name, []).append((key, count))
            for name, keys in by_name.items():
                total = sum(count for _, count in keys)
                shown = "; ".join(
                    f"{key!r} x{count} ({mask_secrets(self._why[name, key])})"
                    for key, count in keys[:_KEYS_SHOWN]
                )
                more = len(keys) - _KEYS_SHOWN
                lines.append(
                    f"{name} could not write {total} value(s) of {len(keys)} key(s): {shown}"
                    + (f"; and {more} more key(s)" if more > 0 else "")
                )
            return lines


#: Keys one summary line names; the rest are counted.
_KEYS_SHOWN = 20
