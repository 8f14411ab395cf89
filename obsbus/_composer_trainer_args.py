"""Composer ``Trainer`` arguments obsbus's Trainer does not take, each with what to write instead.

A Composer user's ``Trainer(..., save_interval="1ep")`` would otherwise get
Python's bare "unexpected keyword argument"; obsbus says why the argument is
not here (the reference Trainer runs the loop for observability: it saves no
checkpoints, runs no algorithms, wraps no model) and what does the job.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["refuse_unknown_trainer_args"]

_CHECKPOINTS = (
    "obsbus's Trainer saves and loads no checkpoints: save in a callback at batch_checkpoint or "
    "epoch_checkpoint (they fire where a save belongs), and resume counting with "
    "timestamp=Timestamp(...)"
)
_BY_HAND = {
    "algorithms": "obsbus runs no algorithms: apply the method in your model or loop",
    "device_train_microbatch_size": (
        "obsbus splits each batch into a number of microbatches: pass "
        "grad_accum=batch_size // device_train_microbatch_size"
    ),
    "seed": "seed torch yourself (torch.manual_seed(seed)) before building the Trainer",
    "deterministic_mode": "call torch.use_deterministic_algorithms(True) yourself",
    "parallelism_config": "wrap the model yourself (FSDP, DDP) and pass the wrapped module",
    "deepspeed_config": "wrap the model yourself and pass the wrapped module",
    "dist_timeout": "initialize torch.distributed yourself (init_process_group(timeout=...))",
    "compile_config": "pass torch.compile(model) as the model",
    "scale_schedule_ratio": "scale the schedulers yourself; obsbus steps them every batch",
    "step_schedulers_every_batch": "obsbus steps schedulers every batch",
    "python_log_level": "call obsbus.log.setup_logging(level=...)",
    "train_dataloader_label": "the training label is always 'train' (metrics/train/...)",
    "spin_dataloaders": "not needed: obsbus does not fast-forward dataloaders",
    "auto_log_hparams": "pass hparams={...}; obsbus logs them for every destination",
}


def _why(name: str) -> str | None:
    if name in _BY_HAND:
        return _BY_HAND[name]
    if name.startswith(("save_", "load_")) or name in ("autoresume", "save_folder"):
        return _CHECKPOINTS
    return None


def refuse_unknown_trainer_args(extra: Mapping[str, Any], accepted: Iterable[str]) -> None:
    """Raise ``TypeError`` for the first of ``extra``: Composer's with what to write instead,
    any other with the nearest accepted name."""
    for name in extra:
        why = _why(name)
        if why is not None:
            raise TypeError(f"Trainer does not take Composer's {name}=: {why}.")
        near = difflib.get_close_matches(name, list(accepted), n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise TypeError(f"Trainer got an unexpected keyword argument {name!r}.{hint}")
