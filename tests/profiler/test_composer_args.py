"""Composer's profiler arguments and Marker usage, through real runs whose JSON traces are read back.

Sources: Composer's composer/profiler/profiler.py, marker.py, json_trace_handler.py
(constructor arguments, defaults and docstring examples) and tests/profiler/
test_profiler.py, test_json_trace_handler.py (the arguments they pass).
"""

from __future__ import annotations

import json
import threading
import uuid
import warnings

import pytest
import torch.nn.functional as F

from obsbus import LoggerDestination, Run, State, Trainer
from obsbus._check import NotAFolderError
from obsbus.errors import ObsbusWarning
from obsbus.object_store import build_object_store
from obsbus.profiler import (
    JSONTraceHandler,
    Profiler,
    ProfilerAction,
    SystemProfiler,
    TraceHandler,
    cyclic_schedule,
)
from obsbus.profiler.system_profiler import THREAD_NAME

from ..helpers import regression_data, tiny_model

A, S, W, SAVE = (ProfilerAction.ACTIVE, ProfilerAction.SKIP, ProfilerAction.WARMUP,
                 ProfilerAction.ACTIVE_AND_SAVE)
#: Composer's tests/profiler/test_json_trace_handler.py: everything but the markers off.
COMPOSER_OFF = dict(sys_prof_cpu=False, sys_prof_net=False, sys_prof_disk=False,
                    sys_prof_memory=False, torch_prof_record_shapes=False,
                    torch_prof_profile_memory=False, torch_prof_with_stack=False,
                    torch_prof_with_flops=False, torch_prof_memory_filename=None)


class Uploads(LoggerDestination):
    def __init__(self):
        self.names = []

    def can_upload_files(self):
        return True

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.names.append(remote_file_name)


def fit(tmp_path, profiler, *, batches=4, callbacks=(), loggers=()):
    with Trainer(tiny_model(), regression_data(batches), "1ep", loss_fn=F.mse_loss, device="cpu",
                 run_name="r", run_folder=tmp_path / "run", profiler=profiler,
                 callbacks=list(callbacks), loggers=list(loggers)) as trainer:  # fmt: skip
        trainer.fit()
    return trainer


def events(path):
    return json.loads(path.read_text())["traceEvents"]


# ------------------------------------------------------------------ JSONTraceHandler


def test_json_trace_handler_takes_composers_remote_names(tmp_path):
    uploads = Uploads()
    handler = JSONTraceHandler(
        folder="traces",
        filename="ep{epoch}-ba{batch}-rank{rank}.json",
        remote_file_name="/{run_name}/composer/ba{batch}-rank{rank}.json",  # leading / stripped
        merged_trace_filename="node{node_rank}.json",
        merged_trace_remote_file_name="{run_name}/composer/merged-node{node_rank}.json",
        overwrite=False,
        num_traces_to_keep=-1,
    )
    profiler = Profiler(lambda s: A if s.timestamp.batch.value % 2 == 0 else SAVE, [handler],
                        **COMPOSER_OFF)
    fit(tmp_path, profiler, loggers=[uploads])
    assert uploads.names == ["r/composer/ba2-rank0.json", "r/composer/ba4-rank0.json",
                             "r/composer/merged-node0.json"]
    merged = events(tmp_path / "run" / "traces" / "node0.json")
    assert sum(e["name"] == "event/batch" and e["ph"] == "B" for e in merged) == 4


def test_json_trace_handler_defaults_are_composers_remote_names(tmp_path):
    uploads = Uploads()
    fit(tmp_path, Profiler(lambda s: SAVE, [JSONTraceHandler()], **COMPOSER_OFF), batches=2,
        loggers=[uploads])
    assert uploads.names == ["r/traces/ep1-ba1-rank0.json", "r/traces/ep1-ba2-rank0.json",
                             "r/traces/merged_trace.json"]


def test_none_remote_names_upload_nothing_and_the_trace_is_still_merged(tmp_path):
    uploads = Uploads()
    handler = JSONTraceHandler(remote_file_name=None, merged_trace_remote_file_name=None)
    fit(tmp_path, Profiler(lambda s: SAVE, [handler], **COMPOSER_OFF), batches=2,
        loggers=[uploads])
    assert uploads.names == []
    assert events(tmp_path / "run" / "traces" / "merged_trace.json")


