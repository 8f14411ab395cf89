"""TorchProfiler: torch.profiler driven by the Profiler's schedule, its files and hand-offs."""

from __future__ import annotations

import gzip
import json
import logging
import pickle
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, LoggerDestination, Run, Trainer
from obsbus.callbacks._cuda_memory import MemoryHistory
from obsbus.errors import ObsbusWarning
from obsbus.profiler import _torch_trace
from obsbus.profiler.json_trace_handler import JSONTraceHandler
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.schedule import cyclic_schedule
from obsbus.profiler.torch_profiler import TorchProfiler
from obsbus.profiler.trace_handler import TraceHandler

from ..helpers import regression_data, tiny_model


class Uploads(LoggerDestination):
    """Stores files: the remote name and the bytes it was handed (read at hand-over)."""

    def __init__(self):
        self.files: dict[str, bytes] = {}

    def can_upload_files(self):
        return True

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.files[remote_file_name] = file_path.read_bytes()


class Handed(TraceHandler):
    def __init__(self):
        self.paths = []

    def process_chrome_json_trace_file(self, file_path):
        self.paths.append((file_path, file_path.is_file()))


class FakeHistory(MemoryHistory):
    """The shared history's logic for real; torch.cuda's calls faked."""

    def __init__(self):
        super().__init__()
        self.records = []

    def unavailable_reason(self, device):
        return None

    def _record(self, setting):
        self.records.append(setting)

    def snapshot(self):
        return {"segments": [], "device_traces": [[]]}


def train(profiler, batches=4, data_batches=None, loggers=(), callbacks=(), raise_at=None):
    """A plain loop under Run: forward and backward of a tiny model per batch."""
    model = tiny_model()
    data = regression_data(data_batches or batches, batch_size=2)
    with Run(model=model, max_duration=f"{batches}ba", run_name="r", run_folder="run",
             device="cpu", profiler=profiler, loggers=list(loggers),
             callbacks=list(callbacks)) as run:
        for i, (x, y) in enumerate(run.train(data)):
            if i == raise_at:
                raise RuntimeError("boom")
            F.mse_loss(model(x), y).backward()
    return profiler.torch_profiler


