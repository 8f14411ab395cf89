"""The PNG files :class:`~obsbus.loggers.FileLogger` writes for ``log_images`` (writer thread).

Layout, under the run folder::

    images/rank{rank}/{name}/step-{step}.png        one image logged at a step
    images/rank{rank}/{name}/step-{step}-{i}.png    the i-th of several (a batch, a list)

``name`` keeps its ``/`` as folders; any other character but letters, digits,
``.``, ``_`` and ``-`` becomes ``_`` (``..`` can't climb out). PNGs are encoded
here with :mod:`zlib` (no Pillow: FileLogger needs no extra), 8 bits a
channel: grey, RGB or RGBA. Each file is written whole (a rename), so the
report never reads half a PNG.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from pathlib import Path
from typing import Any

from obsbus.loggers._images import image_arrays

__all__ = ["IMAGES_FOLDER", "image_file", "png_bytes", "write_images"]

#: The folder under the run folder that holds every rank's images.
IMAGES_FOLDER = "images"
_ODD = re.compile(r"[^A-Za-z0-9._-]")
_COLOR_TYPES = {1: 0, 3: 2, 4: 6}  # grey, RGB, RGBA


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def png_bytes(array: Any) -> bytes:
    """A PNG of ``array``: ``HW`` or ``HWC`` (C = 3 or 4), ``uint8``.

    Example:
        >>> import numpy as np
        >>> png_bytes(np.zeros((2, 3), np.uint8))[:8]
        b'\\x89PNG\\r\\n\\x1a\\n'
    """
    import numpy as np

    pixels = np.ascontiguousarray(array, dtype=np.uint8)
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    rows = pixels.reshape(height, width * channels)
    # each row starts with its filter type: 0, none
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1).tobytes()
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPES[channels], 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 6))
        + _chunk(b"IEND", b"")
    )


def _safe_name(name: str) -> Path:
    parts = [_ODD.sub("_", part) for part in str(name).split("/") if part]
    parts = [("_" * len(part) if set(part) == {"."} else part) for part in parts]
    return Path(*parts) if parts else Path("Images")


def image_file(folder: Path, rank: int, name: str, step: int, index: int | None) -> Path:
    """Where image ``index`` (``None``: the only one) of ``name`` at ``step`` goes.

    Example:
        >>> image_file(Path("run"), 0, "samples/val set", 12, None).as_posix()
        'run/images/rank0/samples/val_set/step-12.png'
        >>> image_file(Path("run"), 1, "../x", 3, 2).as_posix()
        'run/images/rank1/__/x/step-3-2.png'
    """
    file = f"step-{step}.png" if index is None else f"step-{step}-{index}.png"
    return folder / IMAGES_FOLDER / f"rank{rank}" / _safe_name(name) / file


def write_images(
    folder: Path, rank: int, name: str, step: int, images: Any, channels_last: bool | None
) -> None:
    """Write every image in ``images`` (what ``log_images`` took) as a PNG, each whole."""
    arrays = image_arrays(images, channels_last, uint8=True)
    for index, array in enumerate(arrays):
        path = image_file(folder, rank, name, step, None if len(arrays) == 1 else index)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(png_bytes(array))
        os.replace(tmp, path)
