"""LossSpikeDetector: one detection for one real spike in noise, at the right batch, with no
device read of its own (it takes the losses NaNMonitor reads at its checks)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from obsbus import Run
from obsbus.callbacks import LossSpikeDetector, NaNMonitor
from obsbus.callbacks._spike_window import SpikeWindow
from obsbus.loggers import InMemoryLogger

from ..test_values import SyncSpy


def curve(n=600, spike_at=400, spike_len=40, seed=0):
    """A falling loss with 2% noise and its own outliers, and one real spike: the loss of
    batches ``spike_at`` to ``spike_at + spike_len - 1`` (counted from 1) is doubled."""
    rng = random.Random(seed)
    losses = []
    for b in range(1, n + 1):
        base = 2.0 * math.exp(-b / 300) + 0.5
        value = base * (1 + 0.02 * rng.gauss(0, 1))
        if b % 97 == 0:
            value *= 1.3  # a one-batch outlier: noise, not a spike
        if spike_at <= b < spike_at + spike_len:
            value *= 2.0
        losses.append(value)
    return losses


def test_the_window_finds_one_spike_at_its_first_batch():
    losses = curve()
    window = SpikeWindow(window=100, threshold=6.0, patience=10, min_history=50)
    found = window.add(range(1, len(losses) + 1), losses)
    assert [(s.batch, s.confirmed_at) for s in found] == [(400, 409)]
    assert found[0].loss == losses[399] and found[0].score > 6.0
    assert found[0].baseline == statistics.median(losses[299:399])  # the 100 before the jump


def test_noise_alone_and_a_falling_loss_are_never_flagged():
    for seed in range(5):
        losses = curve(spike_len=0, seed=seed)
        assert SpikeWindow(100, 6.0, 10, 50).add(range(1, 601), losses) == []


def test_a_short_blip_is_noise_and_patience_one_flags_it():
    losses = [1.0 + 0.01 * math.sin(i) for i in range(100)]
    losses[60:63] = [4.0, 4.0, 4.0]  # three batches up, then back
    assert SpikeWindow(50, 6.0, 10, 20).add(range(1, 101), losses) == []
    assert [s.batch for s in SpikeWindow(50, 6.0, 1, 20).add(range(1, 101), losses)] == [61]


def test_a_loss_that_settles_higher_is_flagged_once():
    losses = [1.0 + 0.01 * math.sin(i) for i in range(100)] + [
        3.0 + 0.01 * math.sin(i) for i in range(300)
    ]
    found = SpikeWindow(100, 6.0, 10, 50).add(range(1, 401), losses)
    assert [s.batch for s in found] == [101]


def test_non_finite_losses_are_left_to_nan_monitor():
    losses = [1.0 + 0.01 * math.sin(i) for i in range(60)]
    losses[40] = float("nan")
    losses[41] = float("inf")
    assert SpikeWindow(50, 6.0, 3, 20).add(range(1, 61), losses) == []


def train(losses, *callbacks, check_interval="25ba", spy=None):
    memory = InMemoryLogger()
    monitors = [NaNMonitor(check_interval=check_interval), *callbacks]
    with Run(max_duration=f"{len(losses)}ba", callbacks=monitors, loggers=[memory]) as run:
        for (i,) in run.train([[i] for i in range(len(losses))]):
            run.state.loss = torch.tensor(losses[i])
    return memory


def test_in_a_run_one_detection_logged_at_the_check_after_it():
    losses = curve()
    detector = LossSpikeDetector(window=100, threshold=6.0, patience=10)
    memory = train(losses, detector)
    got = memory.get_timeseries("loss_spike/batch")
    assert got["loss_spike/batch"] == [400] and got["step"] == [425]  # the check after 409
    assert memory.get_timeseries("loss_spike/loss")["loss_spike/loss"] == [
        pytest.approx(losses[399], rel=1e-6)
    ]
    assert [s.batch for s in detector.spikes] == [400]


def test_it_adds_no_host_transfer():
    losses = curve(n=200, spike_at=120)
    with SyncSpy() as plain:
        train(losses)
    with SyncSpy() as spied:
        train(losses, LossSpikeDetector(window=50, patience=5))
    assert len(spied.calls) == len(plain.calls)


def test_on_spike_stop_stops_the_run():
    losses = curve()
    memory = train(losses, LossSpikeDetector(on_spike="stop"))
    assert memory.get_timeseries("loss/train/total")["step"][-1] == 425


def test_alone_it_reads_the_losses_itself_every_check_interval():
    losses = curve()
    memory = InMemoryLogger()
    detector = LossSpikeDetector(check_interval="50ba")
    with Run(max_duration=f"{len(losses)}ba", callbacks=[detector], loggers=[memory]) as run:
        for (i,) in run.train([[i] for i in range(len(losses))]):
            run.state.loss = {"a": torch.tensor(losses[i] / 2), "b": torch.tensor(losses[i] / 2)}
    got = memory.get_timeseries("loss_spike/batch")
    assert got["loss_spike/batch"] == [400] and got["step"] == [450]


def test_the_keys_logged_are_the_documented_keys():
    from .test_documented_keys import documented_keys

    memory = train(curve(), LossSpikeDetector())
    logged = {k for k in memory.data if k.startswith("loss_spike/")}
    assert logged == set(documented_keys(LossSpikeDetector))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window": 5}, "window must be a whole number >= 10, got 5"),
        ({"threshold": 0}, "threshold must be a finite number .* got 0"),
        ({"threshold": float("nan")}, "got nan"),
        ({"patience": 0}, "patience must be a whole number >= 1, got 0"),
        ({"window": 20, "min_history": 30}, "min_history must be at most window"),
        ({"on_spike": "raise"}, "on_spike must be 'log' or 'stop', got 'raise'"),
        ({"check_interval": "5000ba"}, "check_interval must be at most 4096 batches"),
        ({"check_interval": "1ep"}, "check_interval must be at most 4096 batches"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        LossSpikeDetector(**kwargs)
