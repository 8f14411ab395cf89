"""GPU check for NaNMonitor, MemorySnapshot and OOMObserver; needs CUDA.

Run on a GPU machine: `.venv/bin/python scripts/gpu_check.py`. Not part of the CPU suite.
"""

import logging
import pickle
import tempfile

import torch
import torch.nn.functional as F

from obsbus import Callback, LoggerDestination, Run
from obsbus.callbacks.memory_snapshot import MemorySnapshot
from obsbus.callbacks.nan_monitor import NaNMonitor, NonFiniteLossError
from obsbus.callbacks.oom_observer import OOMObserver


class Up(LoggerDestination):
    def __init__(self):
        self.names = []

    def can_upload_files(self):
        return True

    def upload_file(self, state, name, path, *, overwrite=False):
        self.names.append(name)


class SyncGuard(Callback):  # any host sync inside a step (NaNMonitor's folds included) raises
    def batch_start(self, state, logger):
        torch.cuda.set_sync_debug_mode("error")

    def after_train_batch(self, state, logger):
        torch.cuda.set_sync_debug_mode("default")


logs: list = []  # what obsbus logs (the OOM observer's message names the failed allocation)
logging.getLogger("obsbus").addHandler(h := logging.Handler())
h.emit = lambda r: logs.append(r.getMessage())
dev, folder, up = torch.device("cuda"), tempfile.mkdtemp(), Up()
model = torch.nn.Linear(64, 1).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = [(torch.randn(32, 64, device=dev), torch.randn(32, 1, device=dev)) for _ in range(8)]
data[2] = (data[2][0] * float("nan"), data[2][1])  # batch 3 goes bad
snap = MemorySnapshot(skip_batches=1, interval="2ba")
cbs = [NaNMonitor("4ba", check_grad_norm=True), snap, OOMObserver(), SyncGuard()]
try:
    with Run(
        model=model, max_duration="8ba", run_folder=folder, loggers=[up], callbacks=cbs
    ) as run:
        for x, y in run.train(data):
            opt.zero_grad()
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
            opt.step()
    raise SystemExit("FAIL: no NonFiniteLossError")
except NonFiniteLossError as err:
    assert (err.batch, err.checked_at, err.source) == (3, 4, "loss"), err  # noqa: PT017
    print("NaNMonitor OK:", err)
assert [p.name for p in snap.written] == ["rank0-batch3.pickle", "rank0-batch3.html"], snap.written
actions = {e["action"] for e in pickle.loads(snap.written[0].read_bytes())["device_traces"][0]}
assert "alloc" in actions, actions
print("MemorySnapshot OK", sorted(actions), up.names)
oom, up.names[:] = OOMObserver(), []
try:
    with Run(
        model=model, max_duration="2ba", run_folder=folder, loggers=[up], callbacks=[oom]
    ) as run:
        for _batch in run.train(data[:2]):
            run.forward(torch.empty, 1 << 40, device=dev)  # 4 TiB
    raise SystemExit("FAIL: no OOM")
except torch.OutOfMemoryError:
    snapshot = pickle.loads(oom.written[0].read_bytes())
assert any(e["action"] == "oom" for t in snapshot["device_traces"] for e in t), "no oom entry"
assert oom.written[1].read_text().lstrip().startswith("<!DOCTYPE html>") and len(up.names) == 2, (
    up.names
)
assert any("could not allocate" in m for m in logs), logs  # the allocator's observer fired
print("OOMObserver OK", [str(p) for p in oom.written], up.names)
