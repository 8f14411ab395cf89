"""Issue 34, section 6: the numbers a person reads are true and labeled.

Each test plants a known truth (a fake clock, a known allocation, a known
logging order) and reads back what the console, the loguru log, the JSON
Lines file and the trace file names show.
"""

from __future__ import annotations

import io
import json
import re
import resource
import sys

import pytest
import torch.nn.functional as F
from typing_extensions import override

import obsbus.callbacks.speed_monitor as speed_module
from obsbus import Callback, Run, RunFolder, Trainer
from obsbus.callbacks import MemoryMonitor, SpeedMonitor
from obsbus.callbacks.memory_monitor import host_memory_report
from obsbus.log import reset_logging, setup_logging
from obsbus.loggers import ConsoleLogger, FileLogger, LoguruLogger
from obsbus.profiler import JSONTraceHandler, Profiler, ProfilerAction

from ..helpers import regression_data, tiny_model

SECONDS_PER_BATCH = 5.5  # the fake clock: two batches are 11 s, 0.0030556 h


@pytest.fixture
def fake_clock(monkeypatch):
    now = [1000.0]

    def clock() -> float:
        return now[0]

    class Tick(Callback):
        @override
        def before_train_batch(self, state, logger):
            now[0] += SECONDS_PER_BATCH

    monkeypatch.setattr(speed_module, "_clock", clock)
    return Tick()


def _console_values(text: str) -> dict[str, str]:
    return dict(re.findall(r"Train (\S+): (.+)", text))


@pytest.mark.parametrize(
    ("time_unit", "unit", "per_second"),
    [("hours", "h", 1 / 3600), ("seconds", "s", 1.0), ("minutes", "min", 1 / 60)],
    ids=["hours", "seconds", "minutes"],
)
def test_console_shows_time_in_the_unit_the_monitor_logged(
    tmp_path, fake_clock, time_unit, unit, per_second
):
    out = io.StringIO()
    speed = SpeedMonitor(window_size=1, time_unit=time_unit)
    console = ConsoleLogger(log_interval="2ba", stream=out)
    with Run(max_duration="2ba", run_folder=tmp_path / "r", callbacks=[fake_clock, speed],
             loggers=[console]) as run:  # fmt: skip
        for _ in run.train([[1, 2], [3, 4]]):
            run.state.loss = 0.25
    shown = _console_values(out.getvalue())
    number, shown_unit = shown["time/train"].split(" ")
    assert shown_unit == unit
    truth = 2 * SECONDS_PER_BATCH * per_second
    assert float(number) == pytest.approx(truth, rel=1e-3)  # 4 significant digits at least
    assert shown["throughput/samples_per_sec"].endswith(" samples/s")
    assert shown["loss/train/total"] == "0.2500"  # no unit declared: none shown
    units = json.loads((tmp_path / "r" / "config" / "units.json").read_text())["units"]
    assert units["time/train"] == unit


def test_loguru_line_carries_units_and_eval_label_once(tmp_path, fake_clock):
    setup_logging(tmp_path, stderr=False)
    try:
        with Trainer(tiny_model(), regression_data(2), "1ep", loss_fn=F.mse_loss, device="cpu",
                     eval_dataloader=regression_data(2, seed=1), progress_bar=False,
                     callbacks=[fake_clock, SpeedMonitor(window_size=1)],
                     loggers=[LoguruLogger(log_interval="2ba")]) as trainer:  # fmt: skip
            trainer.fit()
    finally:
        reset_logging()
    text = (RunFolder(tmp_path).logs_dir("train", 0) / "info.log").read_text()
    assert re.search(r" time/train=0\.003056 h", text), text
    assert "[eval eval]" not in text
    assert re.search(r"\[epoch=1\]\[eval=eval\] after batch 2 metrics/eval/loss=\d", text), text


class Shuffled(Callback):
    """Logs the same keys in a different order every batch."""

    @override
    def batch_end(self, state, logger):
        keys = ["b/x", "a/y", "c/z"]
        shift = state.timestamp.batch.value % 3
        logger.log_metrics({k: 1.5 for k in keys[shift:] + keys[:shift]})


