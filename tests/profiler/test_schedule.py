"""Profiler schedules: ProfilerAction, cyclic_schedule, step_window_schedule."""

from __future__ import annotations

import pickle

import pytest

from obsbus import Run
from obsbus.dist import RankInfo
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.schedule import Schedule, cyclic_schedule, step_window_schedule
from obsbus.state import State
from obsbus.time import Time, Timestamp

# One letter per batch keeps whole sequences readable in an assert.
CODE = {
    ProfilerAction.SKIP: "-",
    ProfilerAction.WARMUP: "w",
    ProfilerAction.ACTIVE: "a",
    ProfilerAction.ACTIVE_AND_SAVE: "S",
}


def run_epochs(schedule, length, epochs=2, *, known=True, start=None, probe=False, rank=0):
    """Call ``schedule`` before every batch of ``epochs`` epochs of ``length`` batches.

    ``start`` is the timestamp of the first batch (a resumed run starts mid-epoch).
    ``probe`` also calls it once more after each epoch's last batch, as the loop's
    ``before_dataloader`` that finds the dataloader exhausted does. Returns one
    string per epoch.
    """
    state = State(run_name="t")
    state.rank_info = RankInfo(rank=rank, world_size=max(rank + 1, 2))
    state.dataloader_len = Time(length, "ba") if known else None
    ts = start or Timestamp()
    out = []
    for _ in range(epochs):
        row = ""
        while int(ts.batch_in_epoch) < length:
            state.timestamp = ts
            row += CODE[schedule(state)]
            ts = ts.to_next_batch()
        if probe:
            state.timestamp = ts
            schedule(state)
        out.append(row)
        ts = ts.to_next_epoch()
    return out


# ---------------------------------------------------------------- ProfilerAction


def test_profiler_action_values_are_composers():
    assert [a.value for a in ProfilerAction] == ["skip", "warmup", "active", "active_and_save"]
    assert ProfilerAction("active_and_save") is ProfilerAction.ACTIVE_AND_SAVE
    assert ProfilerAction.SKIP == "skip"
    with pytest.raises(ValueError, match="'record'"):
        ProfilerAction("record")


# ---------------------------------------------------------------- cyclic_schedule


@pytest.mark.parametrize(
    ("kwargs", "length", "known", "expected"),
    [
        ({}, 10, True, ["waaaS-----", "waaaS-----"]),
        ({}, 10, False, ["waaaS-----", "waaaS-----"]),
        ({"skip_first": 3}, 10, True, ["---waaaS--", "---waaaS--"]),
        (
            {"wait": 2, "warmup": 1, "active": 2, "repeat": 2},
            10,
            True,
            ["--waS--waS", "--waS--waS"],
        ),
        ({"warmup": 0, "active": 1, "repeat": 3}, 10, True, ["SSS-------", "SSS-------"]),
        (
            {"skip_first": 1, "wait": 1, "warmup": 0, "active": 2, "repeat": 0},
            10,
            True,
            ["--aS-aS-aS", "--aS-aS-aS"],
        ),
        # A cycle cut by the end of the epoch is saved at the epoch's last batch
        # when the length is known, and only then.
        ({"wait": 2, "warmup": 1, "active": 2, "repeat": 2}, 9, True, ["--waS--wS", "--waS--wS"]),
        ({"wait": 2, "warmup": 1, "active": 2, "repeat": 2}, 9, False, ["--waS--wa", "--waS--wa"]),
        ({"skip_first": 7}, 10, True, ["-------waS", "-------waS"]),
        ({"skip_first": 7}, 10, False, ["-------waa", "-------waa"]),
        # A warm-up that is the epoch's last batch is not saved: nothing recorded yet.
        ({"skip_first": 9}, 10, True, ["---------w", "---------w"]),
        ({"skip_first": 20}, 10, True, ["----------", "----------"]),
    ],
    ids=[
        "default",
        "default-unknown-len",
        "skip_first",
        "wait-repeat2",
        "no-warmup",
        "repeat0",
        "epoch-end-known",
        "epoch-end-unknown",
        "cut-known",
        "cut-unknown",
        "cut-in-warmup",
        "skip-whole-epoch",
    ],
)
def test_cyclic_sequences(kwargs, length, known, expected):
    assert run_epochs(cyclic_schedule(**kwargs), length, known=known) == expected


def test_repeat_zero_repeats_until_the_epoch_ends():
    schedule = cyclic_schedule(wait=1, warmup=1, active=2, repeat=0)
    epochs = run_epochs(schedule, 1000, epochs=3)
    assert epochs == ["-waS" * 250] * 3


def test_repeat_counts_cycles_per_epoch_not_per_run():
    schedule = cyclic_schedule(warmup=1, active=1, repeat=1)
    assert run_epochs(schedule, 4, epochs=3) == ["wS--", "wS--", "wS--"]


