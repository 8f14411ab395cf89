"""Min/max bucket downsampling: bounded size, order kept, every spike kept."""

from __future__ import annotations

import numpy as np
import pytest

from obsbus.report import minmax_band, minmax_downsample


def _noisy(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.arange(n) * 2 + 1, rng.normal(size=n)


@pytest.mark.parametrize("n", [4_001, 10_000, 123_457, 1_000_000], ids=str)
def test_size_is_bounded_by_twice_the_buckets(n):
    x, y = _noisy(n)
    xs, ys = minmax_downsample(x, y, 2000)
    assert 2000 <= len(xs) <= 4000 and len(xs) == len(ys)


def test_order_is_kept_and_points_are_original():
    x, y = _noisy(50_000)
    xs, ys = minmax_downsample(x, y, 500)
    assert np.all(np.diff(xs) > 0)
    index = (xs - 1) // 2  # x = 2 * i + 1
    assert np.array_equal(y[index], ys)


@pytest.mark.parametrize("where", [0, 1, 4_999, 31_337, 99_999], ids=str)
def test_every_spike_is_kept(where):
    x, y = _noisy(100_000, seed=where)
    y[where] = 1e6
    y[(where + 50_000) % 100_000] = -1e6  # and a dip far away
    xs, ys = minmax_downsample(x, y, 100)
    assert x[where] in xs and 1e6 in ys and -1e6 in ys


def test_each_bucket_keeps_its_min_and_max():
    x, y = _noisy(10_000, seed=3)
    xs, ys = minmax_downsample(x, y, 10)  # buckets of 1,000 points
    for start in range(0, 10_000, 1_000):
        inside = (xs >= x[start]) & (xs <= x[start + 999])
        assert ys[inside].max() == y[start : start + 1_000].max()
        assert ys[inside].min() == y[start : start + 1_000].min()


def test_short_series_come_back_whole_and_nan_buckets_keep_a_gap():
    x, y = _noisy(100)
    xs, ys = minmax_downsample(x, y, 50)
    assert np.array_equal(xs, x) and np.array_equal(ys, y)
    y = np.ones(1_000)
    y[200:300] = np.nan  # one whole bucket of NaN
    xs, ys = minmax_downsample(np.arange(1_000), y, 10)
    assert np.isnan(ys).sum() == 1 and 200 in xs


def test_band_covers_every_value():
    x = np.arange(10_000)
    low, high = -np.abs(_noisy(10_000)[1]), np.abs(_noisy(10_000, 1)[1])
    high[7_777] = 500.0
    bx, blow, bhigh = minmax_band(x, low, high, 100)
    assert len(bx) == 100 and np.all(np.diff(bx) > 0)
    assert bhigh.max() == 500.0 and blow.min() == low.min()


@pytest.mark.parametrize("buckets", [0, -1, 1.5, True], ids=repr)
def test_bad_bucket_count_is_refused(buckets):
    with pytest.raises(ValueError, match="minmax_downsample buckets must be a whole number >= 1"):
        minmax_downsample(np.arange(10), np.arange(10), buckets)
