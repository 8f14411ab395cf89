"""Images and tables for trackers: held on the training thread, made host values on the writer.

The tracker destinations receive images and tables that may
hold tensors, possibly on a device. On the training thread they are only
snapshotted (tensors detached and cloned, an asynchronous copy, no device
sync) so a later in-place update can't leak in; on the writer thread
:func:`table_rows` turns table cells into numbers and
:func:`obsbus.loggers._images.image_arrays` images into arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from obsbus.values import HostValues, is_tensor, to_host_async

__all__ = ["hold_images", "hold_table", "table_rows"]


def hold_images(images: Any) -> Any:
    """``images`` with each tensor detached and cloned (no device sync); on the training thread."""
    if is_tensor(images):
        return images.detach().clone()
    if isinstance(images, (list, tuple)):
        return [hold_images(image) for image in images]
    return images


def hold_table(rows: Sequence[Sequence[Any]]) -> tuple[list[list[Any]], HostValues]:
    """The rows copied and their tensor cells on their way to the host (one transfer)."""
    copied = [list(row) for row in rows]
    cells = {
        f"{i},{j}": value
        for i, row in enumerate(copied)
        for j, value in enumerate(row)
        if is_tensor(value)
    }
    return copied, to_host_async(cells)


def table_rows(rows: list[list[Any]], pending: HostValues) -> list[list[Any]]:
    """``rows`` with the tensor cells replaced by numbers; call on the writer thread.

    Example:
        >>> import torch
        >>> table_rows(*hold_table([["a", torch.tensor(0.5)], ["b", 2]]))
        [['a', 0.5], ['b', 2]]
    """
    for key, value in pending.result().items():
        i, j = key.split(",")
        rows[int(i)][int(j)] = value
    return rows
