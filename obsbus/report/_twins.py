"""Keys whose series are identical (same steps, same values, on every rank that has them).

SpeedMonitor on one rank logs ``throughput/device/*`` equal to ``throughput/*``;
a loop may log ``time/eval`` and ``time/val`` alike; Hugging Face's ``hf/loss``
is ``loss/train/total``. Drawn twice, one line hides the other: the report
draws one and names its twins in the legend.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from obsbus.report._read import RunData

__all__ = ["find_twins"]


def _mark(value: float) -> Any:
    # NaN equals nothing, itself included: a NaN end would make every key its own bucket
    return "nan" if math.isnan(value) else value


def _signature(data: RunData, key: str, unit: str | None) -> tuple[Any, ...]:
    """Cheap facts two twins share: the unit, and per rank the length and the ends."""
    out: list[Any] = [unit]
    for rank in sorted(data.ranks):
        found = data.ranks[rank].series.get(key)
        if found is None:
            out.append((rank, None))
            continue
        steps, values = found
        out.append((rank, len(steps), steps[0], steps[-1], _mark(values[0]), _mark(values[-1])))
    return tuple(out)


def _equal(data: RunData, a: str, b: str) -> bool:
    for rank in data.ranks.values():
        left, right = rank.series.get(a), rank.series.get(b)
        if left is None or right is None:
            if left is not right:
                return False
            continue
        if left[0] != right[0]:
            return False
        x, y = np.asarray(left[1], np.float64), np.asarray(right[1], np.float64)
        if not np.array_equal(x, y, equal_nan=True):
            return False
    return True


def find_twins(
    data: RunData, keys: Iterable[str], preference: Callable[[str], Any], unit: Callable[[str], Any]
) -> dict[str, list[str]]:
    """``{kept key: [its twins]}`` over ``keys``: each set of identical series keeps the key
    that sorts first by ``preference``. Keys of different ``unit`` are never twins. A key
    with no twin is not in the result.

    Example:
        >>> from pathlib import Path
        >>> from obsbus.report._read import RankData
        >>> data = RunData(Path("."), {0: RankData(0, Path("."))})
        >>> data.ranks[0].series = {"a": ([1, 2], [3.0, 4.0]), "b": ([1, 2], [3.0, 4.0]),
        ...                         "c": ([1, 2], [3.0, 5.0])}
        >>> find_twins(data, ["a", "b", "c"], preference=len, unit=lambda k: None)
        {'a': ['b']}
    """
    buckets: dict[tuple[Any, ...], list[str]] = {}
    for key in sorted(keys, key=lambda k: (preference(k), k)):
        buckets.setdefault(_signature(data, key, unit(key)), []).append(key)
    twins: dict[str, list[str]] = {}
    for bucket in buckets.values():
        while len(bucket) > 1:
            kept, rest = bucket[0], bucket[1:]
            same = [key for key in rest if _equal(data, kept, key)]
            if same:
                twins[kept] = same
            bucket = [key for key in rest if key not in same]
    return twins
