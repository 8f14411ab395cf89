"""OOMObserver on the CPU: the CUDA allocator is a fake, the files, names and uploads are real.

The real CUDA path (``MemoryHistory`` with no fake) runs in the GPU check script;
here it is exercised only where it must do nothing: on a machine or run without CUDA.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, LoggerDestination, ObsbusWarning, Run, Trainer
from obsbus.callbacks._cuda_memory import MemoryHistory
from obsbus.callbacks.oom_observer import OOMObserver

from ..helpers import regression_data, tiny_model

GiB = 2**30
#: Shaped like torch.cuda.memory._snapshot(): one segment, a trace that ends in an OOM.
SNAPSHOT = {
    "segments": [{
        "device": 0, "address": 139_800_000_000_000, "total_size": 2 * GiB, "stream": 0,
        "segment_type": "large", "segment_pool_id": (0, 0), "allocated_size": 2 * GiB,
        "active_size": 2 * GiB, "requested_size": 2 * GiB,
        "blocks": [{"address": 139_800_000_000_000, "size": 2 * GiB, "requested_size": 2 * GiB,
                    "state": "active_allocated",
                    "frames": [{"filename": "train.py", "line": 12, "name": "forward"}]}],
    }],
    "device_traces": [[
        {"action": "segment_alloc", "addr": 139_800_000_000_000, "size": 2 * GiB, "stream": 0,
         "time_us": 1, "frames": [{"filename": "train.py", "line": 12, "name": "forward"}]},
        {"action": "alloc", "addr": 139_800_000_000_000, "size": 2 * GiB, "stream": 0,
         "time_us": 2, "frames": [{"filename": "train.py", "line": 12, "name": "forward"}]},
        {"action": "oom", "size": 4 * GiB, "device_free": 512 * 2**20, "stream": 0,
         "time_us": 3, "frames": [{"filename": "train.py", "line": 13, "name": "forward"}]},
    ]],
    "allocator_settings": {},
}
OOM_MESSAGE = "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 80 GiB"


class FakeHistory(MemoryHistory):
    """The shared-history logic for real; torch.cuda's three calls faked."""

    def __init__(self, *, observer_in_build=True):
        super().__init__()
        self.observer_in_build = observer_in_build
        self.records: list = []  # every _record_memory_history setting, in order
        self.snapshots = 0
        self.dispatch = None

    def unavailable_reason(self, device):
        return None

    def _record(self, setting):
        self.records.append(setting)

    def _attach(self, dispatch):
        self.dispatch = dispatch if self.observer_in_build else None
        return self.observer_in_build

    def snapshot(self):
        self.snapshots += 1
        return pickle.loads(pickle.dumps(SNAPSHOT))

    def fire_oom(self, times=1):
        """What the allocator does when a cudaMalloc fails (possibly more than once)."""
        for _ in range(times):
            if self.dispatch is not None:
                self.dispatch(0, 4 * GiB, 80 * GiB, 512 * 2**20)

    @property
    def recording(self):
        return self._recording is not None


class Uploads(LoggerDestination):
    """A destination that stores files: what it was handed, read at hand-over."""

    def __init__(self):
        self.files: dict[str, tuple[bytes, bool]] = {}

    def can_upload_files(self):
        return True

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.files[remote_file_name] = (Path(file_path).read_bytes(), overwrite)


class OOMAt(Callback):
    """In batch ``batch``'s forward: the allocator's observer fires ``fires`` times, then ``error``."""

    def __init__(self, batch, history=None, *, fires=0, error=None):
        self.batch, self.history, self.fires, self.error = batch, history, fires, error

    def after_forward(self, state, logger):
        if state.timestamp.batch.value + 1 == self.batch:
            if self.history is not None:
                self.history.fire_oom(self.fires)
            if self.error is not None:
                raise self.error


def observer(history=None, **kwargs):
    cb = OOMObserver(**kwargs)
    if history is not None:
        cb._history = history
    return cb


def train(callbacks, loggers=(), batches=4, run_folder="run", fits=1):
    model = tiny_model()
    t = Trainer(model, regression_data(batches), "1ep", loss_fn=F.mse_loss, callbacks=callbacks,
                loggers=list(loggers), device="cpu", run_folder=run_folder, run_name="oom-run")
    try:
        for _ in range(fits):
            t.fit(duration="1ep")
    finally:
        t.close()
    return t