def test_the_loops_end_of_epoch_probe_changes_nothing():
    schedule = cyclic_schedule(skip_first=1, warmup=1, active=2)
    assert run_epochs(schedule, 6, epochs=3, probe=True) == ["-waS--"] * 3


def test_resume_mid_epoch_counts_that_epoch_from_the_resumed_batch():
    # Resumed at batch 4 of a 10-batch epoch: that epoch's window starts at
    # batch 4; the next epoch starts from 0 as usual.
    start = Timestamp(batch=4, batch_in_epoch=4)
    assert run_epochs(cyclic_schedule(), 10, start=start) == ["waaaS-", "waaaS-----"]


def test_resume_offset_adds_to_skip_first_and_keeps_the_epoch_end_save():
    start = Timestamp(epoch=1, batch=14, batch_in_epoch=4)
    got = run_epochs(cyclic_schedule(skip_first=2), 10, start=start)
    assert got == ["--waaS", "--waaaS---"]


def test_resume_at_an_epoch_boundary_has_no_offset():
    start = Timestamp(epoch=2, batch=20, batch_in_epoch=0)
    assert run_epochs(cyclic_schedule(), 10, start=start) == ["waaaS-----"] * 2


def test_a_schedule_reused_for_a_later_run_starts_over():
    schedule = cyclic_schedule(warmup=1, active=2)
    assert run_epochs(schedule, 5, epochs=1, start=Timestamp(batch=2, batch_in_epoch=2)) == ["waS"]
    # A fresh run: the timestamp went back to 0, so no offset is left over.
    assert run_epochs(schedule, 5, epochs=1) == ["waS--"]
    # A run resumed further on (the batch count jumped): a new offset.
    assert run_epochs(schedule, 5, epochs=1, start=Timestamp(batch=9, batch_in_epoch=4)) == ["w"]


def test_zero_length_cycle_is_a_value_error_not_a_zero_division():
    with pytest.raises(
        ValueError,
        match=r"zero-length cycle: wait=0, warmup=0, active=0 add up to 0 batches.*"
        r"Accepted: active >= 1",
    ):
        cyclic_schedule(wait=0, warmup=0, active=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"wait": -1}, ValueError, r"cyclic_schedule wait must be a whole number >= 0, got -1\."),
        ({"repeat": -2}, ValueError, r"repeat must be a whole number >= 0, got -2"),
        (
            {"active": 1.5},
            TypeError,
            r"cyclic_schedule active must be a whole number >= 0, got 1.5\.",
        ),
        ({"skip_first": "2"}, TypeError, r"skip_first must be a whole number >= 0, got '2'\. To fix, pass the int 2"),
        ({"warmup": True}, TypeError, r"warmup must be a whole number >= 0, got True"),
        (
            {"warmup": 1, "active": 0},
            ValueError,
            r"cyclic_schedule\(active=0\): a cycle of wait=0, warmup=1 and no active batch never "
            r"records.*Accepted: active >= 1",
        ),
    ],
    ids=["negative-wait", "negative-repeat", "float", "str", "bool", "no-active"],
)
def test_cyclic_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        cyclic_schedule(**kwargs)


def test_cyclic_schedule_reprs_and_pickles():
    schedule = cyclic_schedule(skip_first=1, wait=2, warmup=3, active=4, repeat=0)
    assert repr(schedule) == "cyclic_schedule(skip_first=1, wait=2, warmup=3, active=4, repeat=0)"
    clone = pickle.loads(pickle.dumps(schedule))
    assert run_epochs(clone, 12, epochs=1) == run_epochs(schedule, 12, epochs=1)


# ---------------------------------------------------------------- step_window_schedule


