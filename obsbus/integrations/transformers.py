"""obsbus's monitors and destinations inside Hugging Face ``transformers.Trainer``.

Importing this module imports ``transformers``; without it, the import raises
:class:`~obsbus.errors.MissingExtraError` (``pip install 'obsbus[transformers]'``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from obsbus.errors import MissingExtraError

try:
    from transformers import TrainerCallback
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise MissingExtraError("transformers", "obsbus.integrations.transformers") from _exc

from obsbus._check import check_bool
from obsbus._loss import detached, loss_metrics
from obsbus._run_args import check_callbacks, check_loggers, check_profiler
from obsbus.callback import Callback
from obsbus.event import Event
from obsbus.integrations._hf_host import (
    current_flos,
    eval_label,
    hparams_of,
    is_number,
    unwrap_optimizer,
)
from obsbus.integrations._hf_wrap import count_microbatch, wrap_trainer
from obsbus.logger import LoggerDestination
from obsbus.run import Run
from obsbus.run_folder import RunFolder

if TYPE_CHECKING:
    from obsbus.profiler.profiler import Profiler

__all__ = ["ObsbusCallback"]

_E = Event


class ObsbusCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` that runs obsbus callbacks and destinations.

    It owns an obsbus :class:`~obsbus.Run` (its ``State``, ``Logger`` and
    ``Engine``), built at the first ``on_train_begin`` from the trainer's
    model, optimizer and scheduler, and fires obsbus events from HF's hooks.
    One batch is one optimizer step: ``state.timestamp.batch`` is HF's
    ``global_step``; samples count the microbatches' leading dimension, and
    tokens HF's ``num_input_tokens_seen`` when it tracks them
    (``include_num_input_tokens_seen``), else ``input_ids.numel()``.

    ===================================  =========================================
    HF hook                              obsbus events
    ===================================  =========================================
    ``on_train_begin``                   ``init``, ``before_load``, ``after_load``
                                         (first time), ``fit_start``,
                                         ``iteration_start``
    ``on_epoch_begin``                   ``epoch_start``
    ``on_step_begin``                    ``batch_start``, ``before_train_batch``
    ``compute_loss`` (``wrap`` only)     ``after_loss`` (per microbatch)
    ``on_substep_end``                   ``after_backward`` (microbatches but the
                                         last)
    ``on_pre_optimizer_step``            ``after_backward`` (last microbatch,
                                         after HF's gradient clipping)
    ``on_optimizer_step``                ``after_train_batch`` (the gradients
                                         still exist; HF drops them next)
    ``on_step_end``                      the ``loss/train/total`` log,
                                         ``batch_end``
    ``on_evaluate``                      ``eval_end`` (``state.eval_metrics``)
    ``on_save``                          ``batch_checkpoint``
    ``on_epoch_end``                     ``epoch_end`` (also when training stops
                                         mid-epoch, as HF calls it)
    ``on_train_end``                     ``fit_end``, then every plug-in closes
    ``train()`` raises (``wrap`` only)   ``exception``, then every plug-in closes
    ===================================  =========================================

    HF cannot give ``before_dataloader``/``after_dataloader`` (it prefetches a
    step's microbatches), ``before_forward``/``after_forward``,
    ``before_loss``, ``before_backward``, ``epoch_checkpoint``,
    ``iteration_end``, the per-batch eval events (``eval_before_all``,
    ``eval_start``, ``eval_batch_*``, ``eval_after_all``) nor the predict
    events. ``batch_checkpoint`` fires only when HF saves, not every batch as
    under ``Run``.

    **The loss.** HF's callbacks never see the loss tensor, so call
    ``callback.wrap(trainer)`` (it also adds the callback to the trainer).
    It shadows ``trainer.training_step`` to keep the detached loss each
    microbatch returns, with no ``.item()``: ``state.loss`` at
    ``after_train_batch`` is their sum, the value HF adds to its own logged
    ``loss`` (the token mean when the model normalises by
    ``num_items_in_batch``, else the mean of the microbatch means), logged
    as ``loss/train/total`` at the batch's step. It shadows ``compute_loss``
    to fire ``after_loss`` (so ``NaNMonitor(mode="immediate")`` works), and
    ``train`` to fire ``exception`` and flush every destination when training
    raises: HF has no exception hook. Without ``wrap`` there is no loss, no
    ``after_loss``, and a crash leaves the plug-ins unclosed.

    **FLOPs.** With ``wrap``, ``state.batch_num_flops`` is what HF counted for
    the step: the change of ``trainer.current_flos``, to which HF adds
    ``model.floating_point_ops(inputs)`` every microbatch (its ``total_flos``
    sums them). ``SpeedMonitor`` then logs ``throughput/flops_per_sec``, and MFU
    on a device it knows the peak of.

    ``state.stop_training()`` sets ``control.should_training_stop``: HF ends
    after the current step. With ``log_hf_logs`` (the default) what HF logs
    through ``on_log`` (``loss``, ``grad_norm``, ``learning_rate``,
    ``eval_loss``, ...) also goes to obsbus's destinations at HF's step, as
    ``{hf_prefix}{key}``. ``on_evaluate``'s metrics are logged as
    ``metrics/eval/{name}`` (``eval_loss`` -> ``metrics/eval/loss``) and kept
    in ``state.eval_metrics["eval"]``; with an ``eval_dataset`` dict, each
    dataset's under its own label (``eval_val_loss`` -> ``metrics/val/loss``,
    ``state.eval_metrics["val"]``), as obsbus's ``Trainer`` names its
    eval dataloaders. One callback serves one ``train()``
    call: its plug-ins close at its end.

    Args:
        callbacks: obsbus callbacks (monitors).
        loggers: obsbus destinations.
        run_folder: where the run's files go (as :class:`~obsbus.Run`).
        run_name: the run's name; default HF's ``run_name``.
        log_hf_logs: also send HF's ``on_log`` values to the destinations.
        hf_prefix: the key prefix of those values.
        profiler: an obsbus profiler.
        strict: raise, instead of report, when a destination fails.
        hparams: hyperparameters to log; default ``args.to_dict()``.

    Example:
        >>> from obsbus.loggers import InMemoryLogger
        >>> cb = ObsbusCallback(loggers=[InMemoryLogger()], log_hf_logs=False)
        >>> cb.run is None  # built at on_train_begin
        True
    """

    def __init__(
        self,
        callbacks: Callback | Iterable[Callback] | None = (),
        loggers: LoggerDestination | Iterable[LoggerDestination] | None = (),
        run_folder: str | os.PathLike[str] | RunFolder | None = None,
        *,
        run_name: str | None = None,
        log_hf_logs: bool = True,
        hf_prefix: str = "hf/",
        profiler: Profiler | None = None,
        strict: bool = False,
        hparams: dict[str, Any] | None = None,
    ) -> None:
        check_bool("ObsbusCallback", "log_hf_logs", log_hf_logs)
        if not isinstance(hf_prefix, str):
            raise TypeError(
                f"ObsbusCallback hf_prefix must be a str (e.g. 'hf/'), got {hf_prefix!r}."
            )
        if run_name is not None and not isinstance(run_name, str):
            raise TypeError(f"ObsbusCallback run_name must be a str or None, got {run_name!r}.")
        # Checked now, with Run's own checks, so a bad plug-in fails here and not mid-train.
        self._callbacks = check_callbacks("ObsbusCallback", callbacks)
        self._loggers = check_loggers("ObsbusCallback", loggers)
        check_profiler("ObsbusCallback", profiler)
        self._run_folder, self._run_name, self._profiler = run_folder, run_name, profiler
        self._strict = check_bool("ObsbusCallback", "strict", strict)
        self._hparams = hparams
        self.log_hf_logs, self.hf_prefix = log_hf_logs, hf_prefix
        self._run: Run | None = None
        self._fit_cm: Any = None
        self._control: Any = None
        self._in_step = False
        self._in_batch = False
        self._trained = False
        self._parts: list[Any] = []
        self._samples = self._tokens = 0
        self._tokens_seen = 0
        self._trainer: Any = None  # set by wrap()
        self._flos_mark: float | None = None
        self._mark = time.perf_counter()

    @property
    def run(self) -> Run | None:
        """The obsbus ``Run`` (state, logger, engine); ``None`` before ``on_train_begin``."""
        return self._run

    def wrap(self, trainer: Any) -> Any:
        """Give obsbus the loss and ``train()``'s exceptions (see the class docs); returns it."""
        wrap_trainer(self, trainer)
        return trainer

    # ------------------------------------------------------------ internals
    def _fire(self, *events: Event) -> None:
        assert self._run is not None
        for event in events:
            self._run.engine.run_event(event)
        self._sync_control()

    def _sync_control(self) -> None:
        run = self._run
        # Inside a step HF would break before the optimizer step; obsbus stops after the batch.
        if self._in_batch or run is None or self._control is None:
            return
        if run.state.stop_requested:
            self._control.should_training_stop = True

    def _microbatch(self, inputs: Any) -> None:
        samples, tokens = count_microbatch(inputs)
        self._samples += samples
        self._tokens += tokens
        if self._run is not None:
            self._run.state.batch = inputs

    def _record_loss(self, loss: Any) -> None:
        self._parts.append(detached(loss))

    def _fail(self, exc: BaseException) -> None:
        cm, self._fit_cm = self._fit_cm, None
        try:
            if cm is not None:
                cm.__exit__(type(exc), exc, exc.__traceback__)
        except BaseException as raised:  # the exception itself, re-raised by guard()
            if raised is not exc:
                raise
        finally:
            if self._run is not None:
                self._run.close()

    def _step_flops(self) -> float | None:
        # HF resets current_flos only between steps (store_flos at logging), so the change
        # across the step is what it added for the step's microbatches.
        began, now = self._flos_mark, current_flos(self._trainer)
        if began is None or now is None or now <= began:
            return None  # not wrapped, or a model without floating_point_ops (HF adds 0)
        return now - began

    # ------------------------------------------------------------ HF hooks
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is None:
            max_steps = getattr(state, "max_steps", 0) or 0
            self._run = Run(
                model=kwargs.get("model"),
                optimizers=unwrap_optimizer(kwargs.get("optimizer")),
                schedulers=kwargs.get("lr_scheduler"),
                max_duration=f"{max_steps}ba" if max_steps > 0 else None,
                callbacks=self._callbacks,
                loggers=self._loggers,
                run_name=self._run_name or getattr(args, "run_name", None),
                grad_accum=int(getattr(args, "gradient_accumulation_steps", 1)),
                hparams=self._hparams if self._hparams is not None else hparams_of(args),
                run_folder=self._run_folder,
                profiler=self._profiler,
                handle_sigterm=False,
                strict=self._strict,
            )
        elif self._run.engine.closed:
            raise RuntimeError(
                "This ObsbusCallback's plug-ins closed when its train() ended. "
                "To fix, give each trainer.train() call a new ObsbusCallback."
            )
        self._tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        self._mark = time.perf_counter()
        self._fit_cm = self._run.fitting()
        self._fit_cm.__enter__()
        self._sync_control()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is not None:
            self._run.state.dataloader_label = "train"
            self._fire(_E.EPOCH_START)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is None:
            return
        self._parts, self._samples, self._tokens = [], 0, 0
        self._trained = False
        self._run.state.loss, self._run.state.outputs = None, None
        self._run.state.batch_num_flops = None
        self._flos_mark = current_flos(self._trainer)
        self._in_batch = True
        self._fire(_E.BATCH_START, _E.BEFORE_TRAIN_BATCH)

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is not None:
            self._fire(_E.AFTER_BACKWARD)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is not None:
            self._fire(_E.AFTER_BACKWARD)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is not None:
            self._after_train_batch()

    def _after_train_batch(self) -> None:
        # From on_optimizer_step: the gradients still exist (HF drops them before on_step_end).
        assert self._run is not None
        if self._trained:
            return
        self._trained = True
        loss = None
        for part in self._parts:
            loss = part if loss is None else loss + part
        self._run.state.loss = loss
        self._fire(_E.AFTER_TRAIN_BATCH)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        run = self._run
        if run is None:
            return
        obs = run.state
        self._after_train_batch()  # a host that has no on_optimizer_step
        seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        tokens = seen - self._tokens_seen if seen > self._tokens_seen else self._tokens
        self._tokens_seen = seen
        if not self._samples:  # not wrapped: HF's configured batch
            world = int(getattr(args, "world_size", 1) or 1)
            self._samples = int(getattr(args, "train_batch_size", 0) or 0) * obs.grad_accum * world
        now = time.perf_counter()
        obs.batch_num_samples, obs.batch_num_tokens = self._samples, tokens
        obs.batch_num_flops = self._step_flops()
        obs.timestamp = obs.timestamp.to_next_batch(self._samples, tokens, now - self._mark)
        self._mark = now
        if obs.loss is not None:
            run.logger.log_metrics(loss_metrics(obs.loss))
        self._in_batch = False
        self._fire(_E.BATCH_END)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is None:
            return
        now = time.perf_counter()
        obs = self._run.state
        obs.timestamp = obs.timestamp.to_next_epoch(now - self._mark)
        self._mark = now
        self._fire(_E.EPOCH_END)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        run = self._run
        if run is None:
            return  # trainer.evaluate() outside train()
        metrics = kwargs.get("metrics") or {}
        label, prefix = eval_label(metrics)
        found = {
            key[len(prefix) :] if key.startswith(prefix) else key: value
            for key, value in metrics.items()
            if is_number(value) and key != "epoch"
        }
        run.state.eval_metrics.setdefault(label, {}).update(found)
        if found:
            run.logger.log_metrics({f"metrics/{label}/{k}": v for k, v in found.items()})
        saved = run.state.dataloader_label
        run.state.dataloader_label = label
        self._fire(_E.EVAL_END)
        run.state.dataloader_label = saved
        self._mark = time.perf_counter()  # evaluation is not the next step's time

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        if self._run is not None:
            self._fire(_E.BATCH_CHECKPOINT)
            self._mark = time.perf_counter()

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        logs: Mapping[str, Any] = kwargs.get("logs") or {}
        if self._run is None or not self.log_hf_logs:
            return
        values = {f"{self.hf_prefix}{k}": v for k, v in logs.items() if is_number(v)}
        if values:
            self._run.logger.log_metrics(values, step=int(state.global_step))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._control = control
        cm, self._fit_cm = self._fit_cm, None
        if self._run is None:
            return
        try:
            if cm is not None:
                cm.__exit__(None, None, None)
        finally:
            self._run.close()