def assert_snapshot_files(stem: Path, uploads: Uploads, remote_stem: str):
    pickle_file, html_file = stem.with_name(stem.name + ".pickle"), stem.with_name(stem.name + ".html")
    assert pickle.loads(pickle_file.read_bytes()) == SNAPSHOT
    page = html_file.read_text()
    assert page.lstrip().startswith("<!DOCTYPE html>") and "Active Memory Timeline" in page
    assert uploads.files == {
        f"{remote_stem}.pickle": (pickle_file.read_bytes(), True),
        f"{remote_stem}.html": (html_file.read_bytes(), True),
    }


def test_oom_at_the_exception_event_writes_snapshot_and_timeline_and_uploads():
    history, uploads = FakeHistory(), Uploads()
    cb = observer(history)
    with pytest.raises(torch.OutOfMemoryError, match=r"CUDA out of memory\. Tried to allocate 4\.00"):
        train([cb, OOMAt(3, error=torch.OutOfMemoryError(OOM_MESSAGE))], [uploads])
    stem = Path("run/memory_snapshots/oom-rank0-batch2").absolute()
    assert_snapshot_files(stem, uploads, "oom-run/memory_snapshots/oom-rank0-batch2")
    assert history.snapshots == 1
    assert cb.written == [stem.with_suffix(".pickle"), stem.with_suffix(".html")]
    assert sorted(p.name for p in stem.parent.iterdir()) == [
        "oom-rank0-batch2.html", "oom-rank0-batch2.pickle"]  # no temporary files left


def test_the_allocator_observer_takes_the_snapshot_once(caplog):
    history, uploads = FakeHistory(), Uploads()
    oom = OOMAt(3, history, fires=3, error=torch.OutOfMemoryError(OOM_MESSAGE))  # retries
    with caplog.at_level(logging.WARNING, logger="obsbus"), \
            pytest.raises(torch.OutOfMemoryError):
        train([observer(history), oom], [uploads])
    assert history.snapshots == 1
    assert_snapshot_files(Path("run/memory_snapshots/oom-rank0-batch2").absolute(), uploads,
                          "oom-run/memory_snapshots/oom-rank0-batch2")
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("OOMObserver: CUDA out of memory (device 0 could not allocate "
                              "4.295 GB; 0.537 GB free of 85.899 GB); memory snapshot "
                              "written: ")


def test_an_oom_the_program_survived_is_written_at_batch_end():
    history, uploads = FakeHistory(), Uploads()
    t = train([observer(history), OOMAt(2, history, fires=2)], [uploads])
    assert t.state.timestamp.batch == "4ba"
    assert_snapshot_files(Path("run/memory_snapshots/oom-rank0-batch1").absolute(), uploads,
                          "oom-run/memory_snapshots/oom-rank0-batch1")


def test_without_the_allocator_observer_the_exception_event_still_writes(caplog):
    history, uploads = FakeHistory(observer_in_build=False), Uploads()
    with caplog.at_level(logging.WARNING, logger="obsbus"), \
            pytest.raises(torch.OutOfMemoryError):
        train([observer(history), OOMAt(2, error=torch.OutOfMemoryError(OOM_MESSAGE))], [uploads])
    assert "this torch build has no allocator OOM observer" in caplog.text
    assert history.snapshots == 1 and len(uploads.files) == 2


def test_an_oom_raised_from_is_found():
    history, uploads = FakeHistory(), Uploads()
    error = RuntimeError("the step failed")
    error.__cause__ = torch.OutOfMemoryError(OOM_MESSAGE)
    with pytest.raises(RuntimeError, match="the step failed"):
        train([observer(history), OOMAt(2, error=error)], [uploads])
    assert history.snapshots == 1 and len(uploads.files) == 2


def test_other_errors_write_nothing():
    history, uploads = FakeHistory(), Uploads()
    with pytest.raises(ValueError, match="not an OOM"):
        train([observer(history), OOMAt(2, error=ValueError("not an OOM"))], [uploads])
    assert history.snapshots == 0 and uploads.files == {}
    assert not Path("run/memory_snapshots").exists()


