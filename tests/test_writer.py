"""BackgroundWriter: order, flush, contained failures, bounded close, backpressure.

Hung writes block on a ``threading.Event`` that each test releases before it
ends, so no thread outlives its test. Timing bounds are deliberately loose:
the machine is small and noisy.
"""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
import torch

from obsbus import BackgroundWriter, LoggerDestination, Run, Trainer
from obsbus.loggers import InMemoryLogger

from .helpers import regression_data, tiny_model

BOUND_S = 5.0  # "returns in bounded time": generous on purpose


@pytest.fixture
def releases():
    """Events that hung writes wait on; all set at teardown so no thread stays blocked."""
    events: list[threading.Event] = []

    def make() -> threading.Event:
        event = threading.Event()
        events.append(event)
        return event

    yield make
    for event in events:
        event.set()


def _blocker(release: threading.Event):
    """A write that signals it started, then waits for ``release``; and its ``started`` event."""
    started = threading.Event()

    def hung_write():
        started.set()
        release.wait()

    return hung_write, started


def _records(caplog, level, text):
    return [r for r in caplog.records if r.levelno == level and text in r.getMessage()]


def _wait_until(predicate, timeout=BOUND_S):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


# ----------------------------------------------------------------- basics


def test_writes_run_in_submission_order():
    out = []
    writer = BackgroundWriter("ordered", max_queue_size=8)
    for i in range(500):
        writer.submit(out.append, i)
    assert writer.flush() is True
    assert out == list(range(500))
    assert writer.close() is True


def test_writes_run_off_the_calling_thread():
    threads = []
    writer = BackgroundWriter("threaded")
    writer.submit(lambda: threads.append(threading.current_thread()))
    writer.flush()
    writer.close()
    assert threads[0] is not threading.current_thread()
    assert threads[0].daemon
    assert "threaded" in threads[0].name


def test_flush_waits_for_all_submitted_work():
    out = []

    def slow_append(i):
        time.sleep(0.01)
        out.append(i)

    writer = BackgroundWriter("slow")
    for i in range(20):
        writer.submit(slow_append, i)
    assert writer.flush() is True
    assert out == list(range(20))
    assert writer.pending == 0
    writer.close()


def test_flush_before_any_submit_and_after_close_returns_true():
    writer = BackgroundWriter("idle")
    assert writer.flush() is True
    assert writer.flush(timeout=0.1) is True
    writer.submit(lambda: None)
    writer.close()
    assert writer.flush() is True


def test_flush_with_timeout_returns_false_on_a_hung_write(releases):
    release = releases()
    hung, started = _blocker(release)
    writer = BackgroundWriter("stuck-flush")
    writer.submit(hung)
    assert started.wait(BOUND_S)
    t0 = time.monotonic()
    assert writer.flush(timeout=0.2) is False
    assert time.monotonic() - t0 < BOUND_S
    assert writer.pending == 1
    release.set()
    assert writer.flush(timeout=BOUND_S) is True
    assert writer.pending == 0
    assert writer.close() is True


# --------------------------------------------------------------- failures


def test_failing_write_is_contained_counted_and_reported_once(caplog):
    caplog.set_level(logging.INFO, logger="obsbus")
    out = []

    def write(i):
        if i % 2:
            raise OSError(f"disk full writing {i}")
        out.append(i)

    writer = BackgroundWriter("flaky-disk")
    for i in range(7):  # 1, 3, 5 fail
        writer.submit(write, i)
    assert writer.flush() is True
    assert out == [0, 2, 4, 6]  # the writes after each failure still ran
    assert writer.failure_count == 3
    assert writer.failures.counts["flaky-disk"] == 3
    assert writer.pending == 0

    errors = _records(caplog, logging.ERROR, "flaky-disk")
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "write" in errors[0].getMessage()  # the action: the function's name
    assert errors[0].exc_info and "disk full writing 1" in str(errors[0].exc_info[1])

    assert writer.close() is True  # failures are not a dirty close
    assert len(_records(caplog, logging.ERROR, "flaky-disk")) == 1
    summary = _records(caplog, logging.WARNING, "flaky-disk failed 3 time(s)")
    assert len(summary) == 1


def test_failure_log_can_be_shared_and_names_each_writer(caplog):
    caplog.set_level(logging.INFO, logger="obsbus")
    a = BackgroundWriter("alpha")
    b = BackgroundWriter("beta", failures=a.failures)

    def boom():
        raise ValueError("nope")

    for _ in range(2):
        a.submit(boom)
        b.submit(boom)
    a.flush()
    b.flush()
    assert (a.failure_count, b.failure_count) == (2, 2)
    assert len(_records(caplog, logging.ERROR, "alpha")) == 1
    assert len(_records(caplog, logging.ERROR, "beta")) == 1
    a.close()
    b.close()


# ------------------------------------------------------------------ close


