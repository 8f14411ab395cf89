"""The throughput window alone: no run, no clock, no torch (except one device-tensor case)."""

from __future__ import annotations

import pytest
import torch

from obsbus.callbacks._throughput import ThroughputWindow, WindowTotals, rates


def filled(size, batches):
    window = ThroughputWindow(size)
    for batch in batches:
        window.add(*batch)
    return window


def test_before_the_window_is_full_there_is_no_rate():
    window = ThroughputWindow(3)
    assert len(window) == 0 and not window.full
    for n in (1, 2):
        window.add(1.0, 8, 100, 1e12)
        assert len(window) == n and not window.full
        assert window.totals() is None
        assert window.rates() == {}
    window.add(1.0, 8, 100, 1e12)
    assert window.full
    assert window.rates() == {"batches": 1.0, "samples": 8.0, "tokens": 100.0, "flops": 1e12}


def test_rates_over_the_last_n_batches_only():
    window = filled(2, [(4.0, 100, 0), (0.5, 8, 0), (1.5, 24, 0)])  # the first slid out
    assert len(window) == 2
    assert window.totals() == WindowTotals(batches=2, seconds=2.0, samples=32, tokens=0, flops=None)
    assert window.rates() == {"batches": 1.0, "samples": 16.0}  # no tokens counted: no key
    window.add(2.0, 16, 0)
    assert window.rates() == {"batches": 2 / 3.5, "samples": 40 / 3.5}


def test_samples_tokens_and_flops_per_second():
    window = filled(4, [(0.25, 2, 512, 3e12), (0.25, 4, 1024, 6e12),
                        (0.5, 6, 1536, 9e12), (1.0, 4, 1024, 6e12)])  # fmt: skip
    assert window.rates() == {"batches": 2.0, "samples": 8.0, "tokens": 2048.0, "flops": 12e12}


def test_flops_need_a_count_for_every_batch_in_the_window():
    window = filled(2, [(1.0, 4, 0, 1e12), (1.0, 4, 0, None)])
    assert window.totals().flops is None
    assert "flops" not in window.rates()
    window.add(1.0, 4, 0, 3e12)  # still holds the uncounted batch
    assert "flops" not in window.rates()
    window.add(1.0, 4, 0, 5e12)  # it slid out
    assert window.rates()["flops"] == 4e12
    window.add(1.0, 4, 0, 0.0)  # zero FLOPs is a count, not a missing one
    assert window.rates()["flops"] == 2.5e12


def test_seconds_are_summed_exactly():
    window = filled(10, [(0.1, 1, 0)] * 10)
    assert window.totals().seconds == 1.0  # math.fsum: a plain sum gives 0.9999999999999999
    assert window.rates()["samples"] == 10.0


def test_a_window_that_took_no_time_has_no_rate():
    assert filled(2, [(0.0, 4, 0), (0.0, 4, 0)]).rates() == {}


def test_reset_empties_the_window():
    window = filled(2, [(1.0, 4, 10, 1e12), (1.0, 4, 10, None)])
    window.reset()
    assert len(window) == 0 and window.totals() is None and window.rates() == {}
    window.add(2.0, 8, 0, 2e12)
    window.add(2.0, 8, 0, 2e12)
    assert window.rates() == {"batches": 0.5, "samples": 4.0, "flops": 1e12}  # no old None


def test_rates_over_summed_values_keep_this_windows_keys():
    # Across ranks: summed samples/tokens/FLOPs over the slowest rank's seconds.
    totals = WindowTotals(batches=2, seconds=1.0, samples=8, tokens=0, flops=4e12)
    summed = {"samples": 24, "tokens": 999, "flops": 1.2e13, "seconds": 2.0}
    assert rates(totals, summed) == {"batches": 1.0, "samples": 12.0, "flops": 6e12}


def test_rates_over_device_tensors_stay_tensors():
    totals = WindowTotals(batches=2, seconds=1.0, samples=8, tokens=64, flops=None)
    summed = {name: torch.tensor(value, dtype=torch.float64)
              for name, value in {"samples": 24.0, "tokens": 128.0, "flops": 0.0,
                                  "seconds": 4.0}.items()}  # fmt: skip
    out = rates(totals, summed)
    assert set(out) == {"batches", "samples", "tokens"}
    assert torch.is_tensor(out["samples"]) and out["samples"].item() == 6.0
    assert out["tokens"].item() == 32.0
    assert out["batches"].item() == 0.5


@pytest.mark.parametrize(
    ("size", "error", "match"),
    [(0, ValueError, "ThroughputWindow size must be a whole number >= 1, got 0"), (-3, ValueError, "got -3"),
     (2.0, TypeError, "must be a whole number >= 1, got 2.0. To fix, pass 2 rather than the float"), (True, TypeError, "got True")],
    ids=["zero", "negative", "float", "bool"],
)  # fmt: skip
def test_size_must_be_a_positive_int(size, error, match):
    with pytest.raises(error, match=match):
        ThroughputWindow(size)