def test_a_uri_remote_file_name_goes_to_its_bucket(tmp_path):
    b = f"r-{uuid.uuid4().hex[:10]}"
    handler = JSONTraceHandler(
        remote_file_name=f"memory://{b}/{{run_name}}/t/ba{{batch}}.json",
        merged_trace_remote_file_name=f"memory://{b}/{{run_name}}/t/merged.json",
    )
    fit(tmp_path, Profiler(lambda s: SAVE, [handler], **COMPOSER_OFF), batches=2)
    stored = dict(build_object_store(f"memory://{b}").objects)
    assert sorted(stored) == ["r/t/ba1.json", "r/t/ba2.json", "r/t/merged.json"]
    local = tmp_path / "run" / "traces"
    assert stored["r/t/ba2.json"] == (local / "ep1-ba2-rank0.json").read_bytes()
    assert stored["r/t/merged.json"] == (local / "merged_trace.json").read_bytes()


def test_remote_folder_and_a_remote_file_name_are_not_both_taken():
    with pytest.raises(ValueError, match=r"JSONTraceHandler\(remote_folder='memory://b/x', "
                       r"remote_file_name='a/\{batch\}.json'\): give one of them.*To fix, drop "
                       r"remote_folder or those names"):
        JSONTraceHandler(remote_file_name="a/{batch}.json", remote_folder="memory://b/x")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"remote_file_name": 5}, TypeError,
     "JSONTraceHandler remote_file_name must be a non-empty str or None, got 5"),
    ({"merged_trace_remote_file_name": "{nope}.json"}, ValueError, "unknown placeholder"),
    ({"num_traces_to_keep": 0}, ValueError,
     r"got 0\. \(0, Composer's 'delete once uploaded', is not accepted.*To fix, pass 1"),
], ids=["remote-type", "merged-placeholder", "keep-zero"])
def test_bad_composer_arguments_of_the_json_handler(kwargs, error, match):
    with pytest.raises(error, match=match):
        JSONTraceHandler(**kwargs)


def test_composers_json_trace_handler_test_runs(tmp_path):
    """Composer's test_json_trace_profiler_handler, ported (its trace is a JSON list there)."""
    profiler = Profiler(
        schedule=cyclic_schedule(wait=0, warmup=0, active=1000, repeat=0),
        trace_handlers=[JSONTraceHandler(folder=str(tmp_path), merged_trace_filename="trace.json")],
        **COMPOSER_OFF,
    )
    with Trainer(model=tiny_model(), train_dataloader=regression_data(3), max_duration="2ep",
                 loss_fn=F.mse_loss, device="cpu", profiler=profiler) as trainer:
        trainer.fit()
    assert profiler.torch_profiler is None and profiler.system_profiler is None
    trace_json = json.loads((tmp_path / "trace.json").read_text())
    names = {(e["name"], e["ph"]) for e in trace_json["traceEvents"]}
    assert {("event/epoch", "B"), ("event/epoch", "E")} <= names


# ----------------------------------------------------------------------- sys_prof_*


def counter_names(path):
    return {e["name"] for e in events(path) if e["ph"] == "C"}


def slow(seconds):
    from obsbus import Callback

    class Slow(Callback):
        def after_forward(self, state, logger):
            import time

            time.sleep(seconds)

    return Slow()


def test_sys_prof_arguments_set_up_the_system_profiler(tmp_path):
    handler = JSONTraceHandler(merged_trace_filename=None)
    profiler = Profiler(lambda s: SAVE if s.timestamp.batch.value == 2 else A, [handler],
                        sys_prof_cpu=False, sys_prof_memory=True, sys_prof_disk=False,
                        sys_prof_net=False, sys_prof_stats_thread_interval_seconds=0.01)
    system = profiler.system_profiler
    assert isinstance(system, SystemProfiler)
    assert (system.profile_cpu, system.profile_memory, system.stats_thread_interval_seconds) == (
        False, True, 0.01)
    fit(tmp_path, profiler, batches=3, callbacks=[slow(0.05)])
    assert counter_names(handler.saved_traces[0]) == {
        "system/memory_used_gb", "system/memory_percent", "system/process_rss_gb"}
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_composers_default_records_cpu_counters_and_all_off_builds_none(tmp_path):
    assert Profiler(lambda s: S).system_profiler.profile_cpu is True
    assert Profiler(lambda s: S, **COMPOSER_OFF).system_profiler is None


