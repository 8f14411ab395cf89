"""Min/max bucket downsampling: a long series shrinks to a bounded size and keeps every spike."""

from __future__ import annotations

from typing import Any

import numpy as np

from obsbus._check import check_int, type_as_value_error

__all__ = ["DEFAULT_BUCKETS", "minmax_band", "minmax_downsample"]

#: Buckets per line: at most ``2 * DEFAULT_BUCKETS`` points reach the browser, which
#: redraws a few thousand points per line at once on pan and zoom.
DEFAULT_BUCKETS = 2000

Array = np.ndarray[Any, Any]


def _check(owner: str, x: Array, y: Array, buckets: int) -> None:
    with type_as_value_error():  # a wrong type here has always been a ValueError
        check_int(owner, "buckets", buckets, minimum=1)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-d and of one length, got {x.shape} and {y.shape}.")


def minmax_downsample(x: Array, y: Array, buckets: int = DEFAULT_BUCKETS) -> tuple[Array, Array]:
    """Keep, of each of ``buckets`` equal runs of points, its lowest and its highest point.

    The points kept stay in their order, so the line drawn through them
    reaches every spike of the original: the highest and lowest value of
    every bucket are points of the result. At most ``2 * buckets`` points
    come back; a series that short already comes back as it is. A bucket
    whose values are all NaN keeps one NaN point (a gap in the line).

    Example:
        >>> import numpy as np
        >>> y = np.zeros(1000); y[517] = 50.0; y[3] = -9.0
        >>> xs, ys = minmax_downsample(np.arange(1000), y, buckets=10)
        >>> len(xs) <= 20, 517 in xs, 50.0 in ys, -9.0 in ys, bool(np.all(np.diff(xs) > 0))
        (True, True, True, True, True)
    """
    x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
    _check("minmax_downsample", x, y, buckets)
    n = len(y)
    if n <= 2 * buckets:
        return x, y
    size = -(-n // buckets)  # ceil: every bucket but the last holds `size` points
    count = -(-n // size)
    padded = np.full(count * size, np.nan)
    padded[:n] = y
    grid = padded.reshape(count, size)
    starts = np.arange(count) * size
    low = np.where(np.isnan(grid), np.inf, grid).argmin(axis=1) + starts
    high = np.where(np.isnan(grid), -np.inf, grid).argmax(axis=1) + starts
    low, high = np.minimum(low, n - 1), np.minimum(high, n - 1)
    keep = np.unique(np.concatenate([low, high]))  # sorted: order kept
    return x[keep], y[keep]


def minmax_band(
    x: Array, low: Array, high: Array, buckets: int = DEFAULT_BUCKETS
) -> tuple[Array, Array, Array]:
    """A band (``low`` to ``high`` at each ``x``) shrunk to ``buckets`` points.

    Each bucket keeps its first ``x``, the lowest ``low`` and the highest
    ``high`` in it, so the band still covers every value.

    Example:
        >>> import numpy as np
        >>> x = np.arange(100); lo = np.zeros(100); hi = np.ones(100); hi[42] = 7.0
        >>> bx, blo, bhi = minmax_band(x, lo, hi, buckets=5)
        >>> len(bx), float(bhi.max()), float(blo.min())
        (5, 7.0, 0.0)
    """
    x, low, high = np.asarray(x), np.asarray(low, np.float64), np.asarray(high, np.float64)
    _check("minmax_band", x, low, buckets)
    _check("minmax_band", x, high, buckets)
    n = len(x)
    if n <= buckets:
        return x, low, high
    size = -(-n // buckets)
    starts = np.arange(0, n, size)
    with np.errstate(invalid="ignore"):
        lows = np.fmin.reduceat(low, starts)
        highs = np.fmax.reduceat(high, starts)
    return x[starts], lows, highs
