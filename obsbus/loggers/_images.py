"""The one image converter of the tracker destinations (called on the writer thread).

``log_images`` takes one image (``HW``, ``CHW``, ``HWC``), a batch
(``NCHW``, ``NHWC``) or a sequence of those, as tensors or arrays. Every
tracker gets them as a list of numpy arrays, each ``HW`` (one channel) or
``HWC`` with 3 or 4 channels. Trackers that encode the pixels themselves
(TensorBoard's PNGs, Comet's PIL images) ask for ``uint8``: floats are taken
to be in ``[0, 1]``, integers in ``[0, 255]``, booleans as 0 and 255.
"""

from __future__ import annotations

from typing import Any

from obsbus.values import is_tensor

__all__ = ["image_arrays"]

_CHANNELS = (1, 3, 4)


def _as_numpy(image: Any, uint8: bool) -> Any:
    import numpy as np

    if is_tensor(image):
        tensor = image.detach()
        # numpy has no bfloat16, PIL takes uint8 or float: floats (and, for trackers that take
        # raw arrays, other non-uint8 kinds) become float32; for uint8 the kind says the scale.
        if tensor.is_floating_point() or (not uint8 and str(tensor.dtype) != "torch.uint8"):
            tensor = tensor.float()
        return tensor.cpu().numpy()
    return np.asarray(image)


def _layout(array: Any, channels_last: bool | None, shape: tuple[int, ...]) -> Any:
    """One image as ``HW`` or ``HWC`` (C = 3 or 4); CHW is transposed, guessed when not told."""
    if array.ndim == 3:
        if channels_last is None:
            channels_last = not (array.shape[0] in _CHANNELS and array.shape[-1] not in _CHANNELS)
        if not channels_last:
            array = array.transpose(1, 2, 0)
        if array.shape[-1] == 1:
            array = array[..., 0]
    if array.ndim != 2 and (array.ndim != 3 or array.shape[-1] not in _CHANNELS):
        raise ValueError(
            f"Can't read an image of shape {shape}: use HW, CHW, NCHW, or HWC / NHWC with "
            "channels_last=True, with 1, 3 or 4 channels."
        )
    return array


def _to_uint8(array: Any) -> Any:
    import numpy as np

    if array.dtype == np.bool_:
        return array.astype(np.uint8) * 255
    if array.dtype != np.uint8:
        scale = 255.0 if np.issubdtype(array.dtype, np.floating) else 1.0
        array = np.clip(np.nan_to_num(array.astype(np.float64) * scale), 0, 255)
        return np.round(array).astype(np.uint8)
    return array


def image_arrays(
    images: Any, channels_last: bool | None = None, *, uint8: bool = False
) -> list[Any]:
    """Every image in ``images`` as a numpy array, ``HW`` or ``HWC`` (3 or 4 channels).

    ``channels_last``: whether a 3-D image is ``HWC``; ``None`` guesses from
    the shape (``CHW`` when the first dimension is 1, 3 or 4 and the last is
    not). A sequence of arrays or tensors is read one by one; nested lists
    of numbers are one array. ``uint8``: the pixels as bytes (see the module).

    Raises:
        ValueError: an array that is not an image, with its shape.

    Example:
        >>> import numpy as np
        >>> [a.shape for a in image_arrays(np.zeros((2, 3, 4, 5)))]
        [(4, 5, 3), (4, 5, 3)]
        >>> [a.shape for a in image_arrays([np.zeros((4, 5, 3)), np.zeros((4, 5))])]
        [(4, 5, 3), (4, 5)]
        >>> image_arrays([[0.0, 1.0], [0.5, 0.25]], uint8=True)[0].tolist()
        [[0, 255], [128, 64]]
    """
    if isinstance(images, (list, tuple)) and images and hasattr(images[0], "shape"):
        return [a for image in images for a in image_arrays(image, channels_last, uint8=uint8)]
    array = _as_numpy(images, uint8)
    shape = tuple(array.shape)
    arrays = list(array) if array.ndim == 4 else [array]
    out = [_layout(a, channels_last, shape) for a in arrays]
    return [_to_uint8(a) for a in out] if uint8 else out