def test_a_system_profiler_in_callbacks_replaces_the_profilers_own(tmp_path):
    handler = JSONTraceHandler(merged_trace_filename=None)
    profiler = Profiler(lambda s: SAVE if s.timestamp.batch.value == 2 else A, [handler],
                        sys_prof_memory=True)
    mine = SystemProfiler(profile_cpu=False, profile_disk=True, stats_thread_interval_seconds=0.01)
    with pytest.warns(ObsbusWarning, match=r"Profiler\(sys_prof_memory=True\) is not used: the "
                      r"run's callbacks hold a SystemProfiler of their own.*To fix, drop"):
        fit(tmp_path, profiler, batches=3, callbacks=[mine, slow(0.05)])
    assert profiler.system_profiler.samples_taken == 0
    assert mine.samples_taken > 0
    assert not counter_names(handler.saved_traces[0]) & {"system/cpu_percent",
                                                         "system/memory_percent"}


def test_bad_sys_prof_values_name_the_argument():
    with pytest.raises(TypeError, match="Profiler sys_prof_net must be True or False, got 'no'"):
        Profiler(lambda s: S, sys_prof_net="no")
    with pytest.raises(ValueError, match="Profiler sys_prof_stats_thread_interval_seconds must "
                       "be a finite number of seconds > 0, got 0"):
        Profiler(lambda s: S, sys_prof_stats_thread_interval_seconds=0)


# ---------------------------------------------------------------------- torch_prof_*


COMPOSER_TORCH_DEFAULTS = dict(
    torch_prof_folder=None,  # obsbus: off unless given (Composer: '{run_name}/torch_traces')
    torch_prof_filename="rank{rank}.{batch}.pt.trace.json",
    torch_prof_remote_file_name="{run_name}/torch_traces/rank{rank}.{batch}.pt.trace.json",
    torch_prof_memory_filename=None,
    torch_prof_memory_remote_file_name=(
        "{run_name}/torch_memory_traces/rank{rank}.{batch}.pt.memory_trace.html"),
    torch_prof_overwrite=False, torch_prof_use_gzip=False, torch_prof_record_shapes=False,
    torch_prof_profile_memory=True, torch_prof_with_stack=False, torch_prof_with_flops=True,
    torch_prof_num_traces_to_keep=-1,
)


