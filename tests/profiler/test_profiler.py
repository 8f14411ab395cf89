"""Profiler core: markers, the schedule's window, engine and callback spans."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Run, Trainer
from obsbus.loggers import InMemoryLogger
from obsbus.profiler.marker import Marker
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.trace_handler import TraceHandler

from ..helpers import regression_data, tiny_model

ACTIVE, SKIP = ProfilerAction.ACTIVE, ProfilerAction.SKIP


class Recorder(TraceHandler):
    def __init__(self):
        self.events = []  # (kind, name, batch)

    def process_duration_event(self, name, categories, is_start, timestamp, wall_ns):
        self.events.append(("B" if is_start else "E", name, timestamp.batch.value))

    def process_instant_event(self, name, categories, timestamp, wall_ns):
        self.events.append(("i", name, timestamp.batch.value))

    def process_counter_event(self, name, categories, timestamp, wall_ns, values):
        self.events.append(("C", name, dict(values)))

    def names(self, kind="B"):
        return {name for k, name, _ in self.events if k == kind}


def assert_balanced(events):
    stacks = {}
    for kind, name, _ in events:
        if kind == "B":
            stacks[name] = stacks.get(name, 0) + 1
        elif kind == "E":
            assert stacks.get(name, 0) > 0, f"end without begin: {name}"
            stacks[name] -= 1
    assert all(v == 0 for v in stacks.values()), {k: v for k, v in stacks.items() if v}


class Noop(Callback):
    def after_forward(self, state, logger):
        pass


def fit(profiler, callbacks=(), loggers=(), duration="2ep"):
    with Trainer(tiny_model(), regression_data(3), duration, loss_fn=F.mse_loss,
                 eval_dataloader=regression_data(2, seed=1), callbacks=list(callbacks),
                 loggers=list(loggers), device="cpu", profiler=profiler) as trainer:
        trainer.fit()
    return trainer


def test_every_event_and_hook_is_a_balanced_span():
    rec = Recorder()
    fit(Profiler(lambda state: ACTIVE, [rec]), callbacks=[Noop()], loggers=[InMemoryLogger()])
    assert_balanced(rec.events)
    spans = rec.names()
    for name in ("event/fit", "event/epoch", "event/batch", "event/forward", "event/loss",
                 "event/backward", "event/eval", "event/eval_forward", "event/dataloader",
                 "callback/Noop/after_forward", "callback/InMemoryLogger/init"):
        assert name in spans, name
    assert "event/batch_checkpoint" in rec.names("i")
    assert sum(1 for k, n, _ in rec.events if k == "B" and n == "event/batch") == 6


def test_only_the_scheduled_batches_record():
    rec = Recorder()

    def second_batch_only(state):
        return ACTIVE if state.timestamp.batch == "1ba" else SKIP

    fit(Profiler(second_batch_only, [rec]), duration="1ep")
    assert_balanced(rec.events)
    batch_spans = [(k, b) for k, n, b in rec.events if n == "event/batch"]
    assert batch_spans == [("B", 1), ("E", 2)]  # the begin sees 1 batch done, the end 2
    assert all(b in (1, 2) for k, _, b in rec.events if k in "BE")


def test_a_crash_leaves_no_open_span():
    rec = Recorder()

    class Boom(Callback):
        def after_forward(self, state, logger):
            if state.timestamp.batch >= "1ba":
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fit(Profiler(lambda state: ACTIVE, [rec]), callbacks=[Boom()])
    assert ("B", "event/forward", 1) in rec.events
    assert_balanced(rec.events)


def test_markers_in_a_hand_written_loop():
    rec = Recorder()
    profiler = Profiler(lambda state: ACTIVE if state.timestamp.batch < "2ba" else SKIP, [rec])
    step = profiler.marker("my/step", record_instant_on_start=True)

    @profiler.marker("my/compute")
    def compute(x):
        return x * 2

    outputs = []
    with Run(max_duration="3ba", profiler=profiler) as run:
        for (x,) in run.train([(torch.ones(1),)] * 3):
            with step:
                outputs.append(compute(x))
                profiler.marker("my/tokens").counter({"tokens": 8})
    assert len(outputs) == 3 and outputs[0].item() == 2
    assert_balanced(rec.events)
    mine = [(k, n, b) for k, n, b in rec.events if n.startswith("my/")]
    assert [e for e in mine if e[0] == "B"] == [("B", "my/step", 0), ("B", "my/compute", 0),
                                                ("B", "my/step", 1), ("B", "my/compute", 1)]
    assert ("i", "my/step", 0) in mine
    assert [e for e in mine if e[0] == "C"] == [("C", "my/tokens", {"tokens": 8})] * 2


def test_recording_is_decided_when_a_span_starts():
    profiler = Profiler(lambda state: SKIP, [rec := Recorder()])
    marker = profiler.marker("m")
    marker.start()
    profiler.action = ACTIVE
    marker.finish()  # started while skipping: no end either
    marker.start()
    profiler.action = SKIP
    marker.finish()  # started while recording: the end is recorded
    assert [(k, n) for k, n, _ in rec.events] == [("B", "m"), ("E", "m")]
    with pytest.raises(RuntimeError, match="finish\\(\\) without a matching start"):
        marker.finish()


def test_without_a_profiler_the_engine_takes_the_plain_path():
    trainer = fit(None, duration="1ba")
    assert "run_event" not in vars(trainer.engine)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [({"schedule": 3}, TypeError, "schedule must be a callable"),
     ({"schedule": lambda s: SKIP, "trace_handlers": [object()]}, TypeError, "a TraceHandler or a list of them"),
     ({"schedule": lambda s: SKIP, "trace_handlers": 5}, TypeError,
      r"Profiler trace_handlers must be a TraceHandler or a list of them .*got 5\."),
     ({"schedule": lambda s: SKIP, "record_events": "false"}, TypeError,
      "Profiler record_events must be True or False, got 'false'"),
     ({"schedule": lambda s: SKIP, "record_callbacks": 2}, TypeError,
      "Profiler record_callbacks must be True or False, got 2"),
     ({"schedule": lambda s: SKIP, "record_memory_history": None}, TypeError,
      "Profiler record_memory_history must be True or False, got None"),
     ({"schedule": lambda s: SKIP, "memory_snapshot_path": "{nope}.pickle"}, ValueError,
      r"Profiler memory_snapshot_path '\{nope\}.pickle' uses unknown placeholder")],
    ids=["schedule", "handler", "handlers-int", "events-str", "callbacks-int", "history-none",
         "snapshot-placeholder"],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Profiler(**kwargs)


def test_a_file_for_torch_prof_folder_fails_at_construction(tmp_path):
    """It was found at the first trace the torch profiler wrote, mid-run."""
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(NotADirectoryError, match=r"Profiler torch_prof_folder must be a folder, "
                       r"and " + repr(str(tmp_path / "taken"))):
        Profiler(lambda s: SKIP, torch_prof_folder=str(tmp_path / "taken"))


BAD_MARKERS = [
    ({"name": ""}, ValueError, "Marker name must be a non-empty str, got ''"),
    ({"name": 5}, TypeError, "Marker name must be a non-empty str, got 5"),
    ({"actions": ["sometimes"]}, TypeError,
     "Marker 'x' actions must be a list of ProfilerAction \\(or their values: 'skip', 'warmup', "
     "'active', 'active_and_save'\\), got 'sometimes' among \\['sometimes'\\]"),
    ({"actions": ProfilerAction.ACTIVE}, TypeError, "actions must be a list of .*got "
     "<ProfilerAction.ACTIVE: 'active'>. To fix, pass e.g. \\[ProfilerAction.ACTIVE"),
    ({"actions": []}, ValueError, "Marker 'x' actions is empty \\(\\[\\]\\): the marker would never"),
    ({"categories": "data"}, TypeError,
     "Marker 'x' categories must be a list of str .*got 'data'. To fix, pass \\['data'\\]"),
    ({"categories": ["a", 3]}, TypeError, "categories must be .*got 3 among \\['a', 3\\]"),
    ({"record_instant_on_start": "yes"}, TypeError,
     "Marker 'x' record_instant_on_start must be True or False, got 'yes'"),
    ({"record_instant_on_finish": None}, TypeError,
     "Marker 'x' record_instant_on_finish must be True or False, got None"),
]


@pytest.mark.parametrize(("kwargs", "error", "match"), BAD_MARKERS,
                         ids=["empty-name", "int-name", "bad-action", "one-action", "no-action",
                              "str-categories", "int-category", "instant-start", "instant-finish"])
def test_bad_marker_arguments_fail_when_made(kwargs, error, match):
    profiler = Profiler(lambda s: SKIP)
    with pytest.raises(error, match=match):
        profiler.marker(**{"name": "x", **kwargs})


def test_a_marker_needs_a_profiler():
    with pytest.raises(TypeError, match=r"Marker profiler must be an obsbus\.profiler\.Profiler, "
                       r"got 5\. To fix, make markers with profiler\.marker\(name\)"):
        Marker(5, "x")


def test_starting_a_marker_twice_is_an_error():
    profiler = Profiler(lambda s: SKIP)
    marker = profiler.marker("twice").start()
    with pytest.raises(RuntimeError, match="Marker 'twice' started twice: finish\\(\\) it first"):
        marker.start()
    marker.finish()
    marker.start().finish()  # usable again