def test_recording_runs_from_fit_start_to_close_across_fits():
    history = FakeHistory()
    cb = observer(history, max_entries=5000, stacks="all")
    train([cb], fits=2)
    assert history.records == [(5000, "all"), None]
    assert history._observers == {} and not history.is_recording(cb)


def test_placeholders_absolute_folder_and_no_html(tmp_path):
    history, uploads = FakeHistory(), Uploads()
    cb = observer(history, folder=str(tmp_path / "snaps-{run_name}"),
                  filename="r{rank}-of-{world_size}", html=False)
    with pytest.raises(torch.OutOfMemoryError):
        train([cb, OOMAt(1, error=torch.OutOfMemoryError(OOM_MESSAGE))], [uploads])
    written = tmp_path / "snaps-oom-run" / "r0-of-1.pickle"
    assert cb.written == [written]
    assert list(uploads.files) == ["oom-run/r0-of-1.pickle"]  # outside the run folder: the name


def test_no_upload(tmp_path):
    history, uploads = FakeHistory(), Uploads()
    with pytest.raises(torch.OutOfMemoryError):
        train([observer(history, upload=False), OOMAt(1, error=torch.OutOfMemoryError("x"))],
              [uploads])
    assert uploads.files == {} and Path("run/memory_snapshots/oom-rank0-batch0.html").exists()


class BlockFolderAtFitStart(Callback):
    """A file takes the snapshot folder's place after init (which refuses one already there)."""

    def fit_start(self, state, logger):
        Path("run").mkdir(exist_ok=True)
        Path("run/memory_snapshots").write_text("a file where the folder should be")


def test_a_write_that_fails_is_reported_and_the_oom_still_reaches_the_caller(caplog):
    with caplog.at_level(logging.ERROR, logger="obsbus"), \
            pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        train([observer(FakeHistory()), BlockFolderAtFitStart(),
               OOMAt(1, error=torch.OutOfMemoryError(OOM_MESSAGE))])
    assert "OOMObserver: could not write the memory snapshot" in caplog.text


def two_fits_then_an_oom(cb, device, uploads):
    model = tiny_model()
    # Without a model or a device the run's device is unknown: CUDA decides.
    run = Run(model=model if device else None, device=device, callbacks=[cb], loggers=[uploads],
              run_folder="run")
    try:
        for end in ("2ba", "4ba"):
            run.state.max_duration = end
            with run.fitting():
                for x, y in run.train(regression_data(2)):
                    run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
        with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"), run.fitting():
            raise torch.OutOfMemoryError(OOM_MESSAGE)
    finally:
        run.close()


@pytest.mark.parametrize("device", ["cpu", None], ids=["cpu-run", "no-cuda-machine"])
def test_without_cuda_it_warns_once_and_writes_nothing(device, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a GPU machine
    uploads, cb = Uploads(), OOMObserver()
    with pytest.warns(ObsbusWarning) as warned:
        two_fits_then_an_oom(cb, device, uploads)
    reason = "the run is on 'cpu', not on a CUDA device" if device else "CUDA is not available"
    assert [str(w.message) for w in warned] == [
        f"OOMObserver does nothing: {reason}{' on this machine' if not device else ''}. It "
        "records the CUDA allocator's memory history; remove it from callbacks on runs without "
        "CUDA."
    ]
    assert uploads.files == {} and cb.written == [] and not Path("run/memory_snapshots").exists()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"max_entries": 0}, ValueError, r"max_entries must be a whole number >= 1, got 0\. Each entry costs"),
    ({"max_entries": "100k"}, TypeError, r"max_entries must be a whole number >= 1, got '100k'"),
    ({"stacks": "cpp"}, ValueError, r"stacks must be 'python' .* or 'all' .*got 'cpp'"),
    ({"filename": "oom-{rnak}"}, ValueError,
     r"OOMObserver filename 'oom-\{rnak\}' uses unknown placeholder \{rnak\}; accepted: "),
    ({"folder": ""}, TypeError, r"OOMObserver folder must be a non-empty str, got ''"),
    ({"html": "yes"}, TypeError, r"OOMObserver html must be True or False, got 'yes'"),
], ids=["entries-zero", "entries-str", "stacks", "placeholder", "folder", "html"])
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        OOMObserver(**kwargs)
