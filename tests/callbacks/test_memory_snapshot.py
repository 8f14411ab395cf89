"""MemorySnapshot on the CPU: one window of batches recorded (by a fake allocator) and written."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from obsbus import Callback, ObsbusWarning, Run
from obsbus.callbacks.memory_snapshot import MemorySnapshot
from obsbus.callbacks.oom_observer import OOMObserver

from .test_oom_observer import OOM_MESSAGE, SNAPSHOT, FakeHistory, OOMAt, Uploads, train


class RecordingSeen(Callback):
    """Whether the allocator was recording during each batch's forward."""

    def __init__(self, history):
        self.history, self.seen = history, []

    def after_forward(self, state, logger):
        self.seen.append(self.history.recording)


def snapshotter(history, **kwargs):
    cb = MemorySnapshot(**kwargs)
    cb._history = history
    return cb


def stem(name):
    return Path("run/memory_snapshots", name).absolute()


def test_one_window_after_the_skipped_batches():
    history, uploads = FakeHistory(), Uploads()
    seen = RecordingSeen(history)
    cb = snapshotter(history, skip_batches=1, interval="2ba")
    train([cb, seen], [uploads], batches=6)
    assert seen.seen == [False, True, True, False, False, False]
    assert history.records == [(100_000, "python"), None] and history.snapshots == 1
    window = stem("rank0-batch3")
    assert cb.written == [window.with_suffix(".pickle"), window.with_suffix(".html")]
    assert pickle.loads(cb.written[0].read_bytes()) == SNAPSHOT
    assert "Active Memory Timeline" in cb.written[1].read_text()
    assert uploads.files == {
        "oom-run/memory_snapshots/rank0-batch3.pickle": (cb.written[0].read_bytes(), True),
        "oom-run/memory_snapshots/rank0-batch3.html": (cb.written[1].read_bytes(), True),
    }


def test_no_skip_records_from_the_first_batch_and_a_bare_int_counts_batches():
    history = FakeHistory()
    seen = RecordingSeen(history)
    cb = snapshotter(history, skip_batches=0, interval=1, html=False, filename="w{batch}")
    train([cb, seen], batches=3)
    assert seen.seen == [True, False, False]
    assert cb.written == [stem("w1.pickle")]


def test_a_window_cut_short_by_the_end_of_fit_is_written():
    history = FakeHistory()
    cb = snapshotter(history, skip_batches=1, interval="10ba")
    train([cb], batches=3)
    assert [p.name for p in cb.written] == ["rank0-batch3.pickle", "rank0-batch3.html"]
    assert history.records == [(100_000, "python"), None]


def test_a_later_fit_does_not_record_again():
    history = FakeHistory()
    cb = snapshotter(history, skip_batches=1, interval="1ba")
    train([cb], batches=3, fits=2)
    assert history.snapshots == 1 and cb.written[0].name == "rank0-batch2.pickle"


def test_a_run_that_fails_mid_window_writes_the_window_and_the_error_reaches_the_caller():
    history = FakeHistory()
    cb = snapshotter(history, skip_batches=0, interval="5ba")
    with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        train([cb, OOMAt(2, error=torch.OutOfMemoryError(OOM_MESSAGE))], batches=4)
    assert [p.name for p in cb.written] == ["rank0-batch1.pickle", "rank0-batch1.html"]
    assert history.records[-1] is None


def test_the_history_is_shared_with_oom_observer():
    history = FakeHistory()
    oom = OOMObserver(max_entries=50_000)
    oom._history = history
    cb = snapshotter(history, skip_batches=1, interval="1ba", max_entries=200_000, stacks="all")
    seen = RecordingSeen(history)
    train([oom, cb, seen], batches=4)
    # The window raised the buffer and the stacks; after it, OOMObserver's recording goes on,
    # with the bigger buffer kept (shrinking it would drop entries); close turns it off.
    assert history.records == [(50_000, "python"), (200_000, "all"), (200_000, "python"), None]
    assert seen.seen == [True, True, True, True]


def two_fits(cb, device):
    run = Run(device=device, callbacks=[cb], run_folder="run")
    for end in ("2ba", "4ba"):
        run.state.max_duration = end
        with run.fitting():
            for _ in run.train([[1.0], [2.0]]):
                pass
    run.close()


@pytest.mark.parametrize("device", ["cpu", None], ids=["cpu-run", "no-cuda-machine"])
def test_without_cuda_it_warns_once_and_writes_nothing(device, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cb = MemorySnapshot(skip_batches=0, interval="1ba")
    with pytest.warns(ObsbusWarning, match="MemorySnapshot does nothing: ") as warned:
        two_fits(cb, device)
    assert len(warned) == 1
    assert cb.written == [] and not Path("run/memory_snapshots").exists()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"interval": "1ep"}, ValueError,
     r"MemorySnapshot interval '1ep' is not supported: use a positive number of batches"),
    ({"interval": 0}, ValueError, r"MemorySnapshot interval '0ba' is not supported"),
    ({"skip_batches": -1}, ValueError, r"skip_batches must be a whole number >= 0, got -1"),
    ({"skip_batches": True}, TypeError, r"skip_batches must be a whole number >= 0, got True"),
    ({"max_entries": -5}, ValueError, r"MemorySnapshot max_entries must be a whole number >= 1, got -5"),
    ({"filename": "{step}"}, ValueError, r"filename '\{step\}' uses unknown placeholder \{step\}"),
    ({"upload": 1}, TypeError, r"MemorySnapshot upload must be True or False, got 1"),
    ({"interval": "3xyz"}, ValueError, r"MemorySnapshot interval '3xyz' is not supported: Invalid"),
    ({"interval": None}, TypeError, r"MemorySnapshot interval None is not supported: Expected"),
], ids=["epochs", "zero", "negative-skip", "bool-skip", "entries", "placeholder", "upload",
        "garbage-interval", "none-interval"])
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        MemorySnapshot(**kwargs)


@pytest.mark.parametrize("cls", [MemorySnapshot, OOMObserver], ids=lambda c: c.__name__)
def test_a_file_where_the_folder_goes_fails_before_the_first_snapshot(cls, tmp_path):
    """Found at the first snapshot (an OOM, for OOMObserver) before; now when built, or at
    init for a folder relative to the run folder."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    with pytest.raises(NotADirectoryError,
                       match=rf"{cls.__name__} folder must be a folder, and {str(taken)!r} is an "
                             "existing file"):
        cls(folder=str(taken))
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    (run_folder / "snaps").write_text("a file")
    with pytest.raises(ValueError, match=rf"{cls.__name__} folder must be a folder, and "
                       rf"{str(run_folder / 'snaps')!r}"):
        Run(run_folder=run_folder, callbacks=[cls(folder="snaps")])
