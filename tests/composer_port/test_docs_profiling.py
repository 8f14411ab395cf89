"""Composer's Performance Profiling guide and its profiler unit tests, ported to obsbus.

Sources (mosaicml/composer at commit 6405188805a0054b4551ec49e4919c54c971d0e8):
docs/source/trainer/performance_tutorials/profiling.md
(https://docs.mosaicml.com/projects/composer/en/latest/trainer/performance_tutorials/profiling.html)
with the code it includes from examples/profiler_demo.py, and tests/profiler/test_profiler.py,
tests/profiler/test_json_trace_handler.py. MNIST is replaced by random batches of MNIST's
shape and the demo's ``ComposerClassifier(module=Model())`` by ``Model()`` plus ``loss_fn=``.
Composer's tests pass ``MagicMock()`` trace handlers; here a small recording
``TraceHandler`` (obsbus's tests use fakes, not mocks) counts the same calls.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.composer_port._common import loss_fn, random_classification_data, simple_model


class Model(nn.Module):
    """Toy convolutional neural network architecture in pytorch for MNIST (profiler_demo.py)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()

        self.num_classes = num_classes

        self.conv1 = nn.Conv2d(1, 16, (3, 3), padding=0)
        self.conv2 = nn.Conv2d(16, 32, (3, 3), padding=0)
        self.bn = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 16, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x):
        out = self.conv1(x)
        out = F.relu(out)
        out = self.conv2(out)
        out = self.bn(out)
        out = F.relu(out)
        out = F.adaptive_avg_pool2d(out, (4, 4))
        out = torch.flatten(out, 1, -1)
        out = self.fc1(out)
        out = F.relu(out)
        return self.fc2(out)


def test_profiler_demo():
    """Source: profiling.md / examples/profiler_demo.py: the trainer with a Profiler, a
    JSONTraceHandler and torch.profiler, ``max_duration=2``, ``train_subset_num_batches=16``,
    then "Viewing traces": one trace per window per epoch, the merged trace, and the
    torch.profiler traces (batches of 8 instead of 2048 images, on the CPU).

    Deliberate difference (README "Coming from Composer"): Composer's ``eval_interval=0``
    (train with an ``eval_dataloader`` but never evaluate) is refused with what to write
    instead, leave ``eval_dataloader`` out, which the port does after checking the message."""
    from obsbus import Trainer
    from obsbus.profiler import JSONTraceHandler, cyclic_schedule
    from obsbus.profiler.profiler import Profiler

    train_dataloader = random_classification_data(
        shape=(1, 28, 28), size=8 * 20, num_classes=10, batch_size=8
    )
    model = Model(num_classes=10)

    composer_trace_dir = "composer_profiler"
    torch_trace_dir = "torch_profiler"

    with pytest.raises(ValueError, match="leave eval_dataloader out"):
        Trainer(
            model=model,
            loss_fn=loss_fn,
            train_dataloader=train_dataloader,
            eval_dataloader=train_dataloader,
            max_duration=2,
            eval_interval=0,
        )

    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        train_dataloader=train_dataloader,
        max_duration=2,
        device="cuda" if torch.cuda.is_available() else "cpu",  # Composer: "gpu"
        precision="amp_fp16" if torch.cuda.is_available() else "fp32",  # the demo's "amp"
        train_subset_num_batches=16,
        profiler=Profiler(
            trace_handlers=[JSONTraceHandler(folder=composer_trace_dir, overwrite=True)],
            schedule=cyclic_schedule(
                wait=0,
                warmup=1,
                active=4,
                repeat=1,
            ),
            torch_prof_folder=torch_trace_dir,
            torch_prof_overwrite=True,
            torch_prof_memory_filename=None,
        ),
    )
    trainer.fit()
    trainer.close()

    assert trainer.state.timestamp.batch == 32
    traces = sorted(os.listdir(trainer.state.run_folder.resolve(composer_trace_dir)))
    # Composer's docs name these ep0-ba5 and ep1-ba21 ({epoch} = epochs completed); obsbus
    # numbers the epoch a batch belongs to from 1, as its console does (obsbus.naming.epoch_number).
    assert traces == ["ep1-ba5-rank0.json", "ep2-ba21-rank0.json", "merged_trace.json"]
    torch_traces = sorted(os.listdir(trainer.state.run_folder.resolve(torch_trace_dir)))
    assert torch_traces == ["rank0.21.pt.trace.json", "rank0.5.pt.trace.json"]