def steps(schedule, n, *, rank=0, epoch_len=5):
    """The actions for global steps 0..n-1, in epochs of ``epoch_len`` batches."""
    return "".join(run_epochs(schedule, epoch_len, epochs=n // epoch_len, rank=rank))


def test_step_window_primus_defaults_on_rank_0_and_rank_1():
    schedule = step_window_schedule()  # start 10, end 12, ranks [0], warmup 1
    assert steps(schedule, 15, rank=0) == "---------waS---"
    assert steps(schedule, 15, rank=1) == "-" * 15


def test_step_window_counts_global_steps_not_epochs():
    schedule = step_window_schedule(profile_step_start=3, profile_step_end=7, warmup=0)
    assert steps(schedule, 10, epoch_len=2) == "---aaaS---"


@pytest.mark.parametrize(
    ("ranks", "profiled"),
    [
        (None, {0, 1, 2, 3}),
        ("all", {0, 1, 2, 3}),
        ([1, 3], {1, 3}),
        (2, {2}),
        (range(1, 3), {1, 2}),
    ],
    ids=["none", "all", "list", "int", "range"],
)
def test_step_window_profile_ranks(ranks, profiled):
    schedule = step_window_schedule(1, 2, profile_ranks=ranks, warmup=1)
    for rank in range(4):
        expected = "wS---" if rank in profiled else "-----"
        assert steps(schedule, 5, rank=rank) == expected, rank


def test_step_window_skips_other_ranks_without_reading_the_timestamp():
    state = State(run_name="t")
    state.rank_info = RankInfo(rank=1, world_size=2)
    state.timestamp = None  # would raise if the schedule looked at it
    assert step_window_schedule()(state) is ProfilerAction.SKIP


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"profile_step_start": 0, "profile_step_end": 2}, "aS----"),
        ({"profile_step_start": 1, "profile_step_end": 2, "warmup": 3}, "wS----"),
        ({"profile_step_start": 4, "profile_step_end": 5, "warmup": 2}, "--wwS-"),
        ({"profile_step_start": 2, "profile_step_end": 4, "warmup": 0}, "--aS--"),
    ],
    ids=["at-0", "warmup-clamped", "warmup-2", "no-warmup"],
)
def test_step_window_shapes(kwargs, expected):
    assert steps(step_window_schedule(**kwargs), 6, epoch_len=6) == expected


def test_step_window_resumed_inside_the_window_keeps_absolute_steps():
    schedule = step_window_schedule(profile_step_start=10, profile_step_end=13)
    got = run_epochs(schedule, 5, epochs=1, start=Timestamp(epoch=2, batch=11, batch_in_epoch=1))
    assert got == ["aS--"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"profile_step_start": 12, "profile_step_end": 12},
            ValueError,
            r"profile_step_start=12, profile_step_end=12\): the window records steps "
            r"12 <= step < 12, which is empty.*profile_step_end=13",
        ),
        ({"profile_step_start": 5, "profile_step_end": 3}, ValueError, r"which is empty"),
        ({"profile_step_start": -1}, ValueError, r"profile_step_start must be a whole number >= 0, got -1"),
        ({"profile_step_end": 12.0}, TypeError, r"profile_step_end must be a whole number >= 0, got 12.0\. To fix, pass 12"),
        ({"warmup": -1}, ValueError, r"warmup must be a whole number >= 0, got -1"),
        ({"profile_ranks": []}, ValueError, r"profile_ranks=\[\]\): no rank would be profiled"),
        ({"profile_ranks": ["0"]}, ValueError, r"\['0'\] are not ranks \(ints >= 0\)"),
        ({"profile_ranks": [0, -1]}, ValueError, r"\[-1\] are not ranks"),
        (
            {"profile_ranks": "0"},
            TypeError,
            r"profile_ranks='0'\): not a rank list. Accepted: None or 'all'",
        ),
        ({"profile_ranks": 1.0}, TypeError, r"not a rank list"),
    ],
    ids=[
        "empty-window",
        "reversed",
        "negative",
        "float",
        "negative-warmup",
        "no-ranks",
        "str-rank",
        "negative-rank",
        "str",
        "float-ranks",
    ],
)
def test_step_window_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        step_window_schedule(**kwargs)


def test_step_window_reprs_and_pickles():
    schedule = step_window_schedule(3, 5, profile_ranks=[8, 0])
    assert repr(schedule) == (
        "step_window_schedule(profile_step_start=3, profile_step_end=5, profile_ranks=[0, 8], "
        "warmup=1)"
    )
    assert "profile_ranks='all'" in repr(step_window_schedule(profile_ranks=None))
    assert steps(pickle.loads(pickle.dumps(schedule)), 10, rank=8) == "--waS-----"


# ---------------------------------------------------------------- in a real loop


def profiled_actions(schedule, data, duration):
    """The profiler's action inside each batch of a ``Run``."""
    profiler = Profiler(schedule)
    seen = []
    with Run(max_duration=duration, profiler=profiler) as run:
        for _ in run.train(data):
            seen.append(CODE[profiler.action])
    return "".join(seen)


def test_cyclic_schedule_in_a_run_sees_the_batch_about_to_run():
    schedule = cyclic_schedule(skip_first=1, warmup=1, active=2, repeat=1)
    assert profiled_actions(schedule, [[i] for i in range(6)], "2ep") == "-waS--" * 2


def test_a_plain_callable_is_a_schedule():
    def odd_batches(state: State) -> ProfilerAction:
        return ProfilerAction.ACTIVE if int(state.timestamp.batch) % 2 else ProfilerAction.SKIP

    schedule: Schedule = odd_batches
    assert profiled_actions(schedule, [[i] for i in range(3)], "2ep") == "-a-a-a"
