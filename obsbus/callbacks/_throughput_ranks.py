"""SpeedMonitor across ranks: one all_reduce of every rank's window, and the step-time keys."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from obsbus import dist
from obsbus.values import is_tensor, to_host

__all__ = ["ROW", "reduce_window", "step_times"]

#: The columns of each rank's row, in order.
ROW = ("samples", "tokens", "flops", "window_seconds", "interval_seconds", "interval_batches")


def reduce_window(row: Sequence[float]) -> dict[str, Any]:
    """One all_reduce of every rank's row (the columns of :data:`ROW`): sums, the slowest
    window, and the slowest and fastest step time.

    The ``[world_size, 6]`` float64 table comes from :func:`obsbus.dist.gather_rows`. On a
    GPU backend the results stay on the device (tensors: no sync here); on gloo they are
    numbers. A rank that timed no batch since the previous log has no step time.
    """
    import torch

    table = dist.gather_rows(row)
    timed = table[:, 5] > 0
    step = table[:, 4] / table[:, 5].clamp(min=1.0)
    slowest = torch.where(timed, step, -math.inf)
    out = {
        "samples": table[:, 0].sum(),
        "tokens": table[:, 1].sum(),
        "flops": table[:, 2].sum(),
        "seconds": table[:, 3].amax(),
        "step_max": slowest.amax(),
        "step_min": torch.where(timed, step, math.inf).amin(),
        "slowest_rank": slowest.argmax(),
    }
    return to_host(out) if table.device.type == "cpu" else out


def step_times(reduced: dict[str, Any]) -> dict[str, Any]:
    """The ``throughput/step_time_*`` keys from :func:`reduce_window`'s result.

    Example:
        >>> keys = step_times({"step_max": 0.3, "step_min": 0.1, "slowest_rank": 1})
        >>> keys["throughput/step_time_max_over_min"], keys["throughput/step_time_slowest_rank"]
        (2.9999999999999996, 1)
    """
    longest, shortest = reduced["step_max"], reduced["step_min"]
    if not is_tensor(shortest) and not shortest > 0:
        return {}  # a clock that did not move
    return {
        "throughput/step_time_max": longest,
        "throughput/step_time_min": shortest,
        "throughput/step_time_max_over_min": longest / shortest,
        "throughput/step_time_slowest_rank": reduced["slowest_rank"],
    }
