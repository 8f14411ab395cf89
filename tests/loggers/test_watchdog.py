"""A destination call that holds the training thread is reported once, by name.

Destinations' logging methods and hooks run on the training thread; one that
blocks (a hung file system, a client called inline) stalls training with
nothing to say which. The logger's watchdog (``OBSBUS_WATCHDOG_S`` or
``Logger(watchdog_s=...)``) names it.
"""

from __future__ import annotations

import logging
import time

import pytest
from typing_extensions import override

from obsbus import Engine, Event, Logger, LoggerDestination, Run, State
from obsbus.loggers import InMemoryLogger


class Slow(LoggerDestination):
    """Blocks ``seconds`` in ``log_metrics`` at step 3 and in ``batch_end`` at batch 5."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    @override
    def log_metrics(self, metrics, step=None):
        if step == 3:
            time.sleep(self.seconds)

    @override
    def batch_end(self, state, logger):
        if state.timestamp.batch.value == 5:
            time.sleep(self.seconds)


def _train(loggers, batches=6):
    with Run(max_duration=f"{batches}ba", loggers=loggers) as run:
        for i, _ in enumerate(run.train([[0]] * batches)):
            run.state.loss = float(i)
    return run


def _reports(caplog):
    return [r.getMessage() for r in caplog.records if "on the training thread" in r.getMessage()]


def test_a_blocking_destination_is_named_once(monkeypatch, caplog):
    monkeypatch.setenv("OBSBUS_WATCHDOG_S", "0.2")
    slow, fast = Slow(0.8), Slow(0.0)
    memory = InMemoryLogger()
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        run = _train([slow, fast, memory])
    reports = _reports(caplog)
    assert len(reports) == 1  # once per destination, though it blocked twice
    assert reports[0].startswith("obsbus: Slow.log_metrics has run for ")
    assert run.logger.watchdog is not None and run.logger.watchdog.reported == ["Slow.log_metrics"]
    assert memory.get_timeseries("loss/train/total")["step"] == list(range(1, 7))  # goes on


def test_a_blocking_hook_is_named_too(caplog):
    state = State(run_name="r")
    slow = Slow(0.8)
    logger = Logger(state, [Slow(0.0), slow], watchdog_s=0.2)
    assert slow.name == "Slow#2"
    engine = Engine(state, logger)
    engine.run_event(Event.INIT)
    for _ in range(5):  # Slow blocks at batch 5's batch_end
        state.timestamp = state.timestamp.to_next_batch(samples=1)
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        engine.run_event(Event.BATCH_END)
    engine.close()
    assert logger.watchdog is not None and logger.watchdog.reported == ["Slow#2.batch_end"]


def test_off_by_default_and_nothing_wrapped(monkeypatch):
    monkeypatch.delenv("OBSBUS_WATCHDOG_S", raising=False)
    logger = Logger(State(run_name="r"), [InMemoryLogger()])
    assert logger.watchdog is None
    assert "log_metrics" not in vars(logger)  # the plain fan-out, no extra call per step


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf"])
def test_a_bad_threshold_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("OBSBUS_WATCHDOG_S", value)
    with pytest.raises(ValueError, match=rf"got '?{value}'?"):
        Logger(State(run_name="r"), [])
