"""Run obsbus's monitors and destinations inside a Lightning ``Trainer``.

Add one :class:`ObsbusCallback` to ``Trainer(callbacks=[...])``; it owns an
obsbus :class:`~obsbus.State`, :class:`~obsbus.Logger` and
:class:`~obsbus.Engine` and fires obsbus events from Lightning's hooks. Add
:class:`ObsbusLogger` to ``Trainer(logger=...)`` too and ``self.log(...)``
values reach the same destinations. Works with ``lightning`` (tried first) and
``pytorch_lightning``; with neither installed, importing this module raises
:class:`~obsbus.errors.MissingExtraError` (``pip install 'obsbus[lightning]'``).

=======================================  ====================================================
Lightning hook                           obsbus events
=======================================  ====================================================
``setup`` (first, per bus)               ``init``, ``before_load``, ``after_load``
``on_fit_start``                         ``fit_start``, ``iteration_start`` (first fit)
``on_train_epoch_start`` / ``_end``      ``epoch_start`` / ``epoch_end``
``on_train_batch_start``                 ``batch_start``, ``before_train_batch``, at the first
                                         microbatch of an accumulation window only
``on_before_backward`` / ``on_after_``   ``before_backward`` / ``after_backward`` (each
                                         microbatch)
``on_before_optimizer_step``             none: marks that this microbatch ends the batch
``on_train_batch_end`` (after the step)  ``after_train_batch``, ``batch_end``; the loss is
                                         logged as ``loss/train/total`` between them
``on_validation_start``                  ``eval_before_all`` (``eval_standalone_start`` in
                                         ``trainer.validate``)
``on_validation_epoch_start``            ``eval_start``
``on_validation_batch_start`` / ``_end`` ``eval_batch_start`` / ``eval_batch_end``
``on_validation_end``                    ``eval_end`` (``state.eval_metrics["eval"]`` filled),
                                         ``eval_after_all`` (``eval_standalone_end``)
``on_save_checkpoint``                   ``batch_checkpoint``
``on_exception``                         ``exception``, then every plug-in closes (flushes)
``on_fit_end``                           ``fit_end``
``teardown``                             every plug-in closes
=======================================  ====================================================

Batch events count optimizer steps: with ``accumulate_grad_batches=N``, one
obsbus batch is N Lightning batches (``state.timestamp.batch`` is
``trainer.global_step`` under automatic optimization), and its samples are
theirs summed. ``state.loss`` is the mean of the microbatch losses, each
``outputs["loss"]`` (which Lightning 2.x has divided by N) times N, detached:
no host sync. ``state.eval_metrics["eval"]`` holds the ``trainer.callback_metrics``
that validation set (tensors, not converted). ``state.stop_training()`` sets
``trainer.should_stop``.

Lightning cannot give: ``before_dataloader``/``after_dataloader``, the
forward and loss events (``before_forward`` ... ``after_loss``, and their eval
and predict twins: they happen inside ``training_step``), ``epoch_checkpoint``,
``iteration_end``, prediction and test events, and eval events during the
sanity check (skipped). Several validation dataloaders share one
``eval_start``/``eval_end`` labelled ``"eval"``.

Example:
    >>> from obsbus.loggers import InMemoryLogger
    >>> memory = InMemoryLogger()
    >>> bus = ObsbusCallback(loggers=[memory])
    >>> bus.lightning_logger.name
    'obsbus'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from obsbus._batch import default_num_samples, default_num_tokens
from obsbus._check import check_bool, check_callable, check_mapping, is_number
from obsbus._loss import combine_losses, detached, loss_metrics
from obsbus._run_args import check_callbacks, check_loggers, check_profiler
from obsbus._run_start import start_run
from obsbus.callback import Callback
from obsbus.engine import Engine
from obsbus.event import Event
from obsbus.integrations._lightning_host import (
    import_lightning,
    max_duration_of,
    precision_of,
    steps_per_epoch,
)
from obsbus.integrations._lightning_logger import ObsbusLogger
from obsbus.logger import Logger, LoggerDestination
from obsbus.state import State
from obsbus.time import Timestamp

pl: Any = import_lightning()  # before anything else here needs the host

__all__ = ["ObsbusCallback", "ObsbusLogger"]

_E = Event


class ObsbusCallback(pl.Callback):  # type: ignore[misc]
    """A Lightning ``Callback`` that drives obsbus's event bus (see the module's table).

    Args:
        callbacks: obsbus callbacks (monitors).
        loggers: obsbus destinations.
        run_folder: where the run's files live (see :class:`~obsbus.RunFolder`).
        run_name: the run's name; a generated one by default.
        hparams: logged once at ``init``, as ``Run`` does.
        num_samples_fn: samples in a Lightning batch (default: its first tensor's
            leading dimension); ``num_tokens_fn``: its tokens (default 0, or
            ``input_ids.numel()`` for a dict batch).
        flops_per_batch: ``f(batch) -> number``: FLOPs of one Lightning
            (micro)batch, forward and backward; summed over an accumulation
            window into ``state.batch_num_flops`` for ``SpeedMonitor``. Default:
            the LightningModule's ``flops_per_batch(batch)`` method, if any.
            ``lightning.fabric.utilities.throughput.measure_flops`` on a meta
            copy of the model gives the number for a batch shape.
        profiler: an obsbus :class:`~obsbus.profiler.Profiler` to attach.
        strict: raise a destination's failure instead of containing it (tests).

    Attributes:
        state, logger, engine: the obsbus objects (built again for a fit after
            the bus closed). ``lightning_logger``: an :class:`ObsbusLogger` for
            ``Trainer(logger=...)``.
    """

    def __init__(
        self,
        callbacks: Callback | Iterable[Callback] | None = (),
        loggers: LoggerDestination | Iterable[LoggerDestination] | None = (),
        *,
        run_folder: Any = None,
        run_name: str | None = None,
        hparams: dict[str, Any] | None = None,
        num_samples_fn: Callable[[Any], int] | None = None,
        num_tokens_fn: Callable[[Any], int] | None = None,
        flops_per_batch: Callable[[Any], float] | None = None,
        profiler: Any = None,
        strict: bool = False,
    ) -> None:
        super().__init__()
        owner = "ObsbusCallback"
        self._plugins = check_callbacks(owner, callbacks)
        self._destinations = check_loggers(owner, loggers)
        check_profiler(owner, profiler)
        self._profiler = profiler
        self._hparams = check_mapping(owner, "hparams", hparams)
        self._strict = check_bool(owner, "strict", strict)
        self._num_samples: Callable[[Any], int] = (
            check_callable(owner, "num_samples_fn", num_samples_fn) or default_num_samples
        )
        self._num_tokens: Callable[[Any], int] = (
            check_callable(owner, "num_tokens_fn", num_tokens_fn) or default_num_tokens
        )
        self._flops_arg = check_callable(owner, "flops_per_batch", flops_per_batch)
        self._flops: Callable[[Any], Any] | None = self._flops_arg
        self._run_folder, self._run_name = run_folder, run_name
        self._build()
        self.lightning_logger = ObsbusLogger(self)

    def _build(self) -> None:
        self.state = State(self._run_name, run_folder=self._run_folder, hparams=self._hparams)
        self.logger = Logger(self.state, self._destinations, strict=self._strict)
        self.engine = Engine(self.state, self.logger, self._plugins)
        if self._profiler is not None:
            self.engine.attach_profiler(self._profiler)
        self.state.loggers = list(self.logger.destinations)
        self.state.callbacks = [*self.state.loggers, *self.engine.callbacks]
        self._initialized = self._fitting = self._in_batch = self._stepped = False
        self._skip_eval = False
        self._parts: list[tuple[Any, float | None]] = []
        self._before_eval: dict[str, Any] = {}
        self._mark = time.perf_counter()

    def _elapsed(self) -> float:
        now = time.perf_counter()
        elapsed, self._mark = now - self._mark, now
        return elapsed

    # ------------------------------------------------------------- fit
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.engine.closed:
            self._build()
        if self._initialized:
            return
        state = self.state
        state.model = pl_module
        state.grad_accum = max(1, int(trainer.accumulate_grad_batches))
        state.max_duration = max_duration_of(trainer)
        state.precision = precision_of(trainer)
        state.device = getattr(trainer.strategy, "root_device", None)
        method = getattr(pl_module, "flops_per_batch", None)
        self._flops = self._flops_arg or (method if callable(method) else None)
        self._initialized = True
        start_run(state, self.engine, self.logger, self._profiler)  # claims files first

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        state = self.state
        state.optimizers = list(trainer.optimizers)
        state.schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        state.stop_requested, state.exception = False, None
        self._fitting = True
        self.engine.run_event(_E.FIT_START)
        ts = state.timestamp
        if ts._epoch_in_iteration == 0 and ts._batch_in_epoch == 0:
            self.engine.run_event(_E.ITERATION_START)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._mark = time.perf_counter()  # after the sanity check: not the first batch's time

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._fitting = False
        self.engine.run_event(_E.FIT_END)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.engine.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.engine.closed:
            return
        self.state.exception = exception
        self.engine.run_event(_E.EXCEPTION)
        self.engine.close()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        self.engine.run_event(_E.BATCH_CHECKPOINT)

    # ----------------------------------------------------------- train
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        state = self.state
        state.dataloader, state.dataloader_label = trainer.train_dataloader, "train"
        state.dataloader_len = steps_per_epoch(trainer)
        self.engine.run_event(_E.EPOCH_START)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.state.timestamp = self.state.timestamp.to_next_epoch(self._elapsed())
        self.engine.run_event(_E.EPOCH_END)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        state = self.state
        samples, tokens = self._num_samples(batch), self._num_tokens(batch)
        flops = None if self._flops is None else _flops_number(self._flops(batch))
        state.batch = batch
        if self._in_batch:
            state.batch_num_samples += samples
            state.batch_num_tokens += tokens
            if flops is not None and state.batch_num_flops is not None:
                state.batch_num_flops += flops
            return
        self._in_batch, self._stepped, self._parts = True, False, []
        state.batch_num_samples, state.batch_num_tokens = samples, tokens
        state.batch_num_flops = flops
        state.loss = state.outputs = None
        self.engine.run_event(_E.BATCH_START)
        self.engine.run_event(_E.BEFORE_TRAIN_BATCH)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self.engine.run_event(_E.BEFORE_BACKWARD)

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self.engine.run_event(_E.AFTER_BACKWARD)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._stepped = True

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        state = self.state
        state.outputs = outputs
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None and hasattr(loss, "detach"):
            loss = loss.detach()
            if pl_module.automatic_optimization and state.grad_accum > 1:
                loss = loss * state.grad_accum  # Lightning divided it by accumulate_grad_batches
            self._parts.append((loss, None))
        if not self._stepped:
            return
        self._in_batch = self._stepped = False
        run_event = self.engine.run_event
        state.loss = combine_losses(self._parts) if self._parts else None
        run_event(_E.AFTER_TRAIN_BATCH)
        state.timestamp = state.timestamp.to_next_batch(
            state.batch_num_samples, state.batch_num_tokens, self._elapsed()
        )
        if state.loss is not None:
            self.logger.log_metrics(loss_metrics(detached(state.loss)))
        run_event(_E.BATCH_END)
        if state.stop_requested:
            trainer.should_stop = True

    # ------------------------------------------------------------ eval
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._skip_eval = bool(trainer.sanity_checking)
        if self._skip_eval:
            return
        self._before_eval = dict(trainer.callback_metrics)
        self.engine.run_event(_E.EVAL_BEFORE_ALL if self._fitting else _E.EVAL_STANDALONE_START)

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._skip_eval:
            return
        self._saved = (self.state.dataloader, self.state.dataloader_label)
        self.state.dataloader_label = "eval"
        self.state.eval_timestamp = Timestamp()
        self._eval_mark = time.perf_counter()
        self.engine.run_event(_E.EVAL_START)

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self._skip_eval:
            return
        state = self.state
        state.batch = batch
        state.batch_num_samples = self._num_samples(batch)
        state.batch_num_tokens = self._num_tokens(batch)
        self.engine.run_event(_E.EVAL_BATCH_START)

    def on_validation_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._skip_eval:
            return
        state = self.state
        state.outputs = outputs
        now = time.perf_counter()
        state.eval_timestamp = state.eval_timestamp.to_next_batch(
            state.batch_num_samples, state.batch_num_tokens, now - self._eval_mark
        )
        self._eval_mark = now
        self.engine.run_event(_E.EVAL_BATCH_END)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._skip_eval:
            self._skip_eval = False
            return
        state, before = self.state, self._before_eval
        # What validation logged: the entries it set (new tensors), compared by identity: no sync.
        changed = {k: v for k, v in trainer.callback_metrics.items() if before.get(k) is not v}
        state.eval_metrics.setdefault("eval", {}).update(changed)
        self.engine.run_event(_E.EVAL_END)
        state.dataloader, state.dataloader_label = self._saved
        self.engine.run_event(_E.EVAL_AFTER_ALL if self._fitting else _E.EVAL_STANDALONE_END)


def _flops_number(flops: Any) -> float:
    if not is_number(flops):
        raise TypeError(
            f"ObsbusCallback: flops_per_batch gave {flops!r}; it must be a Python number "
            "(FLOPs of one batch, forward and backward), computed from shapes: a tensor "
            "would sync every step."
        )
    return float(flops)