def test_close_with_a_hung_write_returns_false_in_bounded_time(caplog, releases):
    caplog.set_level(logging.INFO, logger="obsbus")
    release = releases()
    hung, started = _blocker(release)
    done = []
    writer = BackgroundWriter("hung-backend")
    writer.submit(hung)
    assert started.wait(BOUND_S)
    for i in range(3):
        writer.submit(done.append, i)

    t0 = time.monotonic()
    assert writer.close(timeout=0.5) is False
    assert time.monotonic() - t0 < BOUND_S

    errors = _records(caplog, logging.ERROR, "hung-backend")
    assert len(errors) == 1
    assert "4 write(s) were not delivered" in errors[0].getMessage()
    assert done == []
    release.set()


def test_close_with_a_hung_write_and_a_full_queue_returns_in_bounded_time(caplog, releases):
    caplog.set_level(logging.INFO, logger="obsbus")
    release = releases()
    hung, started = _blocker(release)
    writer = BackgroundWriter("hung-full", max_queue_size=1)
    writer.submit(hung)
    assert started.wait(BOUND_S)
    writer.submit(lambda: None)  # fills the queue: close can't even enqueue its stop marker

    t0 = time.monotonic()
    assert writer.close(timeout=0.5) is False
    assert time.monotonic() - t0 < BOUND_S
    errors = _records(caplog, logging.ERROR, "hung-full")
    assert len(errors) == 1 and "2 write(s) were not delivered" in errors[0].getMessage()
    release.set()


def test_close_twice_is_safe():
    out = []
    writer = BackgroundWriter("twice")
    assert writer.close() is True  # never started
    writer.submit(out.append, 1)
    assert writer.close() is True
    assert writer.close() is True
    assert out == [1]


def test_close_flushes_pending_writes():
    out = []

    def slow_append(i):
        time.sleep(0.005)
        out.append(i)

    writer = BackgroundWriter("closing")
    for i in range(30):
        writer.submit(slow_append, i)
    assert writer.close() is True
    assert out == list(range(30))


def test_closed_writer_restarts_on_next_submit():
    out = []
    writer = BackgroundWriter("reused")
    writer.submit(out.append, "first")
    first_thread = writer._worker.thread
    writer.close()
    writer.submit(out.append, "second")
    assert writer.flush() is True
    assert out == ["first", "second"]
    assert writer._worker.thread.is_alive()
    assert writer._worker.thread is not first_thread
    assert writer.close() is True
    assert writer.pending == 0


def _restart_after_timed_out_close(releases, active, max_active, out):
    """Hang a write, close(timeout) (returns False), then submit again so the writer restarts."""
    lock = threading.Lock()
    release = releases()
    started = threading.Event()

    def tracked(fn):
        def write(*args):
            with lock:
                active[0] += 1
                max_active[0] = max(max_active[0], active[0])
            try:
                fn(*args)
            finally:
                with lock:
                    active[0] -= 1

        return write

    def hang():
        started.set()
        release.wait()

    writer = BackgroundWriter("restarted-after-hang")
    writer.submit(tracked(hang))
    assert started.wait(BOUND_S)
    for i in range(3):
        writer.submit(tracked(out.append), ("old", i))
    assert writer.close(timeout=0.2) is False
    writer.submit(tracked(out.append), ("new", 0))
    return writer, release


def test_restart_after_timed_out_close_drops_what_close_gave_up_on(releases, caplog):
    # close() reported the 3 queued writes as not delivered: they must not land
    # later, after newer writes; the new write runs once the hung one returns.
    caplog.set_level(logging.ERROR, logger="obsbus")
    out = []
    writer, release = _restart_after_timed_out_close(releases, [0], [0], out)
    assert "4 write(s) were not delivered" in caplog.text  # the hung one and 3 queued
    release.set()
    assert writer.flush(timeout=BOUND_S) is True
    time.sleep(0.05)
    assert out == [("new", 0)]
    assert writer.pending == 0
    writer.close()


def test_restart_after_timed_out_close_never_runs_two_writes_at_once(releases):
    active, max_active, out = [0], [0], []
    writer, release = _restart_after_timed_out_close(releases, active, max_active, out)
    # The new write waits for the hung one rather than running beside it.
    assert writer.flush(timeout=0.3) is False
    assert out == []
    release.set()
    assert writer.flush(timeout=BOUND_S) is True
    writer.close()
    assert max_active[0] == 1, f"{max_active[0]} writes of one writer ran at once; order: {out}"
    assert out == [("new", 0)]


# --------------------------------------------------------------- backpressure


