"""The latest value of each key a printing destination holds until it prints, from any thread."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["Pending"]


class Pending:
    """``{key: latest value}`` logged since the last print, safe to add to from any thread.

    ConsoleLogger and LoguruLogger print what was logged at each interval.
    A monitoring thread may log while the training thread takes the values
    to print: :meth:`update` and :meth:`take` hold one lock, so a value goes
    either into this print or into the next, never into a dict already taken.

    Example:
        >>> pending = Pending()
        >>> pending.update({"loss": 0.5})
        >>> pending.take(), pending.take()
        ({'loss': 0.5}, {})
    """

    __slots__ = ("_lock", "_values")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return bool(self._values)

    def update(self, metrics: Mapping[str, Any]) -> None:
        """Hold ``metrics`` (a later value of a key replaces the earlier one)."""
        with self._lock:
            self._values.update(metrics)

    def take(self) -> dict[str, Any]:
        """Every value held, which are held no more."""
        with self._lock:
            values, self._values = self._values, {}
        return values

    def take_prefixed(self, prefix: str) -> dict[str, Any]:
        """The values of the keys that start with ``prefix``, which are held no more."""
        with self._lock:
            due = {k: v for k, v in self._values.items() if k.startswith(prefix)}
            for key in due:
                del self._values[key]
        return due

    def put_back(self, earlier: Mapping[str, Any]) -> None:
        """Hold ``earlier`` again, under the values logged since (which are newer)."""
        with self._lock:
            self._values = {**earlier, **self._values}