def _timestamp_at(batch_in_epoch: int):
    from obsbus import Timestamp

    return Timestamp(epoch=0, batch=batch_in_epoch, batch_in_epoch=batch_in_epoch)


def test_cyclic_schedule_doc_example():
    """Source: profiling.md, "Specifying the Profile Schedule": ``skip_first=1, wait=1,
    warmup=1, active=2, repeat=1``. Checked against Composer's cyclic_schedule code (the
    page's table shows a second window at batches 5-8, which Composer's code, with
    ``repeat=1``, does not record: it skips from batch 5 on)."""
    from obsbus import State
    from obsbus.profiler import ProfilerAction, cyclic_schedule

    schedule = cyclic_schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=1)
    state = State(run_name="docs")
    expected = ["skip", "skip", "warmup", "active", "active_and_save", "skip", "skip"]
    actions = []
    for batch in range(len(expected)):
        state.timestamp = _timestamp_at(batch)
        actions.append(schedule(state))
    assert actions == [ProfilerAction(a) for a in expected]


class RecordingTraceHandler:
    """Counts the trace-handler calls Composer's tests count on a MagicMock."""

    def __new__(cls):
        from obsbus.profiler import TraceHandler

        class _Recording(TraceHandler):
            def __init__(self):
                self.duration_events = 0
                self.instant_events = 0

            def process_duration_event(self, *args, **kwargs):
                self.duration_events += 1

            def process_instant_event(self, *args, **kwargs):
                self.instant_events += 1

        return _Recording()


@pytest.fixture
def dummy_state():
    """Composer's ``dummy_state`` fixture, built from what obsbus's State takes (the fixture's
    own constructor call is ported in test_unit_tests.py::test_dummy_state_fixture)."""
    from obsbus import State

    model = simple_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    return State(run_name="dummy_run_name", model=model, optimizers=optimizer, max_duration="10ep")


@pytest.mark.xfail(
    strict=True,
    reason=(
        "deliberate difference (README, Coming from Composer): obsbus's cyclic_schedule takes a timestamp that skips batches "
        "between two calls as a new start (resume), so the test's calls at batches 0, 1, 3 give "
        "SKIP at batch 3 where Composer's pure function gives WARMUP; a trainer calls it every "
        "batch, so runs agree"
    ),
)
@pytest.mark.parametrize("repeat", [1, 0])
def test_cyclic_schedule(dummy_state, repeat):
    """Source: tests/profiler/test_profiler.py::test_cyclic_schedule."""
    from obsbus.profiler import ProfilerAction, cyclic_schedule

    skip_first = 1
    wait = 2
    warmup = 3
    active = 4
    schedule = cyclic_schedule(skip_first=1, wait=2, warmup=3, active=4, repeat=repeat)

    assert schedule(dummy_state) == ProfilerAction.SKIP  # skip first epoch

    for _ in range(skip_first):
        dummy_state.timestamp = dummy_state.timestamp.to_next_batch()
    assert schedule(dummy_state) == ProfilerAction.SKIP

    for _ in range(wait):
        dummy_state.timestamp = dummy_state.timestamp.to_next_batch()

    assert schedule(dummy_state) == ProfilerAction.WARMUP

    for _ in range(warmup):
        dummy_state.timestamp = dummy_state.timestamp.to_next_batch()

    assert schedule(dummy_state) == ProfilerAction.ACTIVE

    for _ in range(active + wait + warmup):
        dummy_state.timestamp = dummy_state.timestamp.to_next_batch()

    if repeat == 0:
        assert schedule(dummy_state) == ProfilerAction.ACTIVE
    else:
        assert schedule(dummy_state) == ProfilerAction.SKIP


