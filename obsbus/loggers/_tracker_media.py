"""Images and tables for trackers: held on the training thread, turned into arrays on the writer.

The tracker destinations receive images and tables that may
hold tensors, possibly on a device. On the training thread they are only
snapshotted (tensors detached and cloned, an asynchronous copy, no device
sync) so a later in-place update can't leak in; the writer thread turns
them into host arrays and numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from obsbus.values import HostValues, is_tensor, to_host_async

__all__ = ["hold_images", "hold_table", "image_arrays", "table_rows"]

_CHANNELS = (1, 3, 4)


def hold_images(images: Any) -> Any:
    """``images`` with each tensor detached and cloned (no device sync); on the training thread."""
    if is_tensor(images):
        return images.detach().clone()
    if isinstance(images, (list, tuple)):
        return [hold_images(image) for image in images]
    return images


def _as_numpy(image: Any) -> Any:
    import numpy as np

    if is_tensor(image):
        import torch

        if image.dtype != torch.uint8:  # numpy has no bfloat16; PIL wants uint8 or float
            image = image.float()
        return image.cpu().numpy()
    return np.asarray(image)


def _hwc(array: Any, channels_last: bool | None) -> Any:
    """One image as HW or HWC; CHW is transposed (guessed from the shape when not told)."""
    if array.ndim == 2:
        return array
    if array.ndim != 3:
        raise ValueError(
            f"an image must have 2 (HW) or 3 (CHW or HWC) dimensions, got shape {array.shape}."
        )
    if channels_last is None:
        channels_last = not (array.shape[0] in _CHANNELS and array.shape[-1] not in _CHANNELS)
    if not channels_last:
        array = array.transpose(1, 2, 0)
    return array[..., 0] if array.shape[-1] == 1 else array


def image_arrays(images: Any, channels_last: bool | None = None) -> list[Any]:
    """``images`` as a list of numpy arrays, each HW or HWC; call on the writer thread.

    Accepts a tensor or array of one image (HW, CHW, HWC) or a batch (NCHW,
    NHWC), or a list of those.

    Example:
        >>> import numpy as np
        >>> [a.shape for a in image_arrays(np.zeros((2, 3, 4, 5)))]
        [(4, 5, 3), (4, 5, 3)]
        >>> [a.shape for a in image_arrays([np.zeros((4, 5, 3)), np.zeros((4, 5))])]
        [(4, 5, 3), (4, 5)]
    """
    if isinstance(images, (list, tuple)):
        return [out for image in images for out in image_arrays(image, channels_last)]
    array = _as_numpy(images)
    if array.ndim == 4:
        return [_hwc(image, channels_last) for image in array]
    return [_hwc(array, channels_last)]


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
