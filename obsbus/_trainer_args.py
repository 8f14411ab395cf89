"""Composer's observability arguments of :class:`~obsbus.Trainer`, checked and applied.

``progress_bar``, ``log_to_console``, ``console_stream``,
``console_log_interval`` and ``log_traces`` choose the console destinations;
``precision`` the autocast of the forward and loss; ``*_subset_num_batches``
how many batches of a dataloader a pass reads.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from obsbus._check import check_bool, check_int, is_int
from obsbus.errors import ObsbusWarning
from obsbus.interval import LogInterval
from obsbus.logger import LoggerDestination
from obsbus.time import TimeLike, TimeUnit

__all__ = [
    "Subset",
    "autocast_for",
    "check_precision_on",
    "check_subset",
    "console_destinations",
    "grad_scaler_for",
    "subset",
]


def check_subset(name: str, value: object) -> int:
    """``-1`` (every batch, Composer's default) or a positive number of batches."""
    accepted = "-1 (every batch) or a positive number of batches"
    if not is_int(value):
        raise TypeError(f"Trainer {name} must be {accepted}, got {value!r}.")
    if value != -1 and value < 1:
        raise ValueError(
            f"Trainer {name} must be {accepted}, got {value!r}."
            + (" 0 batches would make every pass empty." if value == 0 else "")
        )
    return value


class Subset:
    """The first ``limit`` batches of ``loader`` per pass; other attributes are the loader's."""

    def __init__(self, loader: Iterable[Any], limit: int) -> None:
        self.loader, self.limit = loader, check_int("Subset", "limit", limit, minimum=1)

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.loader), self.limit)

    def __len__(self) -> int:
        try:
            return min(len(self.loader), self.limit)  # type: ignore[arg-type]
        except TypeError:
            return self.limit  # Composer: the subset is the length of an unsized loader

    def __getattr__(self, name: str) -> Any:  # state.dataloader.dataset, as on the loader
        if name in ("loader", "limit"):
            raise AttributeError(name)
        return getattr(self.loader, name)


def subset(loader: Any, limit: int) -> Any:
    return loader if limit == -1 else Subset(loader, limit)


def console_destinations(
    loggers: list[Any],
    *,
    progress_bar: object,
    log_to_console: object,
    console_stream: object,
    console_log_interval: object,
    log_traces: object,
) -> list[LoggerDestination]:
    """Composer's rule: a ``ProgressBarLogger`` (``progress_bar``) and a ``ConsoleLogger``
    (``log_to_console``) on ``console_stream`` are added unless one is in ``loggers``.

    The bar added shows progress and speed but no metric values (``postfix_keys=()``),
    so it never syncs the device; Composer's shows the loss.

    Every argument is checked whether or not its destination is built.
    """
    from obsbus.loggers.console_logger import ConsoleLogger
    from obsbus.loggers.progress_bar_logger import ProgressBarLogger

    bar = check_bool("Trainer", "progress_bar", progress_bar)
    console = check_bool("Trainer", "log_to_console", log_to_console)
    traces = check_bool("Trainer", "log_traces", log_traces)
    if isinstance(console_stream, str):
        if console_stream not in ("stdout", "stderr"):
            raise ValueError(
                f"Trainer console_stream {console_stream!r} is not supported: use 'stdout', "
                "'stderr' or a text stream object."
            )
    elif not callable(getattr(console_stream, "write", None)):
        raise TypeError(
            "Trainer console_stream must be 'stdout', 'stderr' or a text stream (an object with "
            f"write()), got {console_stream!r}."
        )
    if isinstance(console_log_interval, bool):
        raise TypeError(
            f"Trainer console_log_interval must be a time in batches or epochs such as '1ba' or "
            f"'1ep', got {console_log_interval!r}."
        )
    interval: TimeLike = console_log_interval  # type: ignore[assignment]
    if console_log_interval == 0:
        raise ValueError(
            "Trainer console_log_interval 0 is not supported (Composer documents it as 'off' "
            "but divides by it). To fix, pass log_to_console=False to print nothing."
        )
    LogInterval(interval, "Trainer console_log_interval", TimeUnit.EPOCH)
    added: list[LoggerDestination] = []
    if bar and not any(isinstance(d, ProgressBarLogger) for d in loggers):
        # No values in the postfix: showing the loss would turn it into a number (a device
        # sync) at each refresh, and the default Trainer never syncs on a step that does not
        # log. A ProgressBarLogger passed in loggers= shows them (at most once a second).
        added.append(
            ProgressBarLogger(stream=console_stream, log_traces=traces, postfix_keys=())  # type: ignore[arg-type]
        )
    if console and not any(isinstance(d, ConsoleLogger) for d in loggers):
        added.append(
            ConsoleLogger(log_interval=interval, stream=console_stream, log_traces=traces)  # type: ignore[arg-type]
        )
    if bar and console:
        warnings.warn(
            "Trainer: progress_bar=True and log_to_console=True both print to the console, "
            "which interleaves the bar and the metric lines (Composer warns the same). "
            "To fix, set one of them to False.",
            ObsbusWarning,
            stacklevel=3,
        )
    return added


def autocast_for(precision: str, device: Any) -> contextlib.AbstractContextManager[Any]:
    """The autocast ``precision`` means on ``device``: none for fp32."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.float16 if precision == "amp_fp16" else torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=dtype)


def check_precision_on(precision: str | None, device: Any) -> str:
    """``precision`` for ``device``, ``None`` being ``"fp32"``; fp16 needs a GPU."""
    resolved = precision or "fp32"
    if resolved == "amp_fp16" and device.type == "cpu":
        raise ValueError(
            "Trainer precision 'amp_fp16' is not supported on the CPU (Composer refuses it too: "
            "float16 matmuls there are slow and need loss scaling). To fix, pass "
            "precision='amp_bf16' (CPU autocast in bfloat16) or 'fp32'."
        )
    return resolved


def grad_scaler_for(precision: str, device: Any) -> Any:
    """A ``torch.amp.GradScaler`` for fp16 (the loss scaling it needs); ``None`` otherwise."""
    if precision != "amp_fp16":
        return None
    import torch

    return torch.amp.GradScaler(device.type)
