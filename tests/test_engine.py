"""Engine contracts: ordering, override table, exceptions, close."""

from __future__ import annotations

import logging

import pytest

from obsbus import Callback, Engine, Event, Logger, LoggerDestination, State
from obsbus.errors import DestinationError
from obsbus.loggers import InMemoryLogger


class Recorder(Callback):
    def __init__(self, name, journal):
        self.name, self.journal = name, journal

    def init(self, state, logger):
        self.journal.append((self.name, "init"))

    def batch_end(self, state, logger):
        self.journal.append((self.name, "batch_end"))

    def close(self, state, logger):
        self.journal.append((self.name, "close"))

    def post_close(self):
        self.journal.append((self.name, "post_close"))


class RecordingDestination(LoggerDestination):
    def __init__(self, name, journal, fail_on=()):
        self.name, self.journal, self.fail_on = name, journal, set(fail_on)

    def _do(self, what):
        self.journal.append((self.name, what))
        if what in self.fail_on:
            raise OSError(f"{self.name} disk full during {what}")

    def init(self, state, logger):
        self._do("init")

    def batch_end(self, state, logger):
        self._do("batch_end")

    def log_metrics(self, metrics, step=None):
        self._do("log_metrics")

    def close(self, state, logger):
        self._do("close")

    def post_close(self):
        self.journal.append((self.name, "post_close"))


def make_engine(callbacks, destinations, strict=False):
    state = State(run_name="t")
    return Engine(state, Logger(state, destinations, strict=strict), callbacks)


def test_destinations_first_at_init_last_elsewhere():
    journal = []
    engine = make_engine(
        [Recorder("cb1", journal), Recorder("cb2", journal)],
        [RecordingDestination("d1", journal), RecordingDestination("d2", journal)],
    )
    engine.run_event(Event.INIT)
    assert journal == [("d1", "init"), ("d2", "init"), ("cb1", "init"), ("cb2", "init")]
    journal.clear()
    engine.run_event(Event.BATCH_END)
    assert journal == [
        ("cb1", "batch_end"),
        ("cb2", "batch_end"),
        ("d1", "batch_end"),
        ("d2", "batch_end"),
    ]


def test_only_overriding_plugins_are_in_the_table():
    journal = []
    engine = make_engine([Recorder("cb", journal)], [])
    cbs, dests, _, _ = engine._table[Event.BEFORE_FORWARD]
    assert cbs == () and dests == ()
    assert [cb for cb, *_ in engine._table[Event.BATCH_END][0]] == engine.callbacks
    assert not engine.handles[Event.BEFORE_FORWARD] and engine.handles[Event.BATCH_END]


def test_instance_level_override_is_dispatched():
    cb = Callback()
    seen = []
    cb.fit_end = lambda state, logger: seen.append("fit_end")
    engine = make_engine([cb], [])
    engine.run_event(Event.FIT_END)
    assert seen == ["fit_end"]


def test_a_hook_dropped_at_init_is_no_longer_dispatched():
    seen = []

    class Dropper(Callback):
        def init(self, state, logger):
            self.after_forward = super().after_forward  # this run has no use for it

        def after_forward(self, state, logger):
            seen.append("after_forward")

    engine = make_engine([Dropper()], [])
    assert engine.handles[Event.AFTER_FORWARD]  # before init: overridden, so dispatched
    engine.run_event(Event.AFTER_FORWARD)
    engine.run_event(Event.INIT)
    assert not engine.handles[Event.AFTER_FORWARD]  # the dict a loop holds, updated
    engine.run_event(Event.AFTER_FORWARD)
    assert seen == ["after_forward"]


def test_callback_added_mid_event_runs_from_the_next_event():
    journal = []
    late = Recorder("late", journal)

    class Adder(Callback):
        def batch_end(self, state, logger):
            engine.add_callback(late)

    engine = make_engine([Adder()], [])
    engine.run_event(Event.BATCH_END)
    assert journal == []
    engine.run_event(Event.BATCH_END)
    assert journal == [("late", "batch_end")]


def test_raising_callback_propagates():
    class Boom(Callback):
        def batch_end(self, state, logger):
            raise RuntimeError("loss went NaN at batch 7")

    engine = make_engine([Boom()], [])
    with pytest.raises(RuntimeError, match="NaN at batch 7"):
        engine.run_event(Event.BATCH_END)


