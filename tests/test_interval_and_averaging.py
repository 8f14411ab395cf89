from __future__ import annotations

import pytest
import torch

from obsbus import State, Timestamp
from obsbus.callbacks._averaging import RunningAverage
from obsbus.interval import LogInterval
from obsbus.time import TimeUnit


@pytest.mark.parametrize(
    ("value", "unit", "batch_due", "epoch_due"),
    [
        ("10ba", TimeUnit.BATCH, [10, 20], []),
        (3, TimeUnit.BATCH, [3, 6, 9, 12, 15, 18], []),
        ("2ep", TimeUnit.EPOCH, [], [2, 4]),
    ],
    ids=["batches", "bare-int", "epochs"],
)
def test_log_interval_due(value, unit, batch_due, epoch_due):
    interval = LogInterval(value, "x log_interval")
    state = State(run_name="r")
    got_batch, got_epoch = [], []
    for b in range(1, 21):
        state.timestamp = Timestamp(batch=b, epoch=b // 5)
        if interval.at_batch_end(state):
            got_batch.append(b)
    for e in range(1, 5):
        state.timestamp = Timestamp(epoch=e)
        if interval.at_epoch_end(state):
            got_epoch.append(e)
    assert interval.unit is unit
    assert got_batch == batch_due
    assert got_epoch == epoch_due


@pytest.mark.parametrize("bad", ["5sp", "0ba", "1.5ep", "-2ba", "abc"])
def test_log_interval_rejects(bad):
    with pytest.raises(ValueError, match=f"'{bad}'|x log_interval"):
        LogInterval(bad, "x log_interval")


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ("10xx", ValueError, r"^FileLogger log_interval '10xx' is not a valid time: expected a "
         r"non-negative number followed by a unit, one of ep, ba, sp, tok, dur, sec, iter"),
        ("-1ba", ValueError, r"^FileLogger log_interval '-1ba' is not a valid time: time must "
         r"not be negative"),
        ("1.5ba", ValueError, r"^FileLogger log_interval '1.5ba' is not a valid time: a number "
         r"of batches must be a whole number"),
        (float("nan"), ValueError, r"^FileLogger log_interval 'nanba' is not a valid time: it "
         r"must be finite"),
        (True, TypeError, r"^FileLogger log_interval must be a Time, a time string or a number, "
         r"got True"),
        (None, TypeError, r"^FileLogger log_interval must be a Time, .*got None"),
    ],
    ids=["bad-unit", "negative", "fraction", "nan", "bool", "None"],
)  # fmt: skip
def test_log_interval_errors_name_the_parameter(bad, error, match):
    """Issue 13: the time parser's message used to come through as it was, naming neither the
    parameter nor the class."""
    with pytest.raises(error, match=match):
        LogInterval(bad, "FileLogger log_interval")


def test_running_average_skips_warmup_and_restarts():
    avg = RunningAverage(skip=2, reset_interval=10)
    for v in [1000.0, 500.0] + [float(i) for i in range(1, 11)]:
        avg.add(v)
    assert avg.mean() == 5.5 and avg.count == 10
    avg.add(42.0)
    assert avg.mean() == 42.0 and avg.count == 1


def test_running_average_keeps_tensors_on_their_device_and_weights():
    avg = RunningAverage(skip=0, reset_interval=0)
    avg.add(torch.tensor(2.0), weight=1)
    avg.add(torch.tensor(5.0), weight=3)
    mean = avg.mean()
    assert isinstance(mean, torch.Tensor) and mean.item() == pytest.approx(17 / 4)
    assert RunningAverage().mean() is None


@pytest.mark.parametrize("kwargs", [{"skip": -1}, {"reset_interval": 1.5}, {"skip": True}])
def test_running_average_rejects(kwargs):
    with pytest.raises(
        ValueError, match=r"RunningAverage (skip|reset_interval) must be a whole number >= 0, got"
    ):
        RunningAverage(**kwargs)
