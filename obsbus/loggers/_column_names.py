"""A metric named like a destination's own column gets a name of its own: ``metric:<name>``."""

from __future__ import annotations

import logging

__all__ = ["ColumnNames"]

log = logging.getLogger("obsbus")


class ColumnNames:
    """Renames a metric whose key is one of a destination's own columns, warned once per key.

    FileLogger's JSON Lines rows have ``step``, ``epoch``, ``batch`` and
    ``wall_time``; W&B keeps ``_step``, ``_runtime`` and ``_timestamp``. A metric
    of such a name would replace the column (or be dropped): it is written as
    ``metric:<name>`` instead, and the column keeps its meaning.

    Example:
        >>> names = ColumnNames("a row of metrics.jsonl")
        >>> names("FileLogger", "epoch"), names("FileLogger", "epoch")
        ('metric:epoch', 'metric:epoch')
    """

    __slots__ = ("_told", "where")

    def __init__(self, where: str) -> None:
        self.where = where
        self._told: set[str] = set()

    def __call__(self, owner: str, key: str) -> str:
        """The name ``owner`` writes the metric ``key`` under (``key`` is a column name)."""
        name = f"metric:{key}"
        if key not in self._told:
            self._told.add(key)
            log.warning(
                "obsbus: %s: %r is a column of %s; the metric is written as %r (the column "
                "keeps its own meaning).",
                owner,
                key,
                self.where,
                name,
            )
        return name
