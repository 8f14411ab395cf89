from __future__ import annotations

import itertools
import json

import pytest
import torch.nn.functional as F

from obsbus import Callback, LoggerDestination, Trainer
from obsbus.profiler import JSONTraceHandler, Profiler, ProfilerAction

from ..helpers import regression_data, tiny_model

A, S, SAVE = ProfilerAction.ACTIVE, ProfilerAction.SKIP, ProfilerAction.ACTIVE_AND_SAVE


def windows(state):
    """Batches 1-2 and 4-5 (0-based) record; 2 and 5 save."""
    return {1: A, 2: SAVE, 4: A, 5: SAVE}.get(state.timestamp.batch.value, S)


class Uploads(LoggerDestination):
    def __init__(self):
        self.names = []

    def can_upload_files(self):
        return True

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.names.append(remote_file_name)


def fit(tmp_path, handler, schedule=windows, callbacks=(), loggers=(), batches=8):
    trainer = Trainer(tiny_model(), regression_data(batches), "1ep", loss_fn=F.mse_loss,
                      device="cpu", run_name="r", run_folder=tmp_path / "run",
                      profiler=Profiler(schedule, [handler]), callbacks=list(callbacks),
                      loggers=list(loggers))
    return trainer


def load(path):
    return json.loads(path.read_text())["traceEvents"]


def balanced(events):
    depth = {}
    for e in events:
        if e["ph"] == "B":
            depth[e["name"]] = depth.get(e["name"], 0) + 1
        elif e["ph"] == "E":
            assert depth.get(e["name"], 0) > 0, f"unmatched end {e['name']}"
            depth[e["name"]] -= 1
    return all(v == 0 for v in depth.values())


def test_one_trace_per_saved_window_each_balanced(tmp_path):
    handler, uploads = JSONTraceHandler(merged_trace_filename=None), Uploads()
    with fit(tmp_path, handler, loggers=[uploads]) as trainer:
        trainer.fit()
    folder = tmp_path / "run" / "traces"
    assert [p.name for p in handler.saved_traces] == ["ep1-ba3-rank0.json", "ep1-ba6-rank0.json"]
    for path in handler.saved_traces:
        events = load(path)
        assert balanced(events)
        assert {e["pid"] for e in events} == {0}
        meta = {e["name"]: e["args"] for e in events if e["ph"] == "M"}
        assert meta["process_name"] == {"name": "rank 0"}
        assert meta["process_sort_index"] == {"sort_index": 0}
        assert meta["obsbus_clock"]["offset_us"] == 0.0
        batches = {e["args"]["batch"] for e in events if e["ph"] == "B" and e["name"] == "event/batch"}
        assert len(batches) == 2
        spans = [e for e in events if e["ph"] in "BE"]
        assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(spans))
    assert sorted(p.name for p in folder.glob("*.json")) == ["ep1-ba3-rank0.json", "ep1-ba6-rank0.json"]
    assert uploads.names == ["r/traces/ep1-ba3-rank0.json", "r/traces/ep1-ba6-rank0.json"]


def test_prunes_to_num_traces_to_keep(tmp_path):
    handler = JSONTraceHandler(num_traces_to_keep=1, merged_trace_filename=None)
    with fit(tmp_path, handler) as trainer:
        trainer.fit()
    assert [p.name for p in (tmp_path / "run" / "traces").glob("*.json")] == ["ep1-ba6-rank0.json"]


def test_a_crash_saves_what_was_recorded_balanced(tmp_path):
    class Boom(Callback):
        def after_forward(self, state, logger):
            if state.timestamp.batch >= "5ba":
                raise RuntimeError("boom")

    handler = JSONTraceHandler(merged_trace_filename=None)
    trainer = fit(tmp_path, handler, callbacks=[Boom()])
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit()
    trainer.close()
    last = load(handler.saved_traces[-1])
    assert balanced(last)
    assert any(e["name"] == "event/forward" and e["ph"] == "B" and e["args"]["batch"] == 5 for e in last)


def test_existing_traces_are_not_overwritten(tmp_path):
    with fit(tmp_path, JSONTraceHandler(merged_trace_filename=None)) as trainer:
        trainer.fit()
    with pytest.raises(FileExistsError, match=r"already holds traces.*overwrite=True"):
        fit(tmp_path, JSONTraceHandler())
    with fit(tmp_path, JSONTraceHandler(overwrite=True, merged_trace_filename=None)) as trainer:
        trainer.fit()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [({"num_traces_to_keep": 0}, ValueError, "-1 \\(keep all\\) or a positive int, got 0"),
     ({"filename": "{bogus}.json"}, ValueError, "unknown placeholder \\{bogus\\}"),
     ({"num_traces_to_keep": "3"}, TypeError, "must be a whole number >= -1, got '3'"),
     ({"overwrite": "false"}, TypeError, "JSONTraceHandler overwrite must be True or False, got 'false'"),
     ({"overwrite": None}, TypeError, "JSONTraceHandler overwrite must be True or False, got None")],
    ids=["zero", "placeholder", "type", "overwrite-str", "overwrite-none"],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        JSONTraceHandler(**kwargs)


def test_close_merges_every_window_into_one_trace(tmp_path):
    handler = JSONTraceHandler()
    with fit(tmp_path, handler) as trainer:
        trainer.fit()
    merged = load(tmp_path / "run" / "traces" / "merged_trace.json")
    assert {e["pid"] for e in merged} == {0}
    assert balanced(merged)
    batch_begins = [e for e in merged if e["ph"] == "B" and e["name"] == "event/batch"]
    assert len(batch_begins) == 4  # two windows of two batches


def test_a_file_where_the_trace_folder_goes_fails_before_the_first_trace(tmp_path):
    """Found when the first window was saved, mid-run; now when built, or at init for a
    folder relative to the run folder."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    with pytest.raises(NotADirectoryError, match=f"JSONTraceHandler folder must be a folder, and "
                                                  f"{str(taken)!r} is an existing file"):
        JSONTraceHandler(folder=str(taken))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "traces").write_text("a file")
    with pytest.raises(ValueError, match=f"JSONTraceHandler folder must be a folder, and "
                                         f"{str(tmp_path / 'run' / 'traces')!r}"):
        fit(tmp_path, JSONTraceHandler())