@pytest.mark.parametrize("kwargs", [
    COMPOSER_TORCH_DEFAULTS,
    {"torch_prof_profile_memory": False, "torch_prof_with_flops": False},
    {"torch_prof_record_shapes": False, "torch_prof_with_stack": False},
    COMPOSER_OFF,
], ids=["composer-defaults", "memory-flops-off", "shapes-stack-off", "composer-test-off"])
def test_composers_torch_defaults_and_off_switches_are_no_error(kwargs, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profiler = Profiler(lambda s: SAVE, [JSONTraceHandler()], **kwargs)
    assert profiler.torch_profiler is None
    fit(tmp_path, profiler, batches=1)
    assert not (tmp_path / "run" / "torch_traces").exists()


@pytest.mark.parametrize(("kwargs", "shown"), [
    ({"torch_prof_with_stack": True}, "torch_prof_with_stack=True"),
    ({"torch_prof_record_shapes": True, "torch_prof_with_flops": False},
     "torch_prof_record_shapes=True"),
    ({"torch_prof_overwrite": True}, "torch_prof_overwrite=True"),
    ({"torch_prof_filename": "t.json"}, "torch_prof_filename='t.json'"),
    ({"torch_prof_num_traces_to_keep": 3}, "torch_prof_num_traces_to_keep=3"),
], ids=["stack", "shapes", "overwrite", "filename", "keep"])
def test_a_torch_prof_value_that_would_be_ignored_says_what_to_write(kwargs, shown):
    with pytest.raises(ValueError, match=rf"Profiler\({shown}\) has no effect without "
                       r"torch_prof_folder: in obsbus torch.profiler runs only when "
                       r"torch_prof_folder names.*To fix, also pass "
                       r"torch_prof_folder='torch_traces'"):
        Profiler(lambda s: S, **kwargs)


def test_a_torch_prof_switch_must_be_a_bool():
    with pytest.raises(TypeError, match="Profiler torch_prof_with_flops must be True or False, "
                       "got 'false'"):
        Profiler(lambda s: S, torch_prof_with_flops="false")


def test_a_relative_torch_folder_that_is_a_file_fails_at_init(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tt").write_text("a file")
    profiler = Profiler(lambda s: S, torch_prof_folder="tt")  # relative: not known until init
    with pytest.raises(NotAFolderError, match=r"TorchProfiler folder \(Profiler "
                       r"torch_prof_folder\) must be a folder, and "
                       + repr(str(tmp_path / "run" / "tt")) + " is an existing file"):
        Run(run_folder=tmp_path / "run", profiler=profiler)


# --------------------------------------------------------------------------- Marker


class Recorder(TraceHandler):
    def __init__(self):
        self.events = []

    def process_duration_event(self, name, categories, is_start, timestamp, wall_clock_time_ns):
        self.events.append(("B" if is_start else "E", name, tuple(categories)))

    def process_instant_event(self, name, categories, timestamp, wall_clock_time_ns):
        self.events.append(("i", name, tuple(categories)))

    def process_counter_event(self, name, categories, timestamp, wall_clock_time_ns, values):
        self.events.append(("C", name, dict(values)))


def test_markers_as_composers_docstrings_use_them_land_in_the_json_trace(tmp_path):
    handler = JSONTraceHandler(merged_trace_filename=None)
    profiler = Profiler(lambda s: SAVE, [handler], **COMPOSER_OFF)
    model = tiny_model()
    with Run(model=model, max_duration="1ba", run_folder=tmp_path / "run",
             profiler=profiler) as run:  # fmt: skip
        marker = profiler.marker("foo", categories=["cat1"])

        @profiler.marker("decorated")
        def forward(x):
            return model(x)

        @profiler.marker("called")()
        def noop():
            return "kept"

        for x, y in run.train(regression_data(1)):
            marker.start()
            loss = F.mse_loss(forward(x), y)
            marker.finish()
            with profiler.marker("backward", categories=("grad",)):
                loss.backward()
            assert noop() == "kept"
            profiler.marker("instant").instant()
            counter_event = 5
            profiler.marker("counter").counter({"counter_event": counter_event})
    trace = events(handler.saved_traces[0])
    mine = [(e["ph"], e["name"], e.get("cat")) for e in trace
            if e["name"] in {"foo", "decorated", "called", "backward", "instant", "counter"}]
    assert mine == [("B", "foo", "cat1"), ("B", "decorated", None), ("E", "decorated", None),
                    ("E", "foo", "cat1"), ("B", "backward", "grad"), ("E", "backward", "grad"),
                    ("B", "called", None), ("E", "called", None), ("i", "instant", None),
                    ("C", "counter", None)]
    counter = next(e for e in trace if e["name"] == "counter")
    assert counter["args"] == {"counter_event": 5}
    begin = next(e for e in trace if e["name"] == "foo")
    assert begin["args"] == {"epoch": 0, "batch": 0}


def test_markers_record_in_warmup_batches_as_composers_do(tmp_path):
    handler = JSONTraceHandler(merged_trace_filename=None)
    schedule = cyclic_schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=1)
    profiler = Profiler(schedule, [handler], **COMPOSER_OFF)

    from obsbus import Callback

    class Mark(Callback):
        def after_forward(self, state, logger):
            with state.profiler.marker("mine"):
                pass

    fit(tmp_path, profiler, batches=6, callbacks=[Mark()])
    (saved,) = handler.saved_traces
    trace = events(saved)
    # 0 skip_first, 1 wait, 2 warmup, 3-4 active (4 saves), 5 skip.
    batches = sorted(e["args"]["batch"] for e in trace if e["name"] == "mine" and e["ph"] == "B")
    assert batches == [2, 3, 4]


def test_a_marker_with_composers_actions_records_only_there():
    recorder = Recorder()
    profiler = Profiler(lambda s: S, [recorder], **COMPOSER_OFF)
    state = State(run_name="bind")
    profiler.bind_to_state(state)
    assert state.profiler is profiler
    marker = profiler.marker("name", actions=[S, W, A], categories=["cat1"])
    for action in (S, SAVE, W):
        profiler.action = action
        with marker:
            pass
    marker.instant()
    assert recorder.events == [("B", "name", ("cat1",)), ("E", "name", ("cat1",)),
                               ("B", "name", ("cat1",)), ("E", "name", ("cat1",)),
                               ("i", "name", ("cat1",))]
    assert profiler.marker("name") is marker and marker.categories == ()  # as in Composer


def test_composers_marker_test_counts():
    """Composer's tests/profiler/test_profiler.py::test_marker, with a recorder for the mock."""
    recorder = Recorder()
    profiler = Profiler(trace_handlers=[recorder], schedule=cyclic_schedule(),
                        torch_prof_memory_filename=None)
    profiler.bind_to_state(State(run_name="marker"))
    marker = profiler.marker("name", actions=[S, W, A], categories=["cat1"])
    marker.start()
    with pytest.raises(RuntimeError):
        marker.start()
    marker.finish()
    with pytest.raises(RuntimeError):
        marker.finish()
    with marker:
        pass

    @marker
    def func_to_profile(foo: str):
        assert foo == "hi"

    func_to_profile(foo="hi")

    @marker()
    def func_to_profile2(bar: int):
        assert bar == 6

    func_to_profile2(bar=6)
    marker.instant()
    assert sum(kind in "BE" for kind, *_ in recorder.events) == 8
    assert sum(kind == "i" for kind, *_ in recorder.events) == 1


def test_record_chrome_json_trace_file_reaches_every_handler(tmp_path):
    first, second = JSONTraceHandler(), JSONTraceHandler()
    profiler = Profiler(lambda s: S, [first, second], **COMPOSER_OFF)
    profiler.record_chrome_json_trace_file(str(tmp_path / "t.json"))
    assert first.chrome_traces == second.chrome_traces == [tmp_path / "t.json"]


def test_a_json_trace_handler_without_a_profiler_fails_at_init(tmp_path):
    with pytest.raises(RuntimeError, match=r"JSONTraceHandler records what a Profiler's markers "
                       r"record, and this run has no Profiler\. To fix, pass "
                       r"profiler=Profiler\(schedule, \[JSONTraceHandler\(\)\]\)"):
        Run(run_folder=tmp_path / "run", callbacks=[JSONTraceHandler()])


def test_a_composer_trace_handler_names_its_parameters_as_composer_does(tmp_path):
    """Composer's TraceHandler methods take wall_clock_time_ns; called by keyword, they work."""
    handler = JSONTraceHandler(merged_trace_filename=None)
    profiler = Profiler(lambda s: SAVE, [handler], **COMPOSER_OFF)
    with Run(max_duration="1ba", run_folder=tmp_path / "run", profiler=profiler) as run:
        for _ in run.train([[1]]):
            handler.process_instant_event(name="kw", categories=["c"],
                                          timestamp=run.state.timestamp,
                                          wall_clock_time_ns=1_000_000)
    (instant,) = [e for e in events(handler.saved_traces[0]) if e["name"] == "kw"]
    assert (instant["ph"], instant["ts"], instant["cat"]) == ("i", 1000.0, "c")


def test_composers_merge_call_merges_a_runs_traces(tmp_path):
    from obsbus.profiler.json_trace_merger import merge_traces

    handler = JSONTraceHandler()
    profiler = Profiler(lambda s: A if s.timestamp.batch.value % 2 == 0 else SAVE, [handler],
                        **COMPOSER_OFF)
    fit(tmp_path, profiler)
    merge_traces(tmp_path / "mine.json", *handler.saved_traces)  # Composer: output first
    mine = events(tmp_path / "mine.json")
    theirs = events(tmp_path / "run" / "traces" / "merged_trace.json")
    assert sorted((e["name"], e["ph"], e.get("ts")) for e in mine if e["ph"] != "M") == sorted(
        (e["name"], e["ph"], e.get("ts")) for e in theirs if e["ph"] != "M")
    with pytest.raises(ValueError, match=r"merge_traces\('out.json'\) got no trace files: the "
                       r"output comes first, then the traces"):
        merge_traces("out.json")
