"""The reference PyTorch training loop: small, real, and fires every event."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TextIO

import torch

from obsbus._batch import split_batch
from obsbus._check import check_callable, check_mapping
from obsbus._composer_trainer_args import refuse_unknown_trainer_args
from obsbus._metrics import Metrics, check_metrics
from obsbus._run_args import (
    check_callbacks,
    check_device,
    check_duration,
    check_loggers,
    check_optimizers,
    check_profiler,
)
from obsbus._state_args import check_precision
from obsbus._trainer_args import (
    autocast_for,
    check_precision_on,
    check_subset,
    console_destinations,
    grad_scaler_for,
    subset,
)
from obsbus.callback import Callback
from obsbus.logger import LoggerDestination
from obsbus.run import EvalInterval, Run, _check_eval_interval
from obsbus.run_folder import RunFolder
from obsbus.state import State
from obsbus.time import TimeLike, Timestamp

__all__ = ["Trainer"]


def _is_loader(value: object) -> bool:
    """An iterable of batches: not a str, a number or None."""
    return hasattr(value, "__iter__") and not isinstance(value, (str, bytes))


def _check_eval_dataloaders(value: object) -> dict[str, Iterable[Any]]:
    """``eval_dataloader`` as ``{label: dataloader}``."""
    accepted = "a dataloader (an iterable of batches), a dict {label: dataloader} or None"
    if value is None:
        return {}
    if isinstance(value, Mapping):
        for label, loader in value.items():
            if not isinstance(label, str) or not label:
                raise TypeError(
                    f"Trainer eval_dataloader must be {accepted}; the label {label!r} is not a "
                    "non-empty str."
                )
            if not _is_loader(loader):
                raise TypeError(
                    f"Trainer eval_dataloader must be {accepted}; {label!r} holds {loader!r}."
                )
        return dict(value)
    if not _is_loader(value):
        raise TypeError(f"Trainer eval_dataloader must be {accepted}, got {value!r}.")
    if isinstance(value, (list, tuple)) and value and all(_is_data_loader(v) for v in value):
        labels = ", ".join(f"'eval{i}': dl{i}" for i in range(1, len(value) + 1))
        raise TypeError(
            f"Trainer eval_dataloader got a {type(value).__name__} of {len(value)} DataLoaders; "
            "obsbus names each evaluation by its label (metrics/{label}/...), as Composer's "
            f"Evaluator(label=...) does. To fix, pass a dict: eval_dataloader={{{labels}}}."
        )
    return {"eval": value}  # type: ignore[dict-item]


def _is_data_loader(value: object) -> bool:
    """A ``torch.utils.data.DataLoader`` (a list of batches is one dataloader, not many)."""
    from torch.utils.data import DataLoader

    return isinstance(value, DataLoader)


class Trainer:
    """Train a ``torch.nn.Module`` with every obsbus event fired in order.

    The event order is documented on :class:`~obsbus.Event`. The Trainer is
    built on :class:`~obsbus.Run`, so a hand-written loop under ``Run`` sees
    the same events and ``State``.

    Args:
        model: the module. With ``loss_fn``, batches are ``(inputs, targets)``
            and the loss is ``loss_fn(model(inputs), targets)``; without it,
            the loss is ``model.loss(outputs, batch)``, ``outputs["loss"]`` or
            ``outputs.loss`` (Hugging Face style), with ``outputs = model(batch)``.
        train_dataloader: any iterable of batches (tensors, tuples, dicts).
        max_duration: when to stop: ``"2ep"``, ``"100ba"``, ``"10000sp"``,
            ``"1e6tok"``, ``"10m"``; a bare int means epochs. May be left out
            and given to ``fit(duration=...)`` instead, as in Composer.
        optimizers: an optimizer or a list; default ``AdamW(lr=1e-3)``.
        schedulers: LR schedulers, stepped after every batch.
        loss_fn: see ``model``.
        eval_dataloader: one dataloader, or ``{label: dataloader}`` (labels are str).
        eval_interval: ``"1ep"``, ``"500ba"`` or ``f(state, event) -> bool``.
        callbacks: monitors and other :class:`~obsbus.Callback` s (one, a list, or ``None``).
        loggers: :class:`~obsbus.LoggerDestination` s (one, a list, or ``None``).
        profiler: an :class:`obsbus.profiler.Profiler` to trace a window of the run.
        run_name: the run's name (default: ``{user}-{time}-{pid}``).
        device: ``"cpu"``, ``"cuda"``, ... (default: CUDA if available).
        grad_accum: microbatches per batch; the batch is split along dim 0.
        num_samples_fn: samples in a batch (default: first tensor's dim 0).
        num_tokens_fn: tokens in a batch (default: ``input_ids.numel()``, else 0).
        hparams: extra hyperparameters to log.
        run_folder: where the run's files go: a path or a
            :class:`~obsbus.RunFolder` (default ``./runs/default/{user}/{run_name}``).
        strict: make destination failures raise (for tests).
        progress_bar: add a :class:`~obsbus.loggers.ProgressBarLogger` on
            ``console_stream`` unless ``loggers`` has one (Composer's default, True).
            It shows progress and speed, not the loss: showing a value turns
            it into a number, a device sync, and this default never syncs on a
            step that does not log. For the loss in the bar, pass
            ``loggers=[ProgressBarLogger()]`` (it refreshes at most once a second).
        log_to_console: add a :class:`~obsbus.loggers.ConsoleLogger` printing
            every ``console_log_interval`` (default ``"1ba"``, Composer's; a bare
            int is epochs) on ``console_stream`` unless ``loggers`` has one.
        console_stream: ``"stderr"`` (default), ``"stdout"`` or a text stream.
        log_traces: the console destinations print traces too.
        precision: ``"fp32"`` (default), ``"amp_bf16"`` or ``"amp_fp16"``: the
            forward and the loss run under ``torch.autocast`` in that dtype
            (CPU autocast for bf16 on the CPU; fp16 needs a GPU and gets a
            ``torch.amp.GradScaler``). ``state.precision`` says which, and
            :class:`~obsbus.callbacks.SpeedMonitor` sees the autocast for MFU.
        train_subset_num_batches: end every epoch after this many batches
            (``-1``, the default: the whole dataloader).
        eval_subset_num_batches: evaluate this many batches of each eval
            dataloader (``-1``: all of them).
        train_metrics: torchmetrics-style metrics updated with every training
            (micro)batch (see :class:`~obsbus.Run`): ``metric.update(outputs,
            targets)``, targets being ``batch[1]`` (or ``batch["labels"]``), or
            the model's Composer-style ``update_metric(batch, outputs, metric)``.
        eval_metrics: the same, for every eval dataloader (a copy per label).
        train_metrics_interval: how often train metrics are computed and logged.
        timestamp: where a resumed run starts (see :class:`~obsbus.Run`).

    Example:
        >>> import torch
        >>> from obsbus.loggers import InMemoryLogger
        >>> data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
        >>> mem = InMemoryLogger()
        >>> with Trainer(torch.nn.Linear(4, 1), data, "2ep", loss_fn=torch.nn.functional.mse_loss,
        ...              eval_dataloader=data, loggers=[mem], device="cpu") as trainer:
        ...     trainer.fit()
        >>> trainer.state.timestamp.batch, len(mem.get_timeseries("metrics/eval/loss")["batch"])
        (Time(8, 'ba'), 2)
    """

    def __init__(
        self,
        model: torch.nn.Module,
        train_dataloader: Iterable[Any],
        max_duration: TimeLike | None = None,
        optimizers: Any = None,
        schedulers: Any = None,
        loss_fn: Callable[..., Any] | None = None,
        eval_dataloader: Iterable[Any] | Mapping[str, Iterable[Any]] | None = None,
        eval_interval: EvalInterval = "1ep",
        callbacks: Callback | Iterable[Callback] | None = (),
        loggers: LoggerDestination | Iterable[LoggerDestination] | None = (),
        profiler: Any = None,
        run_name: str | None = None,
        device: str | torch.device | None = None,
        grad_accum: int = 1,
        *,
        num_samples_fn: Callable[[Any], int] | None = None,
        num_tokens_fn: Callable[[Any], int] | None = None,
        hparams: dict[str, Any] | None = None,
        run_folder: str | os.PathLike[str] | RunFolder | None = None,
        strict: bool = False,
        progress_bar: bool = True,
        log_to_console: bool = False,
        console_stream: str | TextIO = "stderr",
        console_log_interval: TimeLike = "1ba",
        log_traces: bool = False,
        precision: str | None = None,
        train_subset_num_batches: int = -1,
        eval_subset_num_batches: int = -1,
        train_metrics: Metrics | None = None,
        eval_metrics: Metrics | None = None,
        train_metrics_interval: TimeLike = "1ba",
        timestamp: Timestamp | None = None,
        **composer_only: Any,
    ) -> None:
        if composer_only:  # Composer's checkpoint/algorithm arguments: say what to write instead
            refuse_unknown_trainer_args(composer_only, inspect.signature(Trainer).parameters)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Trainer model must be a torch.nn.Module, got {model!r}.")
        if not _is_loader(train_dataloader):
            raise TypeError(
                "Trainer train_dataloader must be an iterable of batches, got "
                f"{train_dataloader!r}."
            )
        # What fit() would only trip over later (a loss_fn that can't be called, an eval
        # loader that isn't one, an optimizer that isn't one) is refused here, by name.
        duration = (
            None
            if max_duration is None
            else check_duration("Trainer", "max_duration", max_duration)
        )
        check_optimizers("Trainer", optimizers, schedulers)
        self.loss_fn: Callable[..., Any] | None = check_callable("Trainer", "loss_fn", loss_fn)
        self.eval_dataloaders = _check_eval_dataloaders(eval_dataloader)
        _check_eval_interval(eval_interval, "Trainer")
        callbacks = check_callbacks("Trainer", callbacks)
        loggers = check_loggers("Trainer", loggers)
        loggers += console_destinations(
            loggers,
            progress_bar=progress_bar,
            log_to_console=log_to_console,
            console_stream=console_stream,
            console_log_interval=console_log_interval,
            log_traces=log_traces,
        )
        check_profiler("Trainer", profiler)
        checked = check_device("Trainer", "device", device)
        self.device = (
            checked
            if checked is not None
            else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
        self.precision = check_precision_on(check_precision("Trainer", precision), self.device)
        self._scaler = grad_scaler_for(self.precision, self.device)
        self.train_subset_num_batches = check_subset(
            "train_subset_num_batches", train_subset_num_batches
        )
        self.eval_subset_num_batches = check_subset(
            "eval_subset_num_batches", eval_subset_num_batches
        )
        model.to(self.device)
        self.model = model
        self.train_dataloader = train_dataloader
        if optimizers is None:
            optimizers = torch.optim.AdamW(model.parameters(), lr=1e-3)
        info = {
            **({} if duration is None else {"max_duration": str(duration)}),
            "grad_accum": grad_accum,
            "device": str(self.device),
            "precision": self.precision,
            "optimizers": [
                type(o).__name__
                for o in (optimizers if isinstance(optimizers, (list, tuple)) else [optimizers])
            ],
        }
        self._run = Run(
            model=model,
            optimizers=optimizers,
            schedulers=schedulers,
            max_duration=duration,
            callbacks=callbacks,
            loggers=loggers,
            run_name=run_name,
            device=self.device,
            grad_accum=grad_accum,
            hparams={**info, **check_mapping("Trainer", "hparams", hparams)},
            run_folder=run_folder,
            num_samples_fn=num_samples_fn,
            num_tokens_fn=num_tokens_fn,
            eval_interval=eval_interval if self.eval_dataloaders else None,
            eval_fn=self._evaluate if self.eval_dataloaders else None,
            profiler=profiler,
            strict=strict,
            train_metrics=check_metrics("Trainer", "train_metrics", train_metrics),
            eval_metrics=check_metrics("Trainer", "eval_metrics", eval_metrics),
            train_metrics_interval=train_metrics_interval,
            precision=self.precision,
            timestamp=timestamp,
        )

    @property
    def state(self) -> State:
        return self._run.state

    @property
    def run(self) -> Run:
        """The :class:`~obsbus.Run` this trainer drives (its logger and engine)."""
        return self._run

    @property
    def logger(self) -> Any:
        return self._run.logger

    @property
    def engine(self) -> Any:
        return self._run.engine

    def fit(self, *, duration: TimeLike | None = None) -> None:
        """Train until ``max_duration``; ``duration`` trains that much more from now.

        Without a ``max_duration`` at construction, ``duration`` is the
        first one (Composer's ``fit(duration=...)``).
        """
        state = self.state
        if duration is not None:
            extra = check_duration("Trainer.fit", "duration", duration)
            state.max_duration = state.timestamp.get(extra.unit) + extra
        elif state.max_duration is None:
            raise ValueError(
                "Trainer.fit: no max_duration: pass Trainer(..., max_duration='2ep') or "
                "fit(duration='2ep')."
            )
        loader = subset(self.train_dataloader, self.train_subset_num_batches)
        with self._run.fitting():
            for batch in self._run.train(loader):
                self._train_batch(batch)

    def _train_batch(self, batch: Any) -> None:
        run, state, scaler = self._run, self.state, self._scaler
        if not self.model.training:
            self.model.train()
        for opt in state.optimizers:
            opt.zero_grad(set_to_none=True)
        total = state.batch_num_samples
        # Every step's path: as few calls as it takes (bench/RESULTS.md, issue 20).
        train_metrics = bool(run._train_metrics.metrics)
        micros = [batch] if state.grad_accum == 1 else split_batch(batch, state.grad_accum)
        for micro in micros:
            weight = run._num_samples(micro) / total if total and len(micros) > 1 else None
            inputs = micro[0] if self.loss_fn is not None else micro
            if self.precision == "fp32":  # no autocast, so not even a nullcontext
                outputs = run.forward(self.model, inputs)
                loss = run.loss(self._compute_loss, outputs, micro, weight=weight)
            else:
                # after_forward and after_loss fire inside the autocast, so monitors see it.
                with autocast_for(self.precision, self.device):
                    outputs = run.forward(self.model, inputs)
                    loss = run.loss(self._compute_loss, outputs, micro, weight=weight)
            if train_metrics:  # no_grad costs ~6 µs to enter: only when there is work
                with torch.no_grad():
                    run._update_metrics_from(self.model, micro, outputs)
            loss = loss if weight is None else loss * weight
            run.backward(loss if scaler is None else scaler.scale(loss))
        for opt in state.optimizers:
            if scaler is None:
                opt.step()
            else:
                scaler.step(opt)
        if scaler is not None:
            scaler.update()
        for sched in state.schedulers:
            sched.step()

    def _compute_loss(self, outputs: Any, batch: Any) -> Any:
        if self.loss_fn is not None:
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                raise TypeError(
                    "With loss_fn, batches must be (inputs, targets) pairs; got a "
                    f"{type(batch).__name__}. To fix, yield (inputs, targets) or drop loss_fn "
                    "and give the model a loss(outputs, batch) method."
                )
            return self.loss_fn(outputs, batch[1])
        model_loss = getattr(self.model, "loss", None)
        if callable(model_loss):
            return model_loss(outputs, batch)
        if isinstance(outputs, Mapping) and "loss" in outputs:
            return outputs["loss"]
        if getattr(outputs, "loss", None) is not None:
            return outputs.loss
        raise TypeError(
            f"Cannot compute a loss for {type(self.model).__name__}: no loss_fn was given, the "
            "model has no loss(outputs, batch) method and its outputs carry no 'loss'. "
            "To fix, pass loss_fn=..."
        )

    def _evaluate(self, run: Run) -> None:
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for label, loader in self.eval_dataloaders.items():
                    for batch in run.eval(subset(loader, self.eval_subset_num_batches), label):
                        inputs = batch[0] if self.loss_fn is not None else batch
                        with autocast_for(self.precision, self.device):
                            outputs = run.forward(self.model, inputs)
                            run.loss(self._compute_loss, outputs, batch)
                        run._update_metrics_from(self.model, batch, outputs)
        finally:
            self.model.train(was_training)

    def eval(
        self, eval_dataloader: Iterable[Any] | None = None, label: str = "eval"
    ) -> dict[str, dict[str, Any]]:
        """Evaluate outside fit (``eval_standalone_start`` ... ``eval_standalone_end``).

        Evaluates ``eval_dataloader`` if given, else every eval dataloader of the
        trainer. Returns ``state.eval_metrics``.
        """
        loaders = {label: eval_dataloader} if eval_dataloader is not None else self.eval_dataloaders
        if not loaders:
            raise ValueError(
                "No eval dataloader: pass one to eval() or to Trainer(eval_dataloader=...)."
            )
        saved, self.eval_dataloaders = self.eval_dataloaders, dict(loaders)
        try:
            with self._run.evaluating():
                self._evaluate(self._run)
        finally:
            self.eval_dataloaders = saved
        return self.state.eval_metrics

    def predict(self, dataloader: Iterable[Any]) -> list[Any]:
        """Run the model over ``dataloader``; return every batch's outputs (detached)."""
        outputs: list[Any] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with self._run.guard(), torch.no_grad():
                for batch in self._run.predict(dataloader):
                    inputs = (
                        batch[0]
                        if self.loss_fn is not None and isinstance(batch, (tuple, list))
                        else batch
                    )
                    with autocast_for(self.precision, self.device):
                        outputs.append(self._run.forward(self.model, inputs))
        finally:
            self.model.train(was_training)
        return outputs

    def close(self) -> None:
        """Close every callback and destination (idempotent)."""
        self._run.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
