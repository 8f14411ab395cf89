"""Real runs whose folders the report tests read (module level: the ranks' workers pickle them)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from obsbus import Callback, Run
from obsbus.callbacks import (
    LRMonitor,
    MemoryMonitor,
    NaNMonitor,
    OptimizerMonitor,
    SpeedMonitor,
    SystemMetricsMonitor,
)
from obsbus.loggers import FileLogger, RunReport
from obsbus.profiler import JSONTraceHandler, Profiler, cyclic_schedule

from ..helpers import regression_data, tiny_model

#: Planted in the failing rank's exception: it must not reach the page.
SECRET = "hf_Q7xLmP2vR9sT4uW6yZ8aB1cD3eF5gH0jK"


class FailAt(Callback):
    """Raises at ``batch_end`` of ``batch``: listed last, after the monitors' reductions."""

    def __init__(self, batch: int) -> None:
        self.batch = batch

    def batch_end(self, state, logger):
        if state.timestamp.batch.value == self.batch:
            raise RuntimeError(
                f"rank {state.rank} failed on purpose at batch {self.batch} (token {SECRET})"
            )


def train(
    folder: str,
    batches: int,
    fail_at: int | None = None,
    *,
    report: bool = True,
    profile: bool = True,
) -> None:
    """A run with the default monitors, a FileLogger, a profiler window and RunReport."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    callbacks = [
        SpeedMonitor(window_size=2),
        MemoryMonitor(),
        LRMonitor(),
        OptimizerMonitor(log_interval="1ba", log_param_norm=True),
        NaNMonitor(),
        SystemMetricsMonitor(log_interval="2ba", sample_interval_s=0.01, gpu=False),
    ]
    if fail_at is not None:
        callbacks.append(FailAt(fail_at))
    profiler = (
        Profiler(cyclic_schedule(wait=0, warmup=1, active=2, repeat=1), [JSONTraceHandler()])
        if profile
        else None
    )
    loggers = ([RunReport()] if report else []) + [FileLogger()]
    with Run(
        model=model,
        optimizers=opt,
        schedulers=sched,
        max_duration=f"{batches}ba",
        run_folder=folder,
        run_name="two-ranks",
        hparams={"lr": 0.05, "hf_token": SECRET},
        callbacks=callbacks,
        loggers=loggers,
        profiler=profiler,
    ) as run:
        for x, y in run.train(regression_data(batches)):
            opt.zero_grad()
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
            opt.step()
            sched.step()


def two_ranks(rank: int, folder: str) -> str:
    """Rank 1 fails at its batch 6 (of 10); rank 0 trains on (its next collective fails).

    No RunReport and no profiler: the page comes from ``obsbus report``, and RunReport and
    the trace tables have their own tests (a trace handler's merge at close is a collective,
    which the failed rank would enter while rank 0 is in another one).
    """
    try:
        if rank == 0:
            train(folder, 10, report=False, profile=False)
        else:
            train(folder, 10, fail_at=6, report=False, profile=False)
    except RuntimeError as exc:
        return repr(exc)
    return "finished"
