"""Where :class:`~obsbus.callbacks.SpeedMonitor` takes a batch's FLOPs from, in order.

1. its ``flops_per_batch`` argument, ``f(batch) -> number``;
2. ``state.batch_num_flops``, set by the training loop's home (the Hugging Face
   bridge from ``Trainer.current_flos``, the Lightning bridge from its own
   ``flops_per_batch``, or a hand-written loop under ``Run``), summed over the
   batch's microbatches;
3. the model's ``flops_per_batch(batch)`` method (also on ``model.module``);
4. for a Hugging Face ``PreTrainedModel`` and a dict batch, what HF's
   ``Trainer.floating_point_ops`` counts: 6 x the main input's elements
   (``input_ids``) x the non-embedding parameters (``model.floating_point_ops``
   in transformers 4, which has it on the model).

Every source counts from shapes: a device tensor would mean a sync per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from obsbus._check import is_number

__all__ = ["FlopsSource"]


class FlopsSource:
    """The FLOPs of ``state``'s batch from the first source that has them (see the module)."""

    def __init__(self, explicit: Callable[[Any], Any] | None) -> None:
        self.explicit = explicit
        self._model_fn: Callable[[Any], Any] | None = None
        self._hf = False

    def bind(self, model: Any) -> None:
        """Look up the model's own FLOPs methods (at ``fit_start``)."""
        self._model_fn, self._hf = None, False
        owners = (model, getattr(model, "module", None))
        for owner in owners:
            method = getattr(owner, "flops_per_batch", None)
            if callable(method):
                self._model_fn = method
                return
        for owner in owners:
            method = getattr(owner, "floating_point_ops", None)
            if callable(method):
                self._model_fn, self._hf = method, True
                return
        for owner in owners:
            counted = _hf_counter(owner)
            if counted is not None:
                self._model_fn, self._hf = counted, True
                return

    @property
    def available(self) -> bool:
        """Whether any source but the home's may give FLOPs."""
        return self.explicit is not None or self._model_fn is not None

    def __call__(self, state: Any) -> float | None:
        """This rank's FLOPs for the batch just ended, or ``None`` when no source has them."""
        if self.explicit is not None:
            return _number(self.explicit(state.batch), "flops_per_batch")
        home = getattr(state, "batch_num_flops", None)
        if home is not None:
            return _number(home, "state.batch_num_flops")
        if self._model_fn is None:
            return None
        batch = state.batch
        if self._hf:
            if not isinstance(batch, Mapping):
                return None  # HF counts from the input dict
            flops = self._model_fn(batch)
            return None if flops is None else _number(flops, "the HF model's FLOPs")
        return _number(self._model_fn(batch), "model.flops_per_batch")


def _hf_counter(model: Any) -> Callable[[Any], Any] | None:
    count = getattr(model, "num_parameters", None)
    main = getattr(model, "main_input_name", None)
    if not callable(count) or not isinstance(main, str):
        return None
    try:
        params = int(count(exclude_embeddings=True))  # once: the count does not change
    except Exception:
        return None

    def flops(batch: Mapping[str, Any]) -> float | None:
        ids = batch.get(main)
        numel = getattr(ids, "numel", None)
        return None if numel is None else 6.0 * float(numel()) * params

    return flops


def _number(flops: Any, source: str) -> float:
    if not is_number(flops, real=True):
        raise TypeError(
            f"SpeedMonitor: {source} gave {flops!r}; it must be a Python number (FLOPs for "
            "this rank's batch). To fix, compute it from shapes, e.g. 6 * n_params * tokens, "
            "not from tensor values (that would sync every step)."
        )
    return float(flops)
