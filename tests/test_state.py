"""State: Composer's fields, checks at construction, and Run's resume timestamp."""

from __future__ import annotations

import pytest
import torch

from obsbus import Run, State, Timestamp
from obsbus.loggers import InMemoryLogger

from .helpers import EventCounter


def test_composers_dummy_state_fixture_builds():
    """Composer tests/fixtures/fixtures.py ``dummy_state``, with its DeviceCPU() as 'cpu'."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    state = State(
        model=model,
        run_name="dummy_run_name",
        device="cpu",
        precision="fp32",
        device_train_microbatch_size=1,
        rank_zero_seed=17,
        optimizers=optimizer,
        max_duration="10ep",
    )
    state.schedulers = scheduler
    state.set_dataloader([torch.zeros(1)] * 5, "train")
    assert state.schedulers == [scheduler] and state.optimizers == [optimizer]
    assert (state.precision, state.rank_zero_seed, state.device_train_microbatch_size) == (
        "fp32", 17, 1)
    assert state.dataloader_label == "train" and state.dataloader_len.value == 5


def test_composers_minimal_state_fixture_builds():
    """Composer tests/fixtures/fixtures.py ``minimal_state``."""
    loader = [torch.zeros(2)] * 3
    state = State(model=torch.nn.Linear(2, 1), run_name="minimal_run_name", device="cpu",
                  rank_zero_seed=0, max_duration="100ep", dataloader=loader,
                  dataloader_label="train")
    assert state.dataloader is loader and state.dataloader_len.value == 3


def test_set_dataloader_lengths_as_composer():
    state = State(run_name="s")
    state.set_dataloader(iter([1, 2]), "eval")  # no len
    assert state.dataloader_len is None
    state.set_dataloader([1, 2, 3], "eval", dataloader_len=2)
    assert state.dataloader_len.value == 2
    state.set_dataloader([1, 2, 3], "eval", dataloader_len=-1)
    assert state.dataloader_len.value == 3
    state.set_dataloader()
    assert (state.dataloader, state.dataloader_label, state.dataloader_len) == (None, None, None)
    with pytest.raises(ValueError, match=r"dataloader_label must be a non-empty str .*got None"):
        state.set_dataloader([1], None)
    with pytest.raises(ValueError, match=r"dataloader_len must be .*got -5"):
        state.set_dataloader([1], "train", dataloader_len=-5)


def test_precision_takes_composers_enum_values():
    class Precision(str):  # Composer's Precision is a str enum with .value
        value = "amp_bf16"

    assert State(run_name="s", precision=Precision("AMP_BF16")).precision == "amp_bf16"
    assert State(run_name="s", precision="AMP_FP16").precision == "amp_fp16"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_duration": 0}, ValueError,
         r"State max_duration must be a positive time .*got 0: it would end the run before its "
         r"first batch"),
        ({"max_duration": "0ba"}, ValueError, r"State max_duration .*got '0ba'"),
        ({"hparams": 5}, TypeError, r"State hparams must be a dict with str keys, got 5\."),
        ({"optimizers": 5}, TypeError, r"State optimizers must be an optimizer .*got 5\."),
        ({"schedulers": [5]}, TypeError, r"State schedulers must be an LR scheduler .*got 5 among"),
        ({"device": 5.0}, TypeError, r"State device must be a device such as 'cpu'.*got 5.0\."),
        ({"device": "no-such-device"}, ValueError, r"State device .*got 'no-such-device'"),
        ({"precision": "bf16"}, ValueError,
         r"State precision 'bf16' is not supported; accepted: 'fp32', 'amp_fp16', 'amp_bf16'"),
        ({"rank_zero_seed": -1}, ValueError, r"State rank_zero_seed must be a whole number >= 0 or None, got -1"),
        ({"device_train_microbatch_size": 0}, ValueError,
         r"device_train_microbatch_size must be a whole number >= 1 or None, got 0"),
        ({"dataloader": 5}, TypeError, r"State dataloader must be an iterable .*got 5\."),
        ({"dataloader_label": 5}, TypeError, r"State dataloader_label must be .*got 5\."),
    ],
    ids=["duration-0", "duration-0ba", "hparams", "optimizers", "schedulers", "device-type",
         "device-name", "precision", "seed", "microbatch", "dataloader", "label"],
)
def test_bad_values_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        State(run_name="s", **kwargs)


def test_an_optimizer_assigned_later_is_checked_too():
    state = State(run_name="s")
    with pytest.raises(TypeError, match=r"State optimizers must be .*got 'sgd'"):
        state.optimizers = "sgd"


def test_run_timestamp_resumes_where_a_run_stopped():
    """Run(timestamp=...) is the documented way to resume: steps and max_duration continue."""
    mem, counter = InMemoryLogger(), EventCounter()
    seen_at_init = []

    class AtInit(EventCounter):
        def init(self, state, logger):
            seen_at_init.append(state.timestamp.batch.value)

    with Run(max_duration="5ba", loggers=[mem], callbacks=[counter, AtInit()],
             timestamp=Timestamp(epoch=1, batch=3, sample=3)) as run:
        for _ in run.train([[0], [1], [2]]):
            run.state.loss = torch.tensor(1.0)
    assert seen_at_init == [3]
    assert mem.get_timeseries("loss/train/total")["batch"] == [4, 5]
    assert run.state.timestamp.batch.value == 5 and run.state.timestamp.sample.value == 5
