"""The events a training loop fires."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Event"]


class Event(StrEnum):
    """An event in a training run; its value is the name of the hook that handles it.

    The reference :class:`~obsbus.Trainer` (and :class:`~obsbus.Run`, which it
    is built on) fires the events in this order::

        # Trainer.__init__ / Run.__init__
        init
        before_load
        after_load                     # (checkpoint loading would sit here)

        # fit()
        fit_start
        iteration_start                # at the first fit(): the run is one iteration
        for epoch in epochs:           # until max_duration or stop_training()
            epoch_start
            while True:
                before_dataloader
                batch = next(dataloader)       # StopIteration ends the epoch
                after_dataloader
                batch_start
                before_train_batch
                for microbatch in split(batch, grad_accum):
                    before_forward
                    outputs = model(microbatch)
                    after_forward
                    before_loss
                    loss = loss_fn(outputs, targets)
                    after_loss
                    before_backward
                    loss.backward()
                    after_backward
                optimizer.step(); scheduler.step()
                after_train_batch
                # timestamp advanced: timestamp.batch counts this batch, and
                # loss/train/total is logged at that step
                batch_end
                if eval is due (batch interval): <eval in fit>
                batch_checkpoint
                if done: break         # epoch_end is not fired for a cut epoch
            # timestamp advanced: timestamp.epoch counts this epoch
            epoch_end
            if eval is due (epoch interval): <eval in fit>
            epoch_checkpoint
        # iteration_end, iteration_checkpoint: never fired, as in Composer
        # without an iteration_length (obsbus has none)
        fit_end

        # <eval in fit>                  # eval() standalone instead fires
        eval_before_all                  #   eval_standalone_start
        for each eval dataloader:
            eval_start
            for batch in dataloader:
                eval_batch_start
                eval_before_forward
                outputs = model(batch)
                eval_after_forward
                eval_batch_end
            eval_end
        eval_after_all                   #   eval_standalone_end

        # predict()
        predict_start
        for batch in dataloader:
            predict_batch_start
            predict_before_forward
            outputs = model(batch)
            predict_after_forward
            predict_batch_end
        predict_end

        # whenever the loop raises (SIGTERM included), before the error
        # reaches the caller; state.exception holds it
        exception

    Example:
        >>> Event.BATCH_END.value
        'batch_end'
        >>> Event.BEFORE_FORWARD.is_before_event, Event.AFTER_FORWARD.is_after_event
        (True, True)
        >>> Event.EVAL_AFTER_FORWARD.canonical_name
        'eval_forward'
        >>> Event.EVAL_START.is_eval, Event.PREDICT_END.is_predict
        (True, True)
    """

    INIT = "init"
    BEFORE_LOAD = "before_load"
    AFTER_LOAD = "after_load"
    FIT_START = "fit_start"
    ITERATION_START = "iteration_start"
    EPOCH_START = "epoch_start"
    BEFORE_DATALOADER = "before_dataloader"
    AFTER_DATALOADER = "after_dataloader"
    BATCH_START = "batch_start"
    BEFORE_TRAIN_BATCH = "before_train_batch"
    BEFORE_FORWARD = "before_forward"
    AFTER_FORWARD = "after_forward"
    BEFORE_LOSS = "before_loss"
    AFTER_LOSS = "after_loss"
    BEFORE_BACKWARD = "before_backward"
    AFTER_BACKWARD = "after_backward"
    AFTER_TRAIN_BATCH = "after_train_batch"
    BATCH_END = "batch_end"
    BATCH_CHECKPOINT = "batch_checkpoint"
    EPOCH_END = "epoch_end"
    EPOCH_CHECKPOINT = "epoch_checkpoint"
    ITERATION_END = "iteration_end"
    ITERATION_CHECKPOINT = "iteration_checkpoint"
    FIT_END = "fit_end"
    EVAL_BEFORE_ALL = "eval_before_all"
    EVAL_START = "eval_start"
    EVAL_BATCH_START = "eval_batch_start"
    EVAL_BEFORE_FORWARD = "eval_before_forward"
    EVAL_AFTER_FORWARD = "eval_after_forward"
    EVAL_BATCH_END = "eval_batch_end"
    EVAL_END = "eval_end"
    EVAL_AFTER_ALL = "eval_after_all"
    EVAL_STANDALONE_START = "eval_standalone_start"
    EVAL_STANDALONE_END = "eval_standalone_end"
    PREDICT_START = "predict_start"
    PREDICT_BATCH_START = "predict_batch_start"
    PREDICT_BEFORE_FORWARD = "predict_before_forward"
    PREDICT_AFTER_FORWARD = "predict_after_forward"
    PREDICT_BATCH_END = "predict_batch_end"
    PREDICT_END = "predict_end"
    EXCEPTION = "exception"

    @property
    def is_before_event(self) -> bool:
        """Whether this event opens a pair (``before_*``, ``*_start``)."""
        return self in _BEFORE_EVENTS

    @property
    def is_after_event(self) -> bool:
        """Whether this event closes a pair (``after_*``, ``*_end``)."""
        return self in _AFTER_EVENTS

    @property
    def canonical_name(self) -> str:
        """The name a pair of events shares: ``eval_forward`` for ``eval_after_forward``.

        Events that are not part of a pair return their own value.
        """
        name = self.value
        for affix in ("before_", "after_", "_start", "_end"):
            name = name.replace(affix, "")
        return name

    @property
    def is_eval(self) -> bool:
        """Whether the event belongs to evaluation."""
        return self.value.startswith("eval_")

    @property
    def is_predict(self) -> bool:
        """Whether the event belongs to prediction."""
        return self.value.startswith("predict_")


_BEFORE_EVENTS = frozenset(e for e in Event if "before_" in e.value or e.value.endswith("_start"))
_AFTER_EVENTS = frozenset(e for e in Event if "after_" in e.value or e.value.endswith("_end"))
