"""Turning logged values into numbers: all values due, one transfer.

Metric values may be tensors, and nothing on the training thread syncs the
device on a step that does not log. When a destination is due to write, it
hands every value it holds to :func:`to_host`, which groups the tensors by
device, stacks them and copies each group in one transfer. On CUDA,
:func:`to_host_async` makes that copy non-blocking into pinned memory and
records an event; :meth:`HostValues.result`, called from a background
writer, waits on the event, so the training thread never waits.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["HostValues", "is_tensor", "to_host", "to_host_async", "to_number"]


def is_tensor(value: object) -> bool:
    """Whether ``value`` is a ``torch.Tensor``, without importing torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


class HostValues:
    """Values on their way to the host; :meth:`result` returns them as Python numbers."""

    __slots__ = ("_events", "_groups", "_order", "_plain")

    def __init__(
        self,
        order: list[str],
        plain: dict[str, Any],
        groups: list[tuple[list[tuple[str, Any]], Any]],
        events: list[Any],
    ) -> None:
        self._order = order
        self._plain = plain
        self._groups = groups
        self._events = events

    def result(self) -> dict[str, Any]:
        """Wait for the copies (if any) and return ``{key: number}`` in the original order."""
        for event in self._events:
            event.synchronize()
        self._events = []
        converted = dict(self._plain)
        for entries, host in self._groups:
            flat = host.tolist()
            offset = 0
            for key, (shape, numel, kind) in entries:
                chunk = [kind(v) for v in flat[offset : offset + numel]]
                offset += numel
                scalar = shape == () or (numel == 1 and len(shape) <= 1)
                converted[key] = chunk[0] if scalar else _reshape(chunk, shape)
        return {key: converted[key] for key in self._order}


def _reshape(flat: list[Any], shape: tuple[int, ...]) -> Any:
    if len(shape) <= 1:
        return flat
    step = math.prod(shape[1:])
    return [_reshape(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def to_host_async(values: Mapping[str, Any]) -> HostValues:
    """Start moving every tensor in ``values`` to the host: one copy per device.

    Call it on the training thread when values are due; call
    :meth:`HostValues.result` where waiting is fine (a background writer).
    The stack snapshots the values, so later in-place changes don't leak in.
    """
    plain: dict[str, Any] = {}
    by_device: dict[Any, list[tuple[str, Any]]] = {}
    for key, value in values.items():
        if is_tensor(value):
            by_device.setdefault(value.device, []).append((key, value))
        else:
            plain[key] = value
    if not by_device:
        return HostValues(list(values), plain, [], [])
    import torch

    groups: list[tuple[list[tuple[str, Any]], Any]] = []
    events = []
    for device, items in by_device.items():
        flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for _, t in items])
        entries = [
            (key, (tuple(t.shape), t.numel(), _python_type(t.dtype, torch))) for key, t in items
        ]
        if device.type == "cuda":
            host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
            host.copy_(flat, non_blocking=True)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record()
            events.append(event)
        elif device.type == "cpu":
            host = flat
        else:
            host = flat.to("cpu")
        groups.append((entries, host))
    return HostValues(list(values), plain, groups, events)


def _python_type(dtype: Any, torch: Any) -> type:
    if dtype == torch.bool:
        return bool
    if dtype.is_floating_point or dtype.is_complex:
        return float
    return int


def to_host(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every value in ``values`` as Python numbers, with one transfer per device.

    Example:
        >>> import torch
        >>> to_host({"loss": torch.tensor(0.5), "step": torch.tensor(3), "lr": 0.1})
        {'loss': 0.5, 'step': 3, 'lr': 0.1}
    """
    return to_host_async(values).result()


def to_number(value: Any) -> Any:
    """One value as a Python number (a sync for a device tensor; prefer :func:`to_host`)."""
    return to_host({"v": value})["v"]
