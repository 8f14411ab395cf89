"""Two real ranks profile one run: per-rank traces, clocks aligned, one merged trace at close."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch.nn.functional as F

from obsbus import Callback, Trainer
from obsbus.profiler.json_trace_handler import JSONTraceHandler
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.schedule import cyclic_schedule
from obsbus.profiler.system_profiler import SystemProfiler

from .._dist_utils import run_two_ranks
from ..helpers import regression_data, tiny_model
from ._trace_checks import check_trace, counters

pytestmark = pytest.mark.dist


class Slow(Callback):
    """Makes each step last ``seconds`` (rank 1's last step ``last_rank1`` s), so samples land."""

    def __init__(self, seconds, batches, last_rank1=0.0):
        self.seconds, self.batches, self.last_rank1 = seconds, batches, last_rank1

    def after_forward(self, state, logger):
        last = state.timestamp.batch.value == self.batches - 1
        time.sleep(self.last_rank1 if last and state.rank == 1 else self.seconds)


def _profiled_fit(rank, folder, batches, last_rank1=0.0):
    # Batches 0 skip, 1 warm-up, 2-3 recorded (3 saves), the rest skipped; markers record
    # from the warm-up on, as Composer's do.
    handler = JSONTraceHandler()
    profiler = Profiler(cyclic_schedule(wait=1, warmup=1, active=2, repeat=1), [handler])
    system = SystemProfiler(profile_memory=True, stats_thread_interval_seconds=0.01)
    with Trainer(tiny_model(), regression_data(batches), "1ep", loss_fn=F.mse_loss, device="cpu",
                 run_name="two-ranks", run_folder=folder, profiler=profiler,
                 callbacks=[system, Slow(0.03, batches, last_rank1)]) as trainer:  # fmt: skip
        trainer.fit()
    return [str(p) for p in handler.saved_traces]


def _first(events, name, pid):
    return min(e["ts"] for e in events if e["ph"] == "B" and e["name"] == name and e["pid"] == pid)


def _two_runs(rank, tmp):
    # One spawn, two runs: a plain one, and one whose window ends at the last batch, which
    # rank 1 finishes 0.5 s after rank 0.
    return _profiled_fit(rank, f"{tmp}/run", 6), _profiled_fit(rank, f"{tmp}/late", 4, 0.5)


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_rank_traces")
    saved = [plain for plain, _ in run_two_ranks(_two_runs, tmp / "dist", str(tmp))]
    return tmp, saved


def test_each_rank_saves_one_valid_trace_with_its_clock_offset(two_rank_run):
    _, saved = two_rank_run
    assert [[p.split("/")[-1] for p in paths] for paths in saved] == [
        ["ep1-ba4-rank0.json"],
        ["ep1-ba4-rank1.json"],
    ]
    for rank, (path,) in enumerate(saved):
        doc = json.loads(Path(path).read_text())
        events = check_trace(doc)
        assert doc["otherData"]["rank"] == rank
        assert {e["pid"] for e in events} == {rank}
        meta = {e["name"]: e["args"] for e in events if e["ph"] == "M"}
        assert meta["process_name"] == {"name": f"rank {rank}"}
        offset = meta["obsbus_clock"]["offset_us"]
        assert isinstance(offset, float)
        if rank == 0:
            assert offset == 0.0
        assert abs(offset) < 1e6  # one machine: the clocks agree within a second
        batches = {
            e["args"]["batch"] for e in events if e["ph"] == "B" and e["name"] == "event/batch"
        }
        assert batches == {1, 2, 3}
        assert {e["name"] for e in counters(events)} >= {"system/cpu_percent"}


def test_one_merged_trace_with_a_process_row_per_rank_and_aligned_clocks(two_rank_run):
    tmp, saved = two_rank_run
    folder = tmp / "run" / "traces"
    assert sorted(p.name for p in folder.glob("*merged*")) == ["merged_trace.json"]
    merged = json.loads((folder / "merged_trace.json").read_text())
    events = check_trace(merged)
    assert {e["pid"] for e in events if e["ph"] != "M"} == {0, 1}
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    other = merged["otherData"]
    assert other["unaligned_ranks"] == []
    assert set(other["clock_offsets_us"]) == {"0", "1"}

    # The offset each rank measured is applied once: merged ts = recorded ts + offset.
    for rank, (path,) in enumerate(saved):
        own = json.loads(Path(path).read_text())["traceEvents"]
        offset = next(e["args"]["offset_us"] for e in own if e["name"] == "obsbus_clock")
        assert other["clock_offsets_us"][str(rank)] == offset
        recorded = _first(own, "event/batch", rank)
        assert _first(events, "event/batch", rank) == pytest.approx(recorded + offset)
    # After alignment both ranks' first recorded batch starts within a second of the other's.
    assert abs(_first(events, "event/batch", 0) - _first(events, "event/batch", 1)) < 1e6


def test_merged_trace_holds_a_rank_that_finishes_late(two_rank_run):
    # Rank 1's last step is slower, so it saves its last window after rank 0 has; the
    # handlers meet at fit_end, so rank 0's merge at close still finds it.
    tmp, _ = two_rank_run
    assert sorted(p.name for p in (tmp / "late" / "traces").glob("*rank*.json")) == [
        "ep1-ba4-rank0.json",
        "ep1-ba4-rank1.json",
    ]
    merged = json.loads((tmp / "late" / "traces" / "merged_trace.json").read_text())
    assert {e["pid"] for e in check_trace(merged) if e["ph"] != "M"} == {0, 1}
