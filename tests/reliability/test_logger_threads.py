"""Logging from other threads loses nothing (issue 34, section 2).

Four user threads call ``run.logger.log_metrics`` while the loop trains and
logs its loss. Every row of every thread and of the loop reaches FileLogger's
JSON Lines and TensorBoard: a row is either still held or handed over, never
appended to a list that was just handed over and replaced.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from obsbus import Run
from obsbus.loggers import FileLogger, InMemoryLogger
from obsbus.loggers.tensorboard_logger import TensorboardLogger

THREADS = 4
CALLS = 2000


def train_while_threads_log(
    run: Run, background: Callable[[int], None], go: threading.Event
) -> None:
    """Train until ``THREADS`` threads running ``background(t)`` are done; they start logging
    once the first batch runs (``go``), so they log while batches run and hand over."""
    threads = [threading.Thread(target=background, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for _ in run.train([[1]] * 1000000):
        run.state.loss = 0.5
        go.set()
        if not any(thread.is_alive() for thread in threads):
            run.state.stop_training()
    for thread in threads:
        thread.join()


def test_four_threads_and_the_loop_lose_no_row(tmp_path: Path) -> None:
    tb = TensorboardLogger(log_env=False, log_git=False, write_period=0)
    mem = InMemoryLogger()
    go = threading.Event()
    with Run(max_duration="1000000ba", run_folder=tmp_path, run_name="r",
             loggers=[FileLogger(flush_interval=1), tb, mem]) as run:  # fmt: skip

        def background(t: int) -> None:
            go.wait()
            for i in range(1, CALLS + 1):
                run.logger.log_metrics({f"bg{t}/x": float(i)}, step=i)

        train_while_threads_log(run, background, go)
    batches = run.state.timestamp.batch.value
    rows = [
        json.loads(line) for line in (tmp_path / "metrics-rank0.jsonl").read_text().splitlines()
    ]
    for t in range(THREADS):
        got = sorted(r[f"bg{t}/x"] for r in rows if f"bg{t}/x" in r)
        assert got == [float(i) for i in range(1, CALLS + 1)], (t, CALLS - len(got))
    loss_steps = [r["step"] for r in rows if "loss/train/total" in r]
    assert loss_steps == list(range(1, batches + 1))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    for t in range(THREADS):
        assert len(events.Scalars(f"bg{t}/x")) == CALLS, t
    assert len(events.Scalars("loss/train/total")) == batches
    for t in range(THREADS):
        assert len(mem.get_timeseries(f"bg{t}/x")[f"bg{t}/x"]) == CALLS, t
    assert not run.logger.failures.counts


def test_every_logger_method_from_threads_loses_nothing(tmp_path: Path) -> None:
    """Hyperparameters, traces and tables from threads, beside the loop's metrics."""
    mem = InMemoryLogger()
    calls = 200
    go = threading.Event()
    with Run(max_duration="1000000ba", run_folder=tmp_path, run_name="r",
             loggers=[FileLogger(flush_interval=1), mem]) as run:  # fmt: skip

        def background(t: int) -> None:
            go.wait()
            for i in range(calls):
                run.logger.log_hyperparameters({f"h{t}_{i}": i})
                run.logger.log_traces({f"t{t}_{i}": "x"})
                run.logger.log_table(["a"], [[i]], name=f"table{t}_{i}")

        train_while_threads_log(run, background, go)
    text = (tmp_path / "logs-rank0.txt").read_text()
    for t in range(THREADS):
        for i in range(calls):
            assert f"h{t}_{i}: {i}" in text and f"t{t}_{i}: x" in text, (t, i)
            assert f"table{t}_{i}" in text and mem.tables[f"table{t}_{i}"]["rows"] == [[i]]
            assert mem.hyperparameters[f"h{t}_{i}"] == i and mem.traces[f"t{t}_{i}"] == "x"
    assert not run.logger.failures.counts


def test_printing_destinations_print_the_last_value_of_every_thread(tmp_path: Path) -> None:
    """ConsoleLogger takes what it prints under the lock its log_metrics holds: the last value
    a thread logs is printed (in this print or the next), never lost in a dict already taken."""
    import io

    from obsbus.loggers import ConsoleLogger

    text = io.StringIO()
    go = threading.Event()
    with Run(max_duration="1000000ba", run_folder=tmp_path, run_name="r",
             loggers=[ConsoleLogger(stream=text)]) as run:  # fmt: skip

        def background(t: int) -> None:
            go.wait()
            for i in range(1, CALLS + 1):
                run.logger.log_metrics({f"bg{t}/x": i})

        train_while_threads_log(run, background, go)
    out = text.getvalue()
    for t in range(THREADS):
        assert f"bg{t}/x: {CALLS:,}" in out or f"bg{t}/x: {CALLS}" in out, t
    assert not run.logger.failures.counts
