"""Log the learning rate of every parameter group of every optimizer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from typing_extensions import override

from obsbus.callback import Callback
from obsbus.interval import LogInterval, at_interval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike
from obsbus.values import is_tensor

__all__ = ["LRMonitor", "lr_key_prefixes"]


def lr_key_prefixes(optimizers: Sequence[Any]) -> list[str]:
    """``lr-{OptimizerClass}`` for each optimizer; a repeated class gets ``-1``, ``-2``, ...

    Example:
        >>> import torch
        >>> params = [torch.nn.Parameter(torch.zeros(1))]
        >>> sgd, adam, sgd2 = (torch.optim.SGD(params), torch.optim.Adam(params),
        ...                    torch.optim.SGD(params))
        >>> lr_key_prefixes([sgd, adam, sgd2])
        ['lr-SGD', 'lr-Adam', 'lr-SGD-1']
    """
    seen: Counter[str] = Counter()
    prefixes = []
    for optimizer in optimizers:
        name = type(optimizer).__name__
        index = seen[name]
        seen[name] += 1
        prefixes.append(f"lr-{name}" if index == 0 else f"lr-{name}-{index}")
    return prefixes


class LRMonitor(Callback):
    """Logs the learning rate of every parameter group of every optimizer, every interval.

    The learning rates are read from ``optimizer.param_groups`` at
    ``batch_end`` (``epoch_end`` for an epoch interval), as Composer does:
    under a loop that steps its schedulers after ``optimizer.step()`` (the
    obsbus :class:`~obsbus.Trainer`, Composer, Megatron), that is the rate
    the *next* batch will use; a loop that sets ``group["lr"]`` before its
    step (nanoGPT style) logs the rate the batch used. Reading a Python
    float costs nothing on the device; a tensor learning rate (capturable or
    fused optimizers, ``lr=torch.tensor(...)``) is logged as a tensor (a
    clone, so a scheduler changing it in place later does not change what
    was logged) and is not synced here.

    Keys (unit: the optimizer's learning rate, as in ``param_groups``; no unit
    is declared, so the console and the report show none):

    - ``lr-{OptimizerClass}/group{i}``: the learning rate of parameter group
      ``i`` (from 0) of the optimizer, e.g. ``lr-AdamW/group0``.
    - ``lr-{OptimizerClass}-{n}/group{i}``: the same for the ``n``-th further
      optimizer of a class already seen (``n`` from 1, in the order of
      ``state.optimizers``), e.g. ``lr-AdamW-1/group0`` for a second
      ``AdamW``; Lightning's ``LearningRateMonitor`` names them the same way.
      Composer gives both the same key, so the second overwrites the first.

    Groups without an ``"lr"`` entry are skipped. A run with no optimizers
    logs nothing.

    Args:
        log_interval: ``"1ba"`` (default: every batch, as Composer) or
            ``"1ep"``; a bare int counts batches.

    Example:
        >>> import torch
        >>> from obsbus import Run
        >>> from obsbus.loggers import InMemoryLogger
        >>> model = torch.nn.Linear(2, 1)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        >>> mem = InMemoryLogger()
        >>> with Run(model=model, optimizers=opt, max_duration="3ba",
        ...          callbacks=[LRMonitor()], loggers=[mem]) as run:
        ...     for batch in run.train([[0], [1], [2]]):
        ...         opt.step(); sched.step()
        >>> mem.get_timeseries("lr-SGD/group0")["lr-SGD/group0"]
        [0.05, 0.025, 0.0125]
    """

    def __init__(self, log_interval: TimeLike = "1ba") -> None:
        self.log_interval = LogInterval(log_interval, "LRMonitor log_interval")
        self._optimizers: tuple[int, ...] = ()
        self._prefixes: list[str] = []

    def _prefixes_for(self, optimizers: list[Any]) -> list[str]:
        ids = tuple(id(o) for o in optimizers)
        if ids != self._optimizers:  # the list changed: name them again
            self._optimizers, self._prefixes = ids, lr_key_prefixes(optimizers)
        return self._prefixes

    def _log(self, state: State, logger: Logger) -> None:
        optimizers = state.optimizers
        if not optimizers:
            return
        metrics: dict[str, Any] = {}
        for prefix, optimizer in zip(self._prefixes_for(optimizers), optimizers, strict=True):
            for i, group in enumerate(getattr(optimizer, "param_groups", ())):
                lr = group.get("lr")
                if lr is None:
                    continue
                metrics[f"{prefix}/group{i}"] = lr.detach().clone() if is_tensor(lr) else lr
        if metrics:
            logger.log_metrics(metrics)

    @override
    @at_interval("log_interval")
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_batch_end(state):
            self._log(state, logger)

    @override
    @at_interval("log_interval")
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            self._log(state, logger)