def test_full_queue_blocks_submit_instead_of_dropping(caplog, releases):
    caplog.set_level(logging.INFO, logger="obsbus")
    out = []
    writer = BackgroundWriter("tiny-queue", max_queue_size=2)

    def round_of_backpressure(tag: str, blocked_before: int) -> None:
        release = releases()
        hung, started = _blocker(release)
        writer.submit(hung)
        assert started.wait(BOUND_S)  # the writer thread holds it; the queue is empty
        writer.submit(out.append, f"{tag}1")
        writer.submit(out.append, f"{tag}2")  # the queue is full now
        submitter = threading.Thread(target=writer.submit, args=(out.append, f"{tag}3"))
        submitter.start()
        assert _wait_until(lambda: writer.blocked_submits == blocked_before + 1)
        submitter.join(0.3)
        assert submitter.is_alive(), "submit returned although the queue was full"
        assert out[-1:] != [f"{tag}3"]
        release.set()
        submitter.join(BOUND_S)
        assert not submitter.is_alive()
        assert writer.flush(timeout=BOUND_S) is True

    round_of_backpressure("a", blocked_before=0)
    round_of_backpressure("b", blocked_before=1)

    assert out == ["a1", "a2", "a3", "b1", "b2", "b3"]  # nothing dropped, in order
    assert writer.blocked_submits >= 2
    warnings = _records(caplog, logging.WARNING, "tiny-queue")
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "full" in warnings[0].getMessage() and "2" in warnings[0].getMessage()
    assert writer.close() is True


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.5, "8", None])
def test_invalid_max_queue_size_raises_naming_the_value(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        BackgroundWriter("bad", max_queue_size=bad)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"name": None}, TypeError, "BackgroundWriter name must be a non-empty str, got None"),
    ({"name": 5}, TypeError, "BackgroundWriter name must be a non-empty str, got 5"),
    ({"name": ""}, ValueError, "BackgroundWriter name must be a non-empty str, got ''"),
    ({"name": "w", "failures": 5}, TypeError,
     "BackgroundWriter failures must be a FailureLog or None, got 5"),
], ids=["name-none", "name-int", "name-empty", "failures-int"])
def test_a_writer_checks_its_name_and_failure_log(kwargs, error, match):
    """A failures=5 was kept (5 is truthy) and broke the first report, on the writer thread."""
    with pytest.raises(error, match=match):
        BackgroundWriter(**kwargs)


# ------------------------------------------------------- as a destination


class FlakyDiskDestination(LoggerDestination):
    """Writes metrics through a BackgroundWriter; every write fails."""

    name = "flaky-disk-dest"

    def __init__(self) -> None:
        self.writer: BackgroundWriter | None = None
        self.attempts = 0

    def init(self, state, logger):
        self.writer = BackgroundWriter(self.name, max_queue_size=4, failures=logger.failures)

    def _write(self, step, metrics):
        self.attempts += 1
        raise OSError(f"disk full at step {step}")

    def log_metrics(self, metrics, step=None):
        self.writer.submit(self._write, step, dict(metrics))

    def fit_end(self, state, logger):
        self.writer.flush()

    def exception(self, state, logger):
        self.writer.flush()

    def close(self, state, logger):
        self.writer.close()


def test_failing_destination_writer_under_trainer(caplog):
    caplog.set_level(logging.INFO, logger="obsbus")
    flaky, mem = FlakyDiskDestination(), InMemoryLogger()
    with Trainer(
        tiny_model(),
        regression_data(batches=5),
        "2ep",
        loss_fn=torch.nn.functional.mse_loss,
        loggers=[flaky, mem],
        device="cpu",
    ) as trainer:
        trainer.fit()

    assert trainer.state.timestamp.batch.value == 10
    series = mem.get_timeseries("loss/train/total")
    assert series["batch"] == list(range(1, 11))
    assert all(isinstance(v, float) for v in series["loss/train/total"])
    assert flaky.attempts == 10
    assert flaky.writer.failure_count == 10
    errors = _records(caplog, logging.ERROR, "flaky-disk-dest")
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert isinstance(errors[0].exc_info[1], OSError)


def test_failing_destination_writer_under_run(caplog):
    caplog.set_level(logging.INFO, logger="obsbus")
    flaky, mem = FlakyDiskDestination(), InMemoryLogger()
    with Run(max_duration="6ba", loggers=[flaky, mem], num_samples_fn=lambda b: 1) as run:
        for step, _ in enumerate(run.train(range(6))):
            run.log_metrics({"m": float(step)}, step=step)

    assert [v for _, v in mem.data["m"]] == [float(i) for i in range(6)]
    assert mem.steps["m"] == list(range(6))
    assert flaky.writer.failure_count == 6
    errors = _records(caplog, logging.ERROR, "flaky-disk-dest")
    assert len(errors) == 1, [r.getMessage() for r in errors]


def test_try_submit_gives_up_after_its_timeout_when_the_writer_is_stuck():
    release = threading.Event()
    writer = BackgroundWriter("stuck", max_queue_size=1)
    writer.submit(release.wait, 10)  # running
    assert writer.try_submit(print, "queued", timeout=1)  # fills the queue
    assert not writer.try_submit(print, "no room", timeout=0.05)
    assert writer.pending == 2
    release.set()
    assert writer.close(timeout=5)


def test_a_timed_out_wait_marks_the_writer_stalled_until_a_write_finishes():
    release = threading.Event()
    writer = BackgroundWriter("stall-demo")
    writer.submit(release.wait, 30)
    assert not writer.stalled
    assert writer.flush(timeout=0.05) is False
    assert writer.stalled  # a later wait (close after fit_end) can give up at once
    release.set()
    assert writer.flush(timeout=10) is True
    assert not writer.stalled  # it moved: waits are waited again
    assert writer.close(timeout=10)