def test_console_keys_in_one_stable_order(tmp_path):
    out = io.StringIO()
    with Run(max_duration="3ba", run_folder=tmp_path / "r", callbacks=[Shuffled()],
             loggers=[ConsoleLogger(log_interval="1ba", stream=out)]) as run:  # fmt: skip
        for _ in run.train([[1], [2], [3]]):
            run.state.loss = 0.5
    blocks = [re.findall(r"Train (\S+):", b) for b in out.getvalue().split("[batch=")[1:]]
    assert len(blocks) == 3
    assert all(keys == sorted(keys) for keys in blocks), blocks
    assert blocks[0] == blocks[1] == blocks[2]


def test_one_number_format_keeps_four_significant_digits():
    from obsbus.loggers.console_logger import format_value

    assert format_value(11 / 3600) == "0.003056"
    assert format_value(0.25) == "0.2500"
    assert format_value(0.012345) == "0.01235"


def test_epochs_numbered_alike_on_console_in_json_lines_and_in_trace_names(tmp_path):
    """Batches 3 and 4 of 2 x 2 are the second epoch: every output says so, counted from 1."""
    save_at = {2: ProfilerAction.ACTIVE, 3: ProfilerAction.ACTIVE_AND_SAVE}  # 0-based batches

    def schedule(state):
        return save_at.get(state.timestamp.batch.value, ProfilerAction.SKIP)

    out = io.StringIO()
    handler = JSONTraceHandler(merged_trace_filename=None)
    with Trainer(tiny_model(), regression_data(2), "2ep", loss_fn=F.mse_loss, device="cpu",
                 run_name="r", run_folder=tmp_path / "run", progress_bar=False,
                 profiler=Profiler(schedule, [handler]),
                 loggers=[ConsoleLogger(log_interval="1ba", stream=out),
                          FileLogger(jsonl_filename="metrics.jsonl", log_interval=1)]) as trainer:  # fmt: skip
        trainer.fit()
    headers = re.findall(r"\[epoch=(\d+)\]\[batch=(\d+)/2\]", out.getvalue())
    console = [int(e) for e, _ in headers[:4]]
    assert console == [1, 1, 2, 2]
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in rows if "loss/train/total" in r]
    assert [r["epoch"] for r in train] == console
    (trace,) = handler.saved_traces
    # the window of the second epoch's two batches, saved as global batch 4 ends
    assert trace.name == "ep2-ba4-rank0.json"


def test_host_peak_is_never_below_current_and_sees_a_known_allocation():
    before = host_memory_report()
    size = 300_000_000
    block = bytearray(size)  # zero-filled: every page touched
    during = host_memory_report()
    del block
    after = host_memory_report()
    for report in (before, during, after):
        assert report["memory/host_peak_rss_mem"] >= report["memory/host_rss_mem"], report
    grown = during["memory/host_rss_mem"] - before["memory/host_rss_mem"]
    assert grown == pytest.approx(size / 1e9, rel=0.05)
    assert after["memory/host_peak_rss_mem"] >= during["memory/host_rss_mem"]
    if sys.platform.startswith("linux"):  # ru_maxrss in KiB
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 >= size


def test_memory_monitor_rows_peak_at_least_current(tmp_path):
    from obsbus.loggers import InMemoryLogger

    mem = InMemoryLogger()
    hold = []

    class Grow(Callback):
        @override
        def before_train_batch(self, state, logger):
            hold.append(bytearray(20_000_000))

    with Run(max_duration="4ba", run_folder=tmp_path / "r", loggers=[mem],
             callbacks=[Grow(), MemoryMonitor(log_interval="1ba")]) as run:  # fmt: skip
        for _ in run.train([[1], [2], [3], [4]]):
            pass
    current = mem.get_timeseries("memory/host_rss_mem")["memory/host_rss_mem"]
    peak = mem.get_timeseries("memory/host_peak_rss_mem")["memory/host_peak_rss_mem"]
    assert len(current) == len(peak) == 4
    assert all(p >= c for p, c in zip(peak, current, strict=True)), (peak, current)
    units = json.loads((tmp_path / "r" / "config" / "units.json").read_text())["units"]
    from obsbus._units import unit_of

    assert unit_of("memory/host_rss_mem", units) == "GB"
    assert unit_of("memory/host_peak_rss_mem", units) == "GB"
