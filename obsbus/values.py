"""Turning logged values into numbers: all values due, one transfer.

Metric values may be tensors, and nothing on the training thread syncs the
device on a step that does not log. When a destination is due to write, it
hands every value it holds to :func:`to_host`, which groups the tensors by
device, stacks them and copies each group in one transfer. On CUDA,
:func:`to_host_async` makes that copy non-blocking into pinned memory and
records an event; :meth:`HostValues.result`, called from a background
writer, waits on the event, so the training thread never waits. Small CPU
tensors are not transferred at all: they are on the host already, and are
read where they are handed over (one ``tolist`` each, no sync to wait for).

numpy values (``np.float32``, ``np.int64``, ``np.bool_``, arrays) become
Python numbers in :meth:`HostValues.result` too, the one place every
destination's numbers come from, so a JSON file or TensorBoard never sees a
numpy type. That runs on the writer thread where there is one; the training
thread only passes such values along, as it does floats.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "HostRows",
    "HostValues",
    "from_numpy",
    "is_tensor",
    "rows_to_host_async",
    "to_host",
    "to_host_async",
    "to_number",
]


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
        groups: list[tuple[list[tuple[str, Any, Any]], Any]],
        events: list[Any],
    ) -> None:
        # groups: ((key, torch.Size, dtype) of one device's tensors, their values on the host)
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
        np = _numpy()
        if np is not None:
            numpy_types = (np.generic, np.ndarray)
            for key, value in self._plain.items():
                if type(value) not in _BUILTIN and isinstance(value, numpy_types):
                    converted[key] = _from_numpy(value, np)
        if self._groups:
            import torch

            for items, host in self._groups:
                flat = host.tolist()
                offset = 0
                for key, size, dtype in items:  # converted here, off the training thread
                    shape, numel, kind = tuple(size), math.prod(size), _python_type(dtype, torch)
                    chunk = [kind(v) for v in flat[offset : offset + numel]]
                    offset += numel
                    scalar = shape == () or (numel == 1 and len(shape) <= 1)
                    converted[key] = chunk[0] if scalar else _reshape(chunk, shape)
        return {key: converted[key] for key in self._order}


# The usual plain values, skipped with one set lookup before the isinstance check.
_BUILTIN = frozenset({float, int, bool, str, type(None)})


def from_numpy(value: Any) -> Any:
    """A numpy scalar or array as Python numbers (lists for arrays); other values as they are.

    A 1-element 1-d array is one number, as a 1-element tensor is.

    Example:
        >>> import numpy as np
        >>> from_numpy(np.float32(0.5)), from_numpy(np.array([[1, 2]])), from_numpy("x")
        (0.5, [[1, 2]], 'x')
    """
    np = _numpy()
    if np is None or not isinstance(value, (np.generic, np.ndarray)):
        return value
    return _from_numpy(value, np)


def _numpy() -> Any:
    """numpy if it is imported, else ``None`` (then no numpy value can exist).

    Also ``None`` while another thread is still importing it (a writer thread
    converts while the training thread imports TensorBoard, say): the half-made
    module has no ``generic`` yet, and no numpy value can exist before it has.
    """
    np = sys.modules.get("numpy")
    return np if np is not None and hasattr(np, "ndarray") and hasattr(np, "generic") else None


def _from_numpy(value: Any, np: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":  # strings, objects, dates: not numbers
            return value
        number = value.tolist()
        return number[0] if value.ndim == 1 and value.size == 1 else number
    if isinstance(value, (np.number, np.bool_)):
        return value.item()  # the exact Python int, float, bool or complex
    return value


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
    torch = sys.modules.get("torch")
    if torch is None:  # no tensor can exist
        return HostValues(list(values), dict(values), [], [])
    tensor_type = torch.Tensor
    plain: dict[str, Any] = {}
    by_device: dict[Any, list[tuple[str, Any]]] = {}
    for key, value in values.items():
        if not isinstance(value, tensor_type):
            plain[key] = value
        elif value.is_cpu and _READ_CPU_NOW and value.numel() <= _READ_NOW_MAX:
            plain[key] = _read_cpu(value)
        else:
            by_device.setdefault(value.device, []).append((key, value))
    if not by_device:
        return HostValues(list(values), plain, [], [])
    groups: list[tuple[list[tuple[str, Any, Any]], Any]] = []
    events = []
    for device, items in by_device.items():
        # On the CPU the result is read later, on the writer: it must be a copy, never a
        # view of the caller's float64 tensor (elsewhere the copy to the host is one).
        flat = _flatten_float64(items, torch, copy=device.type == "cpu")
        if device.type == "cuda":
            host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
            host.copy_(flat, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            events.append(event)
        elif device.type == "cpu":
            host = flat
        else:
            host = flat.to("cpu")
        groups.append(([(key, t.shape, t.dtype) for key, t in items], host))
    return HostValues(list(values), plain, groups, events)


# A CPU tensor is on the host already: reading it is a memory read, not a device
# sync, and ``tolist`` of a small one (~1 µs) is far cheaper than the stack and
# dtype conversion a transfer needs (~25 µs on a CPU where every torch call costs
# 5-10 µs). Larger ones are copied now and converted on the writer, as device
# tensors are. Tests turn the switch off to run the transfer path on CPU tensors.
_READ_CPU_NOW = True
_READ_NOW_MAX = 1024


def _read_cpu(value: Any) -> Any:
    """A small CPU tensor as Python numbers, now (so a snapshot); one element is a scalar."""
    number = value.tolist()
    if type(number) is list and len(number) == 1 and value.dim() == 1:
        return number[0]
    return number


def _flatten_float64(items: list[tuple[str, Any]], torch: Any, copy: bool = False) -> Any:
    """One float64 vector of every element of ``items`` (one device), in order; with
    ``copy``, never a view of a caller's tensor (a lone float64 one would be).

    0-d tensors, the usual metric, are stacked per dtype in one call each
    (``stack`` then ``to``) instead of three calls per tensor: 14 losses and
    norms take ~30 µs instead of ~300 (bench finding M7). Stacking per dtype
    keeps int64 counts exact (a mixed stack would promote them to float32).
    """
    if len(items) == 1:  # several are stacked or concatenated: a copy anyway
        return items[0][1].detach().reshape(-1).to(torch.float64, copy=copy)
    with torch.no_grad():
        if all(t.dim() == 0 for _, t in items):
            dtype = items[0][1].dtype
            if all(t.dtype == dtype for _, t in items):
                return torch.stack([t for _, t in items]).to(torch.float64)
        parts = []
        run: list[Any] = []  # consecutive 0-d tensors of one dtype
        for _, t in items:
            if t.dim() == 0 and (not run or run[0].dtype == t.dtype):
                run.append(t)
                continue
            if run:
                parts.append(torch.stack(run).to(torch.float64))
                run = []
            if t.dim() == 0:
                run.append(t)
            else:
                parts.append(t.reshape(-1).to(torch.float64))
        if run:
            parts.append(torch.stack(run).to(torch.float64))
        return torch.cat(parts)


def _python_type(dtype: Any, torch: Any) -> type:
    if dtype == torch.bool:
        return bool
    if dtype.is_floating_point or dtype.is_complex:
        return float
    return int


class HostRows:
    """Rows of values on their way to the host; :meth:`result` gives each row as numbers."""

    __slots__ = ("_pending", "_rows")

    def __init__(self, pending: HostValues, rows: Sequence[Mapping[str, Any]]) -> None:
        self._pending = pending
        self._rows = rows  # only their keys are read, in result()

    def result(self) -> list[dict[str, Any]]:
        """Wait for the copies (if any); one ``{key: number}`` per row, in order."""
        numbers = self._pending.result()
        return [{k: numbers[f"{i}\x00{k}"] for k in row} for i, row in enumerate(self._rows)]


def rows_to_host_async(rows: Sequence[Mapping[str, Any]]) -> HostRows:
    """:func:`to_host_async` of several rows (one per logged step) at once: one transfer.

    What a destination that holds rows between writes hands its writer. The
    rows must not change afterwards (their keys are read by :meth:`HostRows.result`).

    Example:
        >>> import torch
        >>> rows_to_host_async([{"loss": torch.tensor(0.5)}, {"loss": 0.25, "lr": 0.1}]).result()
        [{'loss': 0.5}, {'loss': 0.25, 'lr': 0.1}]
    """
    values = {f"{i}\x00{k}": v for i, row in enumerate(rows) for k, v in row.items()}
    return HostRows(to_host_async(values), rows)


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
