"""Batch losses kept on their device between NaNMonitor's checks, and read back at a check."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from obsbus import values as _values
from obsbus.values import to_host

if TYPE_CHECKING:
    import torch

NONE_BAD = 2**62  # "no bad batch": larger than any batch number
_STACK_EVERY = 256  # kept losses stacked into one tensor per device
# Up to this many kept values on a device a check reads them all (one small transfer, and
# the first bad batch is known at once); more are summed on the device first, and only a
# sum that is not finite costs a second read to find the batch.
_READ_ALL_MAX = 4096
Part = tuple[list[int], Any]
"""Batch numbers and their losses: one tensor on their device, or a list of host numbers."""
_HOST = "host"  # the store's key for losses read on the host already (a list of numbers)


class KeptLosses:
    """The losses of the batches since the last check, each with its batch number.

    :meth:`keep` stores a loss as it is (no kernel, no sync; detached when
    it still has a graph); every 256 are stacked into one tensor per device
    (dtypes promote; a non-scalar loss becomes its float64 sum), so memory
    stays at a few bytes a batch however long the interval. At a check,
    :meth:`take` empties the store into one ``(batches, values)`` per
    device, :meth:`to_read` says what to transfer for them (all values, or
    past 4096 their float64 sum), and :meth:`first_bad` finds the first
    batch whose loss was not finite in what was read.

    0-d CPU losses (a CPU run's) are read where they are instead, one
    ``item()`` each every 256, and kept as a list of Python numbers (~30
    bytes a batch, like the batch numbers themselves): on the host
    that is no sync, and in a training loop it costs ~1 µs a loss where
    ``stack`` and a transfer cost ~30 µs a check (issue 20; the switch
    ``obsbus.values._READ_CPU_NOW`` that tests turn off sends them down the
    device path instead).
    """

    def __init__(self) -> None:
        self._kept: list[tuple[int, torch.Tensor]] = []
        self._stacked: dict[Any, list[Part]] = {}

    def keep(self, batch: int, loss: torch.Tensor) -> None:
        kept = self._kept
        kept.append((batch, loss.detach() if loss.requires_grad else loss))
        if len(kept) >= _STACK_EVERY:
            self._stack()

    def _stack(self) -> None:
        """Stack the kept losses into one tensor per device (no transfer; dtypes promote)."""
        import torch

        kept, self._kept = self._kept, []
        if _values._READ_CPU_NOW and all(t.dim() == 0 and t.is_cpu for _, t in kept):
            # On the host already: read them now (no sync), no stack, no transfer later.
            numbers = [t.item() for _, t in kept]
            self._stacked.setdefault(_HOST, []).append(([b for b, _ in kept], numbers))
            return
        if all(t.dim() == 0 for _, t in kept):
            try:
                stacked = torch.stack([t for _, t in kept])  # the usual: on one device
            except RuntimeError:  # 0-d losses on several devices: grouped below
                stacked = None
            if stacked is not None:
                batches = [b for b, _ in kept]
                self._stacked.setdefault(stacked.device, []).append((batches, stacked))
                return
        by_device: dict[Any, tuple[list[int], list[torch.Tensor]]] = {}
        for batch, t in kept:
            batches, values = by_device.setdefault(t.device, ([], []))
            batches.append(batch)
            if t.dim():
                t = t.reshape(()) if t.numel() == 1 else t.sum(dtype=torch.float64)
            values.append(t)
        for device, (batches, values) in by_device.items():
            stacked = torch.stack(values)
            self._stacked.setdefault(device, []).append((batches, stacked))

    def take(self) -> list[Part]:
        """Every loss kept since the last check, one ``(batches, values)`` per device; empties."""
        import torch

        if self._kept:
            self._stack()
        stacked, self._stacked = self._stacked, {}
        taken: list[Part] = []
        for device, parts in stacked.items():
            batches = [b for part_batches, _ in parts for b in part_batches]
            if len(parts) == 1:
                taken.append((batches, parts[0][1]))
            elif device is _HOST:
                taken.append((batches, [x for _, numbers in parts for x in numbers]))
            else:
                taken.append((batches, torch.cat([v for _, v in parts])))
        return taken

    @staticmethod
    def to_read(taken: list[Part]) -> dict[str, Any]:
        """What to transfer for ``taken``: ``{"kept{i}": values, or their float64 sum}``
        (nothing for a part read on the host already)."""
        due: dict[str, Any] = {}
        for i, (batches, values) in enumerate(taken):
            if type(values) is list:
                continue
            if len(batches) > _READ_ALL_MAX:
                import torch

                # float64: a sum of finite float16/float32 values can't overflow it
                values = values.sum(dtype=torch.float64)
            due[f"kept{i}"] = values
        return due

    @staticmethod
    def read_values(taken: list[Part], read: dict[str, Any]) -> list[tuple[list[int], list[float]]]:
        """``(batches, losses)`` of each part of ``taken`` whose values were all read."""
        out = []
        for i, (batches, kept) in enumerate(taken):
            if type(kept) is list or len(batches) <= _READ_ALL_MAX:
                got: Any = kept if type(kept) is list else read[f"kept{i}"]
                out.append((batches, [float(x) for x in (got if type(got) is list else [got])]))
        return out

    @staticmethod
    def first_bad(taken: list[Part], read: dict[str, Any]) -> int:
        """The first batch of ``taken`` whose loss is not finite, from ``read`` (the numbers
        of :meth:`to_read`'s tensors, and the parts read on the host already);
        :data:`NONE_BAD` when there is none."""
        first = NONE_BAD
        for i, (batches, values) in enumerate(taken):
            got: Any = values if type(values) is list else read[f"kept{i}"]
            if type(values) is list or len(batches) <= _READ_ALL_MAX:  # all read: it is here
                got = got if type(got) is list else [got]
                for b, x in zip(batches, got, strict=True):
                    if not math.isfinite(x):
                        first = min(first, b)
                        break
            elif not math.isfinite(got):
                first = min(first, _search(batches, values))
        return first


def _search(batches: list[int], values: torch.Tensor) -> int:
    """The first batch whose value is not finite (a second transfer, only after a bad sum)."""
    import torch

    bad = (~torch.isfinite(values)).nonzero().reshape(-1)[:1]
    first = to_host({"i": bad})["i"]
    if first == []:
        return NONE_BAD  # the sum of finite values overflowed: nothing was bad
    return batches[first if isinstance(first, int) else first[0]]
