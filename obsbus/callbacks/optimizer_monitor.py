"""Gradient and parameter L2 norms, and zeros in gradients, in fused kernels at an interval."""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus._check import check_bool, check_int
from obsbus.callback import Callback
from obsbus.callbacks._norms import (
    _l2_norms,
    _layout,
    count_zeros,
    fused_l2_norms,
    fused_l2_norms_of_groups,
)
from obsbus.errors import ObsbusWarning
from obsbus.interval import LogInterval, at_interval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike

if TYPE_CHECKING:
    import torch

__all__ = ["OptimizerMonitor", "count_zeros", "fused_l2_norms", "fused_l2_norms_of_groups"]


def _trainable_parameters(state: State) -> list[tuple[str, torch.Tensor]]:
    """``(name, parameter)`` of every trainable parameter: the model's, else the optimizers'."""
    named = getattr(state.model, "named_parameters", None)
    if callable(named):
        return [(name, p) for name, p in named() if p.requires_grad]
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    for o, optimizer in enumerate(state.optimizers):
        for g, group in enumerate(getattr(optimizer, "param_groups", ())):
            for j, p in enumerate(group.get("params", ())):
                if id(p) not in seen and getattr(p, "requires_grad", False):
                    seen.add(id(p))
                    found.append((f"optimizer{o}.group{g}.{j}", p))
    return found