def test_profiler_init(dummy_state):
    """Source: tests/profiler/test_profiler.py::test_profiler_init: the Profiler's arguments
    add a TorchProfiler and a SystemProfiler to ``state.callbacks`` at ``bind_to_state``.

    Deliberate difference (README "Coming from Composer", obsbus's default profiler
    settings): torch.profiler runs only when ``torch_prof_folder`` is given (Composer's
    default is ``'{run_name}/torch_traces'``), which the port adds."""
    from obsbus.profiler import Profiler, SystemProfiler, TorchProfiler, cyclic_schedule

    minimal_state = dummy_state
    profiler = Profiler(
        trace_handlers=[RecordingTraceHandler()],
        schedule=cyclic_schedule(),
        torch_prof_profile_memory=True,
        torch_prof_memory_filename=None,
        sys_prof_cpu=True,
        torch_prof_folder="torch_traces",
    )
    profiler.bind_to_state(minimal_state)
    assert any(isinstance(cb, TorchProfiler) for cb in minimal_state.callbacks)
    assert any(isinstance(cb, SystemProfiler) for cb in minimal_state.callbacks)


def test_marker(dummy_state):
    """Source: tests/profiler/test_profiler.py::test_marker."""
    from obsbus.profiler import Profiler, ProfilerAction, cyclic_schedule

    trace_handler = RecordingTraceHandler()
    profiler = Profiler(
        trace_handlers=[trace_handler],
        schedule=cyclic_schedule(),
        torch_prof_memory_filename=None,
    )
    profiler.bind_to_state(dummy_state)
    dummy_state.profiler = profiler
    marker = profiler.marker(
        "name",
        actions=[ProfilerAction.SKIP, ProfilerAction.WARMUP, ProfilerAction.ACTIVE],
        categories=["cat1"],
    )
    marker.start()  # call #1
    with pytest.raises(RuntimeError):
        marker.start()  # cannot call start twice without finishing
    marker.finish()  # call #2
    with pytest.raises(RuntimeError):
        marker.finish()  # cannot call finish twice without a start before

    with marker:
        pass  # call #3 and #4

    @marker
    def func_to_profile(foo: str):
        assert foo == "hi"

    func_to_profile(foo="hi")  # call 5 and 6

    @marker()
    def func_to_profile2(bar: int):
        assert bar == 6

    func_to_profile2(bar=6)  # call 7 and 8

    marker.instant()

    assert trace_handler.duration_events == 8
    assert trace_handler.instant_events == 1


@pytest.mark.xfail(
    strict=True,
    reason=(
        "deliberate difference (README, Coming from Composer): the merged trace is a Chrome trace object {'traceEvents': [...]}; "
        "Composer's merged trace file is a bare JSON list of events, which its test iterates"
    ),
)
def test_json_trace_profiler_handler(tmp_path):
    """Source: tests/profiler/test_json_trace_handler.py::test_json_trace_profiler_handler."""
    from obsbus import Trainer
    from obsbus.profiler import Profiler
    from obsbus.profiler.json_trace_handler import JSONTraceHandler
    from obsbus.profiler.profiler_schedule import cyclic_schedule

    # Construct the trainer
    profiler = Profiler(
        schedule=cyclic_schedule(wait=0, warmup=0, active=1000, repeat=0),
        trace_handlers=[
            JSONTraceHandler(
                folder=str(tmp_path),
                merged_trace_filename="trace.json",
            ),
        ],
        sys_prof_cpu=False,
        sys_prof_net=False,
        sys_prof_disk=False,
        sys_prof_memory=False,
        torch_prof_record_shapes=False,
        torch_prof_profile_memory=False,
        torch_prof_with_stack=False,
        torch_prof_with_flops=False,
        torch_prof_memory_filename=None,
    )
    trainer = Trainer(
        model=simple_model(),
        loss_fn=loss_fn,
        train_dataloader=random_classification_data(size=20),
        max_duration="2ep",
        profiler=profiler,
    )

    # Train
    trainer.fit()
    trainer.close()

    # Validate that the trace file contains expected events
    profiler_file = os.path.join(tmp_path, "trace.json")
    with open(profiler_file) as f:
        trace_json = json.load(f)
        has_epoch_start_event = False
        has_epoch_end_event = False
        for event in trace_json:
            if event["name"] == "event/epoch" and event["ph"] == "B":
                has_epoch_start_event = True
            if event["name"] == "event/epoch" and event["ph"] == "E":
                has_epoch_end_event = True
        assert has_epoch_start_event
        assert has_epoch_end_event
