"""The default monitor stack never syncs the device on a batch that does not log.

Counts, on the training thread, every call that moves a tensor to the host
(``Tensor.item``, ``tolist``, ``__float__``, ``__int__``, ``__bool__``,
``cpu``, ``numpy``) and every ``torch.cuda.synchronize``, per batch, while a
real Trainer runs SpeedMonitor, MemoryMonitor, NaNMonitor, LRMonitor and
OptimizerMonitor with a log interval of 10 batches. SGD without momentum is
used because Adam's own step calls ``.item()``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from obsbus import Callback, Trainer
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.loggers import ConsoleLogger, InMemoryLogger

from ..helpers import regression_data, tiny_model
from ..test_values import SyncSpy

INTERVAL = 10


class SyncsPerBatch(Callback):
    def __init__(self, spy):
        self.spy, self.per_batch, self._seen = spy, {}, 0

    def batch_checkpoint(self, state, logger):
        calls = self.spy.calls[self._seen:]
        self._seen = len(self.spy.calls)
        self.per_batch[state.timestamp.batch.value] = calls


def test_default_stack_syncs_only_on_logging_batches(monkeypatch):
    spy = SyncSpy()
    synchronize_calls = []
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda *a, **k: synchronize_calls.append(a) or spy.calls.append("synchronize"))
    recorder = SyncsPerBatch(spy)
    model = tiny_model()
    every = f"{INTERVAL}ba"
    monitors = [SpeedMonitor(window_size=5, log_interval=every), MemoryMonitor(log_interval=every),
                NaNMonitor(check_interval=every), LRMonitor(log_interval=every),
                OptimizerMonitor(log_interval=every)]
    memory = InMemoryLogger()
    trainer = Trainer(model, regression_data(10), "3ep", loss_fn=F.mse_loss,
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
                      callbacks=[*monitors, recorder], device="cpu",
                      loggers=[memory, ConsoleLogger(log_interval=every, stream="stdout")])
    with spy:
        trainer.fit()
    trainer.close()
    assert set(recorder.per_batch) == set(range(1, 31))
    quiet = {b: calls for b, calls in recorder.per_batch.items() if b % INTERVAL}
    assert all(calls == [] for calls in quiet.values()), {b: c for b, c in quiet.items() if c}
    assert synchronize_calls == []
    # The monitors did log on the logging batches.
    for key in ("throughput/samples_per_sec", "l2_norm/grad/global", "lr-SGD/group0"):
        assert memory.get_timeseries(key)["batch"][-1] == 30, key