def test_failing_destination_is_contained_and_reported_once(caplog):
    journal = []
    bad = RecordingDestination("bad", journal, fail_on={"batch_end", "log_metrics"})
    good = RecordingDestination("good", journal)
    engine = make_engine([], [bad, good])
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        for _ in range(3):
            engine.run_event(Event.BATCH_END)
            engine.logger.log_metrics({"x": 1.0})
    assert journal.count(("good", "batch_end")) == 3
    assert journal.count(("good", "log_metrics")) == 3
    assert engine.logger.failures.counts["bad"] == 6
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "bad.batch_end failed" in errors[0].getMessage()


def test_strict_logger_raises_destination_errors():
    bad = RecordingDestination("bad", [], fail_on={"batch_end"})
    engine = make_engine([], [bad], strict=True)
    with pytest.raises(DestinationError, match=r"bad\.batch_end failed"):
        engine.run_event(Event.BATCH_END)


def test_exception_event_contains_every_error(caplog):
    seen = []

    class BadFlush(Callback):
        def exception(self, state, logger):
            raise RuntimeError("flush failed")

    class Flush(Callback):
        def exception(self, state, logger):
            seen.append(type(state.exception).__name__)

    engine = make_engine([BadFlush(), Flush()], [])
    engine.state.exception = KeyError("original")
    engine.run_event(Event.EXCEPTION)
    assert seen == ["KeyError"]
    assert engine.logger.failures.counts["BadFlush"] == 1


def test_close_is_idempotent_and_best_effort(caplog):
    journal = []
    cb = Recorder("cb", journal)
    bad = RecordingDestination("bad", journal, fail_on={"close"})
    good = RecordingDestination("good", journal)
    engine = make_engine([cb], [bad, good])
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        engine.close()
        engine.close()
    assert journal == [
        ("cb", "close"),
        ("bad", "close"),
        ("good", "close"),
        ("cb", "post_close"),
        ("good", "post_close"),
    ]
    assert engine.closed
    assert [name for name, _ in engine.close_errors] == ["bad"]
    assert any("bad.close failed" in r.getMessage() for r in caplog.records)


def test_strict_close_raises_after_closing_everything():
    journal = []
    engine = make_engine(
        [],
        [
            RecordingDestination("bad", journal, fail_on={"close"}),
            RecordingDestination("good", journal),
        ],
        strict=True,
    )
    with pytest.raises(RuntimeError, match="bad failed to close"):
        engine.close()
    assert ("good", "post_close") in journal


def test_close_does_not_hide_the_exception_that_ended_the_run():
    engine = make_engine([], [RecordingDestination("bad", [], fail_on={"close"})], strict=True)
    with pytest.raises(KeyError, match="original"):
        try:
            raise KeyError("original")
        finally:
            engine.close()


@pytest.mark.parametrize(
    ("callbacks", "loggers", "match"),
    [
        ([InMemoryLogger()], [], "pass it in loggers"),
        (["not a callback"], [], "Expected a Callback"),
        ([], [Callback()], "Expected LoggerDestination"),
    ],
    ids=["destination-as-callback", "string", "callback-as-destination"],
)
def test_wrong_plugin_kinds_are_rejected(callbacks, loggers, match):
    state = State(run_name="t")
    with pytest.raises(TypeError, match=match):
        Engine(state, Logger(state, loggers), callbacks)


def test_a_destination_that_cannot_set_up_fails_at_init():
    class NoClobber(LoggerDestination):
        def init(self, state, logger):
            raise FileExistsError("metrics.txt already exists")

    with pytest.raises(FileExistsError, match="already exists"):
        make_engine([], [NoClobber()]).run_event(Event.INIT)


def test_destinations_that_store_files_close_last():
    from obsbus import LoggerDestination, Run

    order = []

    class Store(LoggerDestination):
        def can_upload_files(self):
            return True

        def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
            order.append(f"stored {remote_file_name}")

        def close(self, state, logger):
            order.append("store closed")

    class Writer(LoggerDestination):
        def close(self, state, logger):
            logger.upload_file("final.txt", "final.txt")
            order.append("writer closed")

    with Run(max_duration="1ba", loggers=[Store(), Writer()]) as run:
        for _ in run.train([[0]]):
            pass
    assert order == ["stored final.txt", "writer closed", "store closed"]
