"""What :meth:`ObsbusCallback.wrap` puts on a ``transformers.Trainer`` instance.

HF's callbacks never see the loss tensor (``on_log`` gets a float, and only on
logging steps) nor an exception out of ``train()``. Three instance attributes
shadow the Trainer's methods, without subclassing it:

- ``training_step``: records the detached loss it returns (the value HF adds
  to its own logged loss) and the microbatch's samples and tokens;
- ``compute_loss``: inside training, fires ``after_loss`` with the microbatch
  loss in ``state.loss`` (a callback may replace it, as under ``Run``);
- ``train``: fires ``exception`` and closes every plug-in when it raises.

The callback also keeps the trainer, to read ``trainer.current_flos`` (HF adds
``floating_point_ops(inputs)`` to it every microbatch) around each step.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from obsbus._batch import default_num_samples, default_num_tokens
from obsbus._loss import detached
from obsbus.event import Event

if TYPE_CHECKING:
    from obsbus.integrations.transformers import ObsbusCallback

__all__ = ["wrap_trainer"]

_AFTER_LOSS = Event.AFTER_LOSS


def wrap_trainer(callback: ObsbusCallback, trainer: Any) -> None:
    """Shadow ``trainer``'s ``training_step``, ``compute_loss`` and ``train`` (idempotent)."""
    if getattr(trainer, "_obsbus_wrapped", None) is callback:
        return
    if getattr(trainer, "_obsbus_wrapped", None) is not None:
        raise ValueError(
            f"{type(trainer).__name__} is already wrapped by another ObsbusCallback; "
            "one trainer takes one ObsbusCallback."
        )
    handler = getattr(trainer, "callback_handler", None)
    if handler is None or not hasattr(trainer, "training_step"):
        raise TypeError(f"ObsbusCallback.wrap takes a transformers.Trainer, got {trainer!r}.")
    if callback not in handler.callbacks:
        trainer.add_callback(callback)
    training_step = trainer.training_step
    compute_loss = trainer.compute_loss
    train = trainer.train

    @functools.wraps(training_step)
    def wrapped_training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        callback._microbatch(inputs)
        callback._in_step = True
        try:
            loss = training_step(model, inputs, *args, **kwargs)
        finally:
            callback._in_step = False
        callback._record_loss(loss)
        return loss

    @functools.wraps(compute_loss)
    def wrapped_compute_loss(*args: Any, **kwargs: Any) -> Any:
        result = compute_loss(*args, **kwargs)
        run = callback._run
        if not callback._in_step or run is None:
            return result  # evaluation or prediction
        pair = isinstance(result, tuple)
        run.state.loss = result[0] if pair else result
        run.engine.run_event(_AFTER_LOSS)
        loss = run.state.loss
        # Keep only the detached value: the attached loss would hold the step's autograd graph
        # alive until batch_end, and freeing it there costs ~80 us a step (bench_bridges.py).
        run.state.loss = detached(loss)
        callback._sync_control()
        return (loss, *result[1:]) if pair else loss

    @functools.wraps(train)
    def wrapped_train(*args: Any, **kwargs: Any) -> Any:
        try:
            return train(*args, **kwargs)
        except BaseException as exc:
            callback._fail(exc)
            raise

    trainer.training_step = wrapped_training_step
    trainer.compute_loss = wrapped_compute_loss
    trainer.train = wrapped_train
    trainer._obsbus_wrapped = callback
    callback._trainer = trainer  # its current_flos: the step's FLOPs


def count_microbatch(inputs: Any) -> tuple[int, int]:
    """Samples and tokens in one microbatch, from shapes only (no device sync)."""
    try:
        samples = default_num_samples(inputs)
    except TypeError:
        samples = 0
    return samples, default_num_tokens(inputs)
