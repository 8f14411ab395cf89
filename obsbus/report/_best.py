"""Which way is better for a metric, read from its key: the report's "best" follows it.

The key is cut into lowercase words (at ``/``, ``_``, ``-``, ``.``, spaces and
camelCase humps). The first rule that matches decides:

1. **Lower is better** when a word names a cost: ``loss``, ``error``/``err``,
   ``perplexity``/``ppl``, ``nll``, ``mse``, ``mae``, ``rmse``, ``wer``,
   ``cer``, ``latency``; or the key is a time per unit of work (``time per``,
   ``sec per``, ``seconds per``, ``ms per``, ``step time``).
2. **Higher is better** when the key is a rate (``per sec``, ``per second``,
   ``per s``), or a word names a quality or a speed: ``accuracy``/``acc``,
   ``f1``, ``auc``/``auroc``, ``precision``, ``recall``, ``iou``, ``bleu``,
   ``rouge``, ``map``, ``dice``, ``mfu``, ``throughput``, ``top1``/``top5``,
   ``r2``, ``mcc``.
3. Otherwise the direction is unknown (a run time, an epoch count, a learning
   rate, a norm): the report shows no best for the key, rather than a wrong one.

Whole words only: ``lossless_ratio`` and ``mapping_size`` are unknown.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Literal

__all__ = ["Direction", "best_direction"]

Direction = Literal["min", "max"]

_WORDS = re.compile(r"[A-Z]+\d*(?![a-z])|[A-Z]?[a-z]+\d*|\d+[a-z]*", re.ASCII)
_LOWER = frozenset(
    {"loss", "error", "errors", "err", "perplexity", "ppl", "nll", "mse", "mae", "rmse", "wer",
     "cer", "latency"}
)  # fmt: skip
_HIGHER = frozenset(
    {"accuracy", "acc", "f1", "auc", "auroc", "precision", "recall", "iou", "bleu", "rouge",
     "rouge1", "rouge2", "rougel", "map", "dice", "mfu", "throughput", "top1", "top5", "r2",
     "mcc"}
)  # fmt: skip
_COST_PAIRS = frozenset(
    {("time", "per"), ("sec", "per"), ("secs", "per"), ("seconds", "per"), ("ms", "per"),
     ("step", "time")}
)  # fmt: skip
_RATE_PAIRS = frozenset({("per", "sec"), ("per", "second"), ("per", "s")})


def _words(key: str) -> list[str]:
    return [word.lower() for word in _WORDS.findall(key)]


def best_direction(key: str) -> Direction | None:
    """``"min"``, ``"max"`` or ``None`` (unknown) for ``key``, by the rules above.

    Example:
        >>> [best_direction(k) for k in ("loss/train/total", "metrics/eval/samples_per_second",
        ...                              "metrics/eval/MulticlassAccuracy", "time/train")]
        ['min', 'max', 'max', None]
    """
    words = _words(key)
    pairs = set(pairwise(words))
    if _LOWER.intersection(words) or _COST_PAIRS & pairs:
        return "min"
    if _HIGHER.intersection(words) or _RATE_PAIRS & pairs:
        return "max"
    return None