class OptimizerMonitor(Callback):
    """Logs the global gradient L2 norm (and optionally parameter norm and zeros) every interval.

    It reads the gradients at ``after_train_batch`` of a batch that logs
    (``epoch_end`` for an epoch interval), after the optimizer step, and logs
    them at ``batch_end``, at the batch's step (Composer reads them at
    ``batch_end``; Hugging Face's Trainer drops them in between, before its
    ``on_step_end``, and its bridge fires ``after_train_batch`` from
    ``on_optimizer_step``, while they exist). They are the
    batch's full gradients (every microbatch accumulated), after any
    in-place clipping the loop did. obsbus's :class:`~obsbus.Trainer` zeroes
    gradients at the start of the next batch so they survive until then; a
    hand-written loop that calls ``zero_grad(set_to_none=True)`` right after
    ``optimizer.step()`` leaves none, which is reported once (an
    :class:`~obsbus.ObsbusWarning`) and the ``grad`` keys are not logged.
    The parameter norm is of the parameters after the step.

    Cost: nothing on batches that are not due. On a due batch, one fused
    ``torch._foreach_norm`` per device over the gradients (and the
    parameters, with ``log_param_norm``, in the same call), one ``stack`` of
    its outputs, and one ``vector_norm`` for the global norms; the per-layer
    norms are the fused call's outputs, so they cost no extra kernel. The
    parameter list is looked up once per epoch. ``log_num_zeros`` adds one
    ``count_nonzero`` per gradient. Every value is logged as a tensor on the
    device, with no sync: the destinations turn them into numbers at their
    own interval. On the CPU, where a tensor is on the host already and
    reading it waits for nothing, the per-tensor norms are read and combined
    in Python (``math.hypot``) instead of by ``stack`` and ``vector_norm`` (a
    few µs against ~50): when every tensor shares one dtype class (the
    usual), the norms are then Python floats. When the
    parameters sit on several devices, each device's norm is computed where
    it lives and the results meet on the first accelerator.

    Which parameters: those of ``state.model.named_parameters()`` that
    require grad (frozen ones are left out of both norms); without a model,
    those of the optimizers, named ``optimizer{o}.group{g}.{j}``. Parameters
    with no gradient (unused this batch) are left out of the gradient keys.

    Distributed: every value is this rank's local one. Under DDP the
    gradients are all-reduced before the step, so the gradient norm is the
    global one on every rank, as is the parameter norm. Under FSDP,
    tensor or pipeline parallelism each rank holds a shard, so the values
    are those of the shard (square, sum over ranks and take the root for
    the global norm); a cross-rank reduction is not done here, and FSDP1's
    flattened parameters make the per-layer names those of the flat
    parameters.

    Keys (L2 norms are in the units of the gradients and parameters, as
    float32 0-d tensors, float64 when any tensor is float64; floats on the CPU, above;
    no unit is declared, so the console and the report show none):

    - ``l2_norm/grad/global``: the L2 norm of all gradients taken as one
      vector (what ``torch.nn.utils.get_total_norm`` returns).
    - ``l2_norm/grad/{name}``: each parameter's gradient norm, with
      ``log_per_layer=True``; ``name`` is the parameter's name in the model,
      e.g. ``l2_norm/grad/0.weight``.
    - ``l2_norm/param/global``: the L2 norm of all trainable parameters as one
      vector (Megatron's ``log_params_norm``), with ``log_param_norm=True``.
    - ``l2_norm/param/{name}``: each parameter's norm, with both
      ``log_param_norm`` and ``log_per_layer``.
    - ``num_zeros/grad/global``: the number of gradient elements that are
      exactly zero (Megatron's ``log_num_zeros_in_grad``; a count, int64),
      with ``log_num_zeros=True``.
    - whatever the first optimizer's ``report_per_parameter_metrics(param,
      name, metrics)`` adds, with ``log_optimizer_metrics=True`` (the
      default, as Composer) and an optimizer that has that method, such as
      Composer's ``DecoupledAdamW``: ``l2_norm/moment/{name}``,
      ``l2_norm/param/{name}``, ``l2_norm/update/{name}``,
      ``l2_norm/grad/{name}``. It is called for every parameter that has a
      gradient, on due batches only; a key the monitor computes itself
      keeps the monitor's value. torch's optimizers have no such method, so
      they add nothing. Composer's FSDP reduction of these
      (``pre_reduce_metrics``/``dist_reduce_metrics``) is not done: the
      values are this rank's.

    Composer's ``OptimizerMonitor`` logs ``l2_norm/grad/{name}`` for every
    parameter always; here that takes ``log_per_layer=True`` (off by
    default: a model with thousands of parameters would log thousands of
    keys per interval).

    Args:
        log_interval: ``"10ba"`` (default, as Composer) or ``"1ep"``; a bare
            int counts batches.
        log_per_layer: also log every parameter's norms.
        log_param_norm: also log the parameter norm (default off, as Primus's and
            Megatron's ``log_params_norm``: it reads every parameter once more,
            which doubles the monitor's work on a due step).
        log_num_zeros: log the number of zeros in the gradients.
        log_optimizer_metrics: also log the metrics of the optimizer's
            ``report_per_parameter_metrics`` (Composer's argument and default).
        batch_log_interval: Composer's name for the interval in batches:
            ``batch_log_interval=10`` is ``log_interval="10ba"``. Give one of
            the two.

    Example:
        >>> import torch
        >>> from obsbus import Trainer
        >>> from obsbus.loggers import InMemoryLogger
        >>> data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
        >>> mem = InMemoryLogger()
        >>> with Trainer(torch.nn.Linear(4, 1), data, "4ba", loss_fn=torch.nn.functional.mse_loss,
        ...              callbacks=[OptimizerMonitor("2ba", log_per_layer=True,
        ...                                          log_param_norm=True)],
        ...              loggers=[mem], device="cpu") as trainer:
        ...     trainer.fit()
        >>> mem.get_timeseries("l2_norm/grad/global")["step"]
        [2, 4]
        >>> sorted(k for k in mem.most_recent_values if k.startswith("l2_norm/"))
        ['l2_norm/grad/bias', 'l2_norm/grad/global', 'l2_norm/grad/weight',
         'l2_norm/param/bias', 'l2_norm/param/global', 'l2_norm/param/weight']
    """

    def __init__(
        self,
        log_interval: TimeLike = "10ba",
        log_per_layer: bool = False,
        log_param_norm: bool = False,
        log_num_zeros: bool = False,
        *,
        log_optimizer_metrics: bool = True,
        batch_log_interval: int | None = None,
    ) -> None:
        cls = "OptimizerMonitor"
        if isinstance(log_interval, bool):  # OptimizerMonitor(False): Composer's first argument
            raise TypeError(
                f"{cls} log_interval must be a time such as '10ba', got {log_interval!r}. "
                "Composer's first argument is log_optimizer_metrics; obsbus's is log_interval. "
                f"To fix, write OptimizerMonitor(log_optimizer_metrics={log_interval!r})."
            )
        if batch_log_interval is not None:
            batches = check_int(cls, "batch_log_interval", batch_log_interval, minimum=1)
            if log_interval != "10ba":
                raise ValueError(
                    f"{cls}: batch_log_interval={batches!r} and log_interval={log_interval!r} "
                    "both set the interval. To fix, give one: batch_log_interval is Composer's "
                    f"name for log_interval='{batches}ba'."
                )
            log_interval = f"{batches}ba"
        self.log_interval = LogInterval(log_interval, f"{cls} log_interval")
        for name, value in (
            ("log_per_layer", log_per_layer),
            ("log_param_norm", log_param_norm),
            ("log_num_zeros", log_num_zeros),
            ("log_optimizer_metrics", log_optimizer_metrics),
        ):
            check_bool(cls, name, value)
        self.log_per_layer = log_per_layer
        self.log_param_norm = log_param_norm
        self.log_num_zeros = log_num_zeros
        self.log_optimizer_metrics = log_optimizer_metrics
        self.batch_log_interval = self.log_interval.batches or None
        self._warned_no_grads = False
        self._read_at: tuple[int, dict[str, Any]] | None = None
        self._params: list[tuple[str, torch.Tensor]] | None = None
        self._params_model: object = None
        self._layout: tuple[torch.device, Any] | None = None
        self._layout_of: Any = None  # the first parameter's (dtype, device) for _layout

    def _parameters(self, state: State) -> list[tuple[str, torch.Tensor]]:
        """The trainable parameters, looked up once per epoch (or when the model changes)."""
        params = self._params
        if params is None or self._params_model is not state.model:
            params = self._params = _trainable_parameters(state)
            self._params_model = state.model
            self._layout_of = None
        if params:
            first = params[0][1]
            key = (first.dtype, first.device)
            if key != self._layout_of:
                # A gradient has its parameter's device and dtype: one layout serves both.
                # Found again when the first parameter moves or changes dtype (model.half()).
                self._layout = _layout([p for _, p in params])
                self._layout_of = key
        return params

    @override
    def epoch_start(self, state: State, logger: Logger) -> None:
        self._params = None  # parameters frozen or unfrozen between epochs are seen

    def _metrics(self, state: State, batch: int) -> dict[str, Any]:
        import torch

        params = self._parameters(state)
        metrics: dict[str, Any] = {}
        if not params:
            return metrics
        named_grads = [(name, p.grad) for name, p in params if p.grad is not None]
        grads = [g for _, g in named_grads]
        # no_grad only for tensors autograd would record (the parameters; gradients made
        # with create_graph=True): entering it costs ~6 µs, more than the rest here.
        recorded = self.log_param_norm or any(g.requires_grad for g in grads)
        with torch.no_grad() if recorded else contextlib.nullcontext():
            groups = ([grads] if grads else []) + (
                [[p for _, p in params]] if self.log_param_norm else []
            )
            # one fused call for both (none at all without gradients or parameter norm)
            totals, each = (
                _l2_norms(groups, read_cpu=True, layout=self._layout) if groups else ([], [])
            )
            if grads:
                metrics["l2_norm/grad/global"] = totals[0]
                if self.log_per_layer:
                    for (name, _), norm in zip(named_grads, each, strict=False):
                        metrics[f"l2_norm/grad/{name}"] = norm
                if self.log_num_zeros:
                    metrics["num_zeros/grad/global"] = count_zeros(grads)
            elif not self._warned_no_grads:
                self._warned_no_grads = True
                warnings.warn(
                    f"OptimizerMonitor: no trainable parameter has a gradient at batch "
                    f"{batch}, so no l2_norm/grad keys are logged. It reads "
                    "gradients after optimizer.step(), at after_train_batch. To fix, call "
                    "optimizer.zero_grad() at the start of each step (before the forward "
                    "pass), not right after optimizer.step().",
                    ObsbusWarning,
                    stacklevel=3,
                )
            if self.log_param_norm:
                metrics["l2_norm/param/global"] = totals[-1]
                if self.log_per_layer:
                    param_norms = each[len(grads) :]
                    for (name, _), norm in zip(params, param_norms, strict=True):
                        metrics[f"l2_norm/param/{name}"] = norm
        return metrics

    def _optimizer_metrics(self, state: State, metrics: dict[str, Any]) -> None:
        """Add what the first optimizer's ``report_per_parameter_metrics`` reports (Composer)."""
        optimizers = state.optimizers
        report = (
            getattr(optimizers[0], "report_per_parameter_metrics", None) if optimizers else None
        )
        if not callable(report):
            return
        import torch

        reported: dict[str, Any] = {}
        with torch.no_grad():
            for name, p in self._parameters(state):
                if p.grad is not None:
                    reported = report(p, name, reported) or reported
        for key, value in reported.items():
            metrics.setdefault(key, value)

    def _read(self, state: State, batch: int) -> dict[str, Any]:
        metrics = self._metrics(state, batch)
        if self.log_optimizer_metrics:
            self._optimizer_metrics(state, metrics)
        return metrics

    def _log(self, state: State, logger: Logger, metrics: dict[str, Any] | None = None) -> None:
        metrics = self._read(state, state.timestamp._batch) if metrics is None else metrics
        if metrics:
            logger.log_metrics(metrics)

    @override
    @at_interval("log_interval")
    def after_train_batch(self, state: State, logger: Logger) -> None:
        every = self.log_interval.batches
        batch = state.timestamp._batch + 1  # counted before batch_end
        if every and batch % every == 0:
            self._read_at = (batch, self._read(state, batch))

    @override
    @at_interval("log_interval")
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_batch_end(state):
            read_at, self._read_at = self._read_at, None
            if read_at is not None and read_at[0] == state.timestamp._batch:
                self._log(state, logger, read_at[1])
            else:  # a loop that fires no after_train_batch
                self._log(state, logger)

    @override
    @at_interval("log_interval")
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval.at_epoch_end(state):
            self._log(state, logger)