def trace(path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def steps(doc):
    return sorted(e["name"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#"))


def test_a_trace_per_saved_window_named_from_placeholders_handed_on_and_uploaded(tmp_path):
    handed, uploads = Handed(), Uploads()
    profiler = Profiler(cyclic_schedule(warmup=1, active=1, repeat=2), [handed],
                        torch_prof_folder="tt/{run_name}",
                        torch_prof_filename="{run_name}-ep{epoch}-ba{batch}-rank{rank}.json")
    tp = train(profiler, loggers=[uploads])
    folder = tmp_path / "run" / "tt" / "r"
    assert tp.saved_traces == [folder / "r-ep1-ba2-rank0.json", folder / "r-ep1-ba4-rank0.json"]
    first, second = (trace(p) for p in tp.saved_traces)
    # Batches 0 and 2 warm up, 1 and 3 record: each window holds its own batch only.
    assert (steps(first), steps(second)) == (["ProfilerStep#1"], ["ProfilerStep#3"])
    assert first["otherData"] == {"rank": 0, "run_name": "r", "source": "torch.profiler"}
    assert any(e["name"] == "aten::addmm" for e in first["traceEvents"])
    assert handed.paths == [(p, True) for p in tp.saved_traces]
    # The default remote name, filled when each window was saved; the bytes are the trace.
    assert sorted(uploads.files) == ["r/torch_traces/rank0.2.pt.trace.json",
                                     "r/torch_traces/rank0.4.pt.trace.json"]
    assert json.loads(uploads.files["r/torch_traces/rank0.4.pt.trace.json"]) == second


def test_gzip_writes_a_valid_gzipped_trace_and_uploads_it_as_gz(tmp_path):
    uploads = Uploads()
    profiler = Profiler(cyclic_schedule(warmup=0, active=1), torch_prof_folder="tt",
                        torch_prof_use_gzip=True)
    tp = train(profiler, batches=1, loggers=[uploads])
    assert tp.saved_traces == [tmp_path / "run" / "tt" / "rank0.1.pt.trace.json.gz"]
    assert steps(trace(tp.saved_traces[0])) == ["ProfilerStep#0"]
    assert list(uploads.files) == ["r/torch_traces/rank0.1.pt.trace.json.gz"]
    assert json.loads(gzip.decompress(uploads.files["r/torch_traces/rank0.1.pt.trace.json.gz"]))


def test_num_traces_to_keep_prunes_the_oldest_but_every_trace_was_uploaded(tmp_path):
    uploads = Uploads()
    profiler = Profiler(cyclic_schedule(warmup=0, active=1, repeat=0), torch_prof_folder="tt",
                        torch_prof_num_traces_to_keep=2)
    tp = train(profiler, batches=3, loggers=[uploads])
    folder = tmp_path / "run" / "tt"
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.2.pt.trace.json",
                                                         "rank0.3.pt.trace.json"]
    assert tp.saved_traces == [folder / "rank0.2.pt.trace.json", folder / "rank0.3.pt.trace.json"]
    assert len(uploads.files) == 3


@pytest.mark.parametrize("on", [True, False], ids=["recorded", "off"])
def test_shapes_flops_and_memory_are_in_the_trace_when_asked_for(on):
    def build():
        return Profiler(cyclic_schedule(warmup=0, active=1), torch_prof_folder="tt",
                        torch_prof_record_shapes=on, torch_prof_with_flops=on,
                        torch_prof_profile_memory=on)

    if on:
        profiler = build()
    else:  # all four switches off: Composer would run no torch.profiler, so it is said
        with pytest.warns(ObsbusWarning, match=r"Profiler\(torch_prof_folder='tt'\) with "
                          r"torch_prof_record_shapes=False, .* runs torch.profiler, recording "
                          r"operator times only.*To turn torch.profiler off, leave "
                          r"torch_prof_folder out"):
            profiler = build()
    doc = trace(train(profiler, batches=1).saved_traces[0])
    for flag in ("record_shapes", "with_flops", "profile_memory"):
        assert (doc.get(flag) == 1) is on, flag
    addmm = [e for e in doc["traceEvents"] if e["name"] == "aten::addmm"]
    assert addmm
    assert all(("Input Dims" in e["args"]) is on for e in addmm)
    assert any(e["name"] == "[memory]" for e in doc["traceEvents"]) is on


def test_cpu_only_activities_and_no_warning_on_a_machine_without_cuda():
    from torch.profiler import ProfilerActivity

    assert _torch_trace.activities("cpu") == [ProfilerActivity.CPU]
    profiler = Profiler(cyclic_schedule(warmup=1, active=1), torch_prof_folder="tt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObsbusWarning)
        tp = train(profiler, batches=2)
    categories = {e.get("cat") for e in trace(tp.saved_traces[0])["traceEvents"]}
    assert "cpu_op" in categories
    assert not categories & {"kernel", "cuda_runtime", "gpu_memcpy"}
    assert not tp.failed


class Probe(Callback):
    """At each batch_start: whether torch's profiler records, and whether one exists."""

    def __init__(self):
        self.enabled, self.exists = [], []

    def batch_start(self, state, logger):
        self.enabled.append(torch.autograd.profiler._is_profiler_enabled)
        self.exists.append(state.profiler.torch_profiler._prof is not None)


def test_skip_batches_run_without_any_torch_profiler():
    probe = Probe()
    profiler = Profiler(cyclic_schedule(skip_first=1, wait=1, warmup=1, active=1),
                        torch_prof_folder="tt")
    tp = train(profiler, batches=5, callbacks=[probe])
    # skip, skip (wait), warmup, active_and_save, skip
    assert probe.exists == [False, False, True, True, False]
    assert probe.enabled == [False, False, False, True, False]
    assert not torch.autograd.profiler._is_profiler_enabled
    assert [steps(trace(p)) for p in tp.saved_traces] == [["ProfilerStep#3"]]


def test_a_profiler_without_torch_arguments_imports_no_torch():
    code = ("import sys\nfrom obsbus.profiler.profiler import Profiler\n"
            "p = Profiler(lambda state: 'skip')\n"
            "print(p.torch_profiler is None, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_a_window_cut_short_by_the_end_of_fit_or_an_error_is_saved(tmp_path):
    # The window would be 4 batches; the fit ends after 2.
    tp = train(Profiler(cyclic_schedule(warmup=0, active=4), torch_prof_folder="tt"),
               batches=2, data_batches=6)
    assert [steps(trace(p)) for p in tp.saved_traces] == [["ProfilerStep#0", "ProfilerStep#1"]]
    profiler = Profiler(cyclic_schedule(warmup=0, active=4), torch_prof_folder="tt2")
    with pytest.raises(RuntimeError, match="boom"):
        train(profiler, batches=4, raise_at=1)
    saved = profiler.torch_profiler.saved_traces
    assert [p.name for p in saved] == ["rank0.1.pt.trace.json"]
    assert steps(trace(saved[0])) == ["ProfilerStep#0", "ProfilerStep#1"]


def test_the_json_handler_merges_the_torch_traces_on_the_rank_row(tmp_path):
    handler = JSONTraceHandler()
    profiler = Profiler(cyclic_schedule(warmup=1, active=1), [handler], torch_prof_folder="tt")
    tp = train(profiler, batches=2)
    assert handler.chrome_traces == tp.saved_traces
    merged = trace(tmp_path / "run" / "traces" / "merged_trace.json")
    events = merged["traceEvents"]
    assert {e["pid"] for e in events} == {0}
    step = next(e for e in events if e["name"] == "ProfilerStep#1")
    # The warm-up batch 0 is in the obsbus trace too (Composer's markers record there).
    batch = next(e for e in events if e["name"] == "event/batch" and e["ph"] == "B"
                 and e["args"]["batch"] == 1)
    # Both on one clock (µs since the epoch): the batch span starts inside its ProfilerStep,
    # give or take the clocks' conversion error (unaligned, they would be hours apart).
    assert step["ts"] - 5_000 <= batch["ts"] <= step["ts"] + step["dur"] + 5_000


def test_memory_timeline_html_is_written_and_uploaded(tmp_path):
    uploads = Uploads()
    profiler = Profiler(cyclic_schedule(warmup=0, active=1), torch_prof_folder="tt",
                        torch_prof_memory_filename="rank{rank}.{batch}.memory.html",
                        torch_prof_record_shapes=True, torch_prof_with_stack=True)
    tp = train(profiler, batches=1, loggers=[uploads])
    assert tp.memory_files == [tmp_path / "run" / "tt" / "rank0.1.memory.html"]
    assert tp.memory_files[0].read_text().startswith("<html>")
    assert "r/torch_memory_traces/rank0.1.pt.trace.memory.html" in uploads.files


def test_record_memory_history_on_cpu_warns_once_over_two_fits_and_writes_nothing(tmp_path):
    profiler = Profiler(cyclic_schedule(), record_memory_history=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Trainer(tiny_model(), regression_data(2), "1ep", loss_fn=F.mse_loss, device="cpu",
                     run_folder="run", profiler=profiler) as trainer:
            trainer.fit()
            trainer.fit(duration="1ba")
    mine = [w for w in caught if w.category is ObsbusWarning]
    assert len(mine) == 1
    assert "record_memory_history does nothing" in str(mine[0].message)
    assert profiler.torch_profiler.memory_files == []
    assert not (tmp_path / "run" / "memory_snapshots").exists()


def test_record_memory_history_writes_the_snapshot_at_fit_end(tmp_path):
    uploads = Uploads()
    profiler = Profiler(cyclic_schedule(), record_memory_history=True,
                        memory_snapshot_path="snaps/{run_name}-rank{rank}.pickle")
    history = profiler.torch_profiler._memory.history = FakeHistory()
    train(profiler, batches=1, loggers=[uploads])
    path = tmp_path / "run" / "snaps" / "r-rank0.pickle"
    assert pickle.loads(path.read_bytes()) == history.snapshot()
    assert history.records == [(100_000, "python"), None]  # on at fit_start, off at close
    assert list(uploads.files) == ["r/memory_snapshots/r-rank0.pickle"]


def test_two_fits_and_two_closes():
    profiler = Profiler(cyclic_schedule(warmup=0, active=1), torch_prof_folder="tt")
    trainer = Trainer(tiny_model(), regression_data(3), "1ep", loss_fn=F.mse_loss,
                      device="cpu", run_folder="run", profiler=profiler)
    trainer.fit()
    trainer.fit(duration="2ba")
    trainer.close()
    trainer.close()
    tp = profiler.torch_profiler
    assert len(tp.saved_traces) == 2
    assert not tp.failed


def test_a_failing_torch_profiler_stops_profiling_not_training(monkeypatch, caplog):
    class Broken:
        def __init__(self, **kwargs):
            raise RuntimeError("kineto is not available")

    monkeypatch.setattr(torch.profiler, "profile", Broken)
    profiler = Profiler(cyclic_schedule(warmup=0, active=1, repeat=0), torch_prof_folder="tt")
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        tp = train(profiler, batches=3)
    assert tp.failed
    assert tp.saved_traces == []
    assert sum("torch.profiler failed" in r.getMessage() for r in caplog.records) == 1


def test_torch_profiler_callback_needs_a_profiler():
    with pytest.raises(RuntimeError, match="follows a Profiler's schedule"):
        Run(callbacks=[TorchProfiler()], run_folder="run")


def test_profiler_defaults_match_the_torch_profiler_defaults():
    mine, theirs = _torch_trace.defaults(Profiler), _torch_trace.defaults(TorchProfiler)
    for key, name in _torch_trace.PROFILER_ARGS.items():
        if key != "torch_prof_folder":
            assert mine[key] == theirs[name], key


BAD = [
    (lambda: Profiler(cyclic_schedule(), torch_prof_record_shapes=True), ValueError,
     r"Profiler\(torch_prof_record_shapes=True\) has no effect without torch_prof_folder"),
    (lambda: TorchProfiler(filename="{rnak}.json"), ValueError, "unknown placeholder {rnak}"),
    (lambda: TorchProfiler(folder=3), TypeError, "folder must be a non-empty str or None"),
    (lambda: TorchProfiler(memory_filename="m.json", record_shapes=True, with_stack=True),
     ValueError, "must end with '.html'"),
    (lambda: TorchProfiler(memory_filename="m.html"), ValueError,
     "got record_shapes=False, with_stack=False"),
    (lambda: TorchProfiler(num_traces_to_keep=0), ValueError, "-1 \\(keep all\\) or a positive"),
    (lambda: TorchProfiler(num_traces_to_keep="2"), TypeError, "must be a whole number >= -1, got '2'"),
    (lambda: TorchProfiler(use_gzip="yes"), TypeError, "use_gzip must be True or False"),
    (lambda: TorchProfiler(folder=None), ValueError, "has nothing to do"),
]


@pytest.mark.parametrize(("build", "error", "match"), BAD,
                         ids=["torch-arg-without-folder", "placeholder", "folder-type",
                              "memory-suffix", "memory-needs-flags", "keep-zero", "keep-type",
                              "bool", "nothing-to-do"])
def test_bad_arguments_fail_at_construction(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_a_file_for_the_folder_fails_at_construction(tmp_path):
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ValueError, match=r"TorchProfiler folder must be a folder, and "
                       + repr(str(tmp_path / "taken"))):
        TorchProfiler(folder=str(tmp_path / "taken"))
