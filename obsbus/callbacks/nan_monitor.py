"""Find the first batch whose loss (or gradient) is not finite, without a host sync per step."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus import dist
from obsbus.callback import Callback
from obsbus.callbacks._kept_losses import _READ_ALL_MAX, NONE_BAD, KeptLosses
from obsbus.errors import ObsbusError
from obsbus.interval import LogInterval, at_interval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike
from obsbus.values import to_host

if TYPE_CHECKING:
    import torch

__all__ = ["NaNMonitor", "NonFiniteLossError"]

log = logging.getLogger("obsbus")

#: ``reader(state, logger, batches, losses)``: what NaNMonitor.read_losses_with takes.
LossReader = Callable[[State, Logger, list[int], list[float]], None]

MODES = ("deferred", "immediate")
SOURCES = ("loss", "gradient")  # in the order a tie is named
ON_NAN = ("raise", "stop", "log")


class NonFiniteLossError(ObsbusError, RuntimeError):
    """The training loss, or the gradient, became NaN or infinite.

    A ``RuntimeError``, as what Composer's ``NaNMonitor`` raises, so an
    ``except RuntimeError`` written for Composer catches it.

    Attributes:
        batch: the first batch whose value was not finite, counted from 1 (the
            ``step`` its ``loss/train/total`` is logged at).
        source: ``"loss"`` or ``"gradient"``.
        checked_at: the batch after which the check found it (``batch`` in
            ``immediate`` mode).
        ranks: on several ranks, the ranks where it happened first; else ``()``.

    Example:
        >>> err = NonFiniteLossError(7, "loss", checked_at=100)
        >>> err.batch, err.source
        (7, 'loss')
        >>> print(err)
        Train loss contains a NaN. NaNMonitor saw a NaN or Inf loss first at batch 7, found by the
        check after batch 100. To stop at the bad batch itself, use
        NaNMonitor(mode='immediate') (a host sync per microbatch).
    """

    def __init__(
        self,
        batch: int,
        source: str = "loss",
        checked_at: int | None = None,
        ranks: Sequence[int] = (),
    ) -> None:
        self.batch = batch
        self.source = source
        self.checked_at = batch if checked_at is None else checked_at
        self.ranks = tuple(ranks)
        # Composer's sentence first ("Train loss contains a NaN."): code that looks for it
        # (its tests do) still finds it; the rest says what obsbus knows.
        lead = "Train loss contains a NaN." if source == "loss" else f"A {source} is not finite."
        message = f"{lead} NaNMonitor saw a NaN or Inf {source} first at batch {batch}"
        if self.ranks:
            message += f" on rank{'s' if len(self.ranks) > 1 else ''} "
            message += ", ".join(map(str, self.ranks))
        if self.checked_at != batch:
            message += (
                f", found by the check after batch {self.checked_at}. To stop at the bad batch "
                "itself, use NaNMonitor(mode='immediate') (a host sync per microbatch)"
            )
        super().__init__(message + ".")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.batch, self.source, self.checked_at, self.ranks))


def _flatten(value: Any, tensors: list[Any], numbers: list[float]) -> None:
    """The tensors and Python numbers in a loss: a tensor, a mapping or a sequence of them."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        tensors.append(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        numbers.append(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _flatten(item, tensors, numbers)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _flatten(item, tensors, numbers)


class NaNMonitor(Callback):
    """Stops, or reports, a run whose loss goes NaN or Inf, naming the first bad batch.

    The check costs no host sync on most steps (Megatron and Primus sync on
    every step for theirs), and no kernel either: at ``after_train_batch``
    the batch's loss (``state.loss``, which ``Run`` has already detached: the
    mean or weighted sum of the microbatch losses, what it logs as
    ``loss/train/total``; non-finite exactly when a microbatch loss is, short
    of a sum that overflows) is kept with its batch number. Every
    ``check_interval``, and at ``fit_end``, the kept losses are stacked and
    read back, one transfer per device (small CPU tensors are read where
    they are), and the first bad batch is found on the host. Past 4096 kept
    values on one device (a long interval; a dict loss keeps one per
    part) they are summed in float64 on their device first (a sum is
    finite exactly when every part is) and only that sum is read; only
    when it is not finite does a second read search the kept values for
    the first bad batch. Every 256 kept losses are stacked
    into one tensor, so memory stays at a few bytes per batch however long
    the interval. The price is latency: a run may train up to
    ``check_interval`` batches past the bad one (on NaN weights) before it
    hears of it. A loss that is a
    dict, list or tuple of tensors (or nested) is bad if any part is; a
    Python number is checked on the host. Loops that never call
    ``run.loss`` and only set ``state.loss`` are checked the same way.
    Evaluation losses are not checked.

    ``mode="immediate"`` checks each microbatch loss at ``after_loss`` and
    reads the flag back at once: a
    host sync each time. With ``on_nan="raise"`` the run stops inside the
    bad batch, before its backward pass and optimizer step, so the weights
    are still finite. For debugging.

    With ``check_grad_norm=True`` the gradients are checked too, at every
    ``after_backward``: one fused ``torch._foreach_norm(grads, inf)`` per
    device and dtype (the max-abs norm, which can't overflow, so a large
    finite gradient is never reported), folded into a second flag. It reads
    every gradient once per microbatch. (Gradient checks, and
    ``immediate`` mode, fold into a device-side int64 holding the first bad
    batch: ``where(ok, acc, acc.clamp(max=batch))``, no transfer.)

    On detection: ``on_nan="raise"`` raises :class:`NonFiniteLossError`
    (the ``exception`` event runs, then the error reaches the caller);
    ``"stop"`` logs a warning and calls ``state.stop_training()``, so the
    run ends after the current batch (which finishes, optimizer step
    included) and ``fit_end`` runs; ``"log"`` logs a
    warning and goes on, and each later check reports the first bad batch
    since the one before. When the run fails for another reason, the
    ``exception`` event still reports what went non-finite before.

    On several ranks (``torch.distributed`` initialized) each check also
    does one ``all_reduce`` of a ``[world_size, 2]`` int64 table, so every
    rank acts at the same check, on the earliest bad batch of any rank, and
    the error names the ranks where it happened first. Every rank must then
    run the monitor with the same settings. At ``exception`` only this
    rank's flags are read (no collective).

    Keys:

    - ``nan/first_bad_batch``: the first batch (counted from 1, as the
      ``step`` of ``loss/train/total``) since the previous check whose loss
      or gradient was not finite. Logged only when one was found, at the
      step of the check.

    Args:
        check_interval: how often the flag is read in ``deferred`` mode
            (``"100ba"``, ``"1ep"``; a bare int counts batches). A read is one
            small transfer that waits for the step to finish.
        mode: ``"deferred"`` (the default) or ``"immediate"``.
        on_nan: ``"raise"`` (the default), ``"stop"`` or ``"log"``.
        check_grad_norm: also check the gradients after each backward.

    Example:
        >>> import torch
        >>> from obsbus import Run
        >>> batches = [torch.tensor([0.5]), torch.tensor([float("nan")]), torch.tensor([0.4])]
        >>> try:
        ...     with Run(max_duration="3ba", callbacks=[NaNMonitor("100ba")]) as run:
        ...         for x in run.train(batches):
        ...             loss = run.loss(torch.mean, x)
        ... except NonFiniteLossError as err:
        ...     print(err.batch, err.checked_at)
        2 3
    """

    def __init__(
        self,
        check_interval: TimeLike = "100ba",
        *,
        mode: str = "deferred",
        on_nan: str = "raise",
        check_grad_norm: bool = False,
    ) -> None:
        self.check_interval = LogInterval(check_interval, "NaNMonitor check_interval")
        if mode not in MODES:
            raise ValueError(
                f"NaNMonitor mode must be 'deferred' (check every check_interval) or "
                f"'immediate' (check every microbatch, with a host sync), got {mode!r}."
            )
        if on_nan not in ON_NAN:
            raise ValueError(
                f"NaNMonitor on_nan must be 'raise', 'stop' (stop_training() after the batch) "
                f"or 'log' (warn and go on), got {on_nan!r}."
            )
        if not isinstance(check_grad_norm, bool):
            raise TypeError(
                f"NaNMonitor check_grad_norm must be True or False, got {check_grad_norm!r}."
            )
        self._mode = mode
        self.on_nan = on_nan
        self._check_grad_norm = check_grad_norm
        self._immediate = mode == "immediate"
        self._skip_idle_hooks()
        # (source, device) -> int64 0-d tensor: the first bad batch, or NONE_BAD.
        self._flags: dict[tuple[str, Any], torch.Tensor] = {}
        self._host_first_bad: int = NONE_BAD  # losses given as Python numbers
        self._losses = KeptLosses()  # deferred mode: the losses since the last check
        self._unchecked = False  # something was folded since the last check
        self._folded_batch = -1
        self._readers: list[LossReader] = []  # LossSpikeDetector: the losses each check read

    def _skip_idle_hooks(self) -> None:
        """Hooks with nothing to do in this configuration are not dispatched at all.

        An instance attribute holding the base class's (empty) hook makes the
        engine skip it (see :func:`obsbus.engine.overrides`), saving a call on
        every (micro)batch. The hooks also check for themselves, so a copy
        that lost these attributes still behaves.
        """
        if not self._immediate:
            self.after_loss = super().after_loss  # type: ignore[method-assign]
        if not self._check_grad_norm:
            self.after_backward = super().after_backward  # type: ignore[method-assign]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("after_loss", None)  # bound methods of self: rebuilt on unpickling
        state.pop("after_backward", None)
        state["_readers"] = []  # bound methods of other plug-ins: they register at init
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._skip_idle_hooks()

    def read_losses_with(self, reader: LossReader) -> None:
        """Hand ``reader(state, logger, batches, losses)`` the host losses of every check.

        For plug-ins that test the loss curve with no device read of their own
        (:class:`~obsbus.callbacks.LossSpikeDetector`): each check passes the
        batch numbers and float losses it read, in order (a dict or list loss as
        the sum of its tensors). Deferred mode only, with ``check_interval`` at
        most 4096 batches (past that a check reads only a sum of the losses).
        """
        if self._immediate:
            raise ValueError(
                "NaNMonitor(mode='immediate') reads a finite flag, not the losses, so no loss "
                "curve can be handed on. To fix, use NaNMonitor(mode='deferred') (the default)."
            )
        if self.check_interval.batches > _READ_ALL_MAX:
            raise ValueError(
                f"NaNMonitor check_interval {str(self.check_interval.time)!r} reads only a sum "
                f"of the losses past {_READ_ALL_MAX} batches, so no loss curve can be handed "
                f"on. To fix, use a check_interval of at most '{_READ_ALL_MAX}ba'."
            )
        if reader not in self._readers:
            self._readers.append(reader)

    @property
    def mode(self) -> str:
        """``"deferred"`` or ``"immediate"``, fixed at construction."""
        return self._mode

    @property
    def check_grad_norm(self) -> bool:
        """Whether gradients are checked too, fixed at construction."""
        return self._check_grad_norm

    # ------------------------------------------------------------------ fold
    def _flag(self, source: str, device: Any) -> torch.Tensor:
        flag = self._flags.get((source, device))
        if flag is None:
            import torch

            flag = torch.full((), NONE_BAD, dtype=torch.int64, device=device)
            self._flags[source, device] = flag
        return flag

    def _fold(self, source: str, oks: list[torch.Tensor], batch: int) -> None:
        import torch

        by_device: dict[Any, list[torch.Tensor]] = {}
        for ok in oks:
            by_device.setdefault(ok.device, []).append(ok)
        for device, flags in by_device.items():
            ok = flags[0] if len(flags) == 1 else torch.stack(flags).all()
            acc = self._flag(source, device)
            torch.where(ok, acc, acc.clamp(max=batch), out=acc)
        self._unchecked = True

    def _fold_loss(self, loss: Any, batch: int) -> None:
        torch_module = sys.modules.get("torch")
        if not self._immediate and torch_module is not None and type(loss) is torch_module.Tensor:
            self._losses.keep(batch, loss)  # the usual: one loss tensor, Run's, detached
            self._unchecked = True
            self._folded_batch = batch
            return
        tensors: list[Any] = []
        numbers: list[float] = []
        _flatten(loss, tensors, numbers)
        if numbers and any(not math.isfinite(n) for n in numbers):
            self._host_first_bad = min(self._host_first_bad, batch)
            self._unchecked = True
        if tensors and not self._immediate:
            for t in tensors:
                self._losses.keep(batch, t)
            self._unchecked = True
        elif tensors:
            import torch

            oks = []
            for t in tensors:
                finite = torch.isfinite(t.detach())
                oks.append(finite.reshape(()) if t.numel() == 1 else finite.all())
            self._fold("loss", oks, batch)
        self._folded_batch = batch

    @override
    def after_loss(self, state: State, logger: Logger) -> None:
        if self._immediate and state.loss is not None:  # deferred: once a batch, below
            self._fold_loss(state.loss, state.timestamp._batch + 1)
            self._check(state, logger)

    @override
    def after_backward(self, state: State, logger: Logger) -> None:
        if not self._check_grad_norm:
            return
        parameters = getattr(state.model, "parameters", None)
        if not callable(parameters):
            return
        import torch

        groups: dict[tuple[Any, Any], list[torch.Tensor]] = {}
        for p in parameters():
            g = p.grad
            if g is not None and not g.is_sparse:
                groups.setdefault((g.device, g.dtype), []).append(g)
        if not groups:
            return
        oks = [
            torch.isfinite(torch.stack(torch._foreach_norm(grads, math.inf))).all()
            for grads in groups.values()
        ]
        self._fold("gradient", oks, state.timestamp._batch + 1)
        if self._immediate:
            self._check(state, logger)

    @override
    def after_train_batch(self, state: State, logger: Logger) -> None:
        batch = state.timestamp._batch + 1
        if self._folded_batch != batch and state.loss is not None:  # immediate: not twice
            self._fold_loss(state.loss, batch)
            if self._immediate:
                self._check(state, logger)

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._folded_batch = -1  # a new Run may count batches from 0 again

    # ----------------------------------------------------------------- check
    @override
    @at_interval("check_interval")
    def batch_end(self, state: State, logger: Logger) -> None:
        if self.check_interval.at_batch_end(state):
            self._check(state, logger)

    @override
    @at_interval("check_interval")
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.check_interval.at_epoch_end(state):
            self._check(state, logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._check(state, logger)

    @override
    def exception(self, state: State, logger: Logger) -> None:
        if not isinstance(state.exception, Exception):
            return  # Ctrl-C or SIGTERM: don't wait on the device
        try:
            self._check(state, logger, can_raise=False)
        except Exception as exc:  # a device that failed can't be read; say so, quietly
            log.debug("NaNMonitor: could not read the flags at exception: %r", exc)

    def _hand_on(
        self, state: State, logger: Logger, taken: list[Any], values: dict[str, Any]
    ) -> None:
        by_batch: dict[int, float] = {}
        for batches, losses in KeptLosses.read_values(taken, values):
            for batch, loss in zip(batches, losses, strict=True):
                by_batch[batch] = by_batch.get(batch, 0.0) + loss
        if by_batch:
            ordered = sorted(by_batch)
            for reader in self._readers:
                reader(state, logger, ordered, [by_batch[b] for b in ordered])

    def _check(self, state: State, logger: Logger, *, can_raise: bool = True) -> None:
        """Read the flags (one transfer per device), agree across ranks, act on what they hold.

        ``can_raise=False`` (at ``exception``) reads this rank's flags only: the
        other ranks may not be at a check, so a collective there could hang.
        """
        world = dist.get_world_size() if can_raise and dist.is_initialized() else 1
        if not self._unchecked and world == 1:
            return  # nothing folded since the last read (ranks > 1 read anyway, in step)
        self._unchecked = False
        local = {source: NONE_BAD for source in SOURCES}
        local["loss"] = self._host_first_bad
        self._host_first_bad = NONE_BAD
        keys = list(self._flags)
        taken = self._losses.take()
        due: dict[str, Any] = {str(i): self._flags[key] for i, key in enumerate(keys)}
        due.update(KeptLosses.to_read(taken))
        values = to_host(due) if due else {}  # one transfer per device (a CPU run: none)
        for i, key in enumerate(keys):
            first = values[str(i)]
            if first != NONE_BAD:
                local[key[0]] = min(local[key[0]], first)
                self._flags[key].fill_(NONE_BAD)
        local["loss"] = min(local["loss"], KeptLosses.first_bad(taken, values))
        if self._readers:
            self._hand_on(state, logger, taken, values)
        rows: list[list[int]] = [list(local.values())]
        if world > 1:  # every rank's first bad batches, exact: an int64 table
            import torch

            rows = dist.gather_rows([local[s] for s in SOURCES], torch.int64).tolist()
        batch = min(min(row) for row in rows)
        if batch == NONE_BAD:
            return
        # On a tie the loss is named: a bad loss makes bad gradients, not the other way.
        column = next(i for i in range(len(SOURCES)) if any(row[i] == batch for row in rows))
        error = NonFiniteLossError(
            batch,
            SOURCES[column],
            checked_at=batch if self._immediate else state.timestamp._batch,
            ranks=[r for r, row in enumerate(rows) if row[column] == batch] if world > 1 else (),
        )
        logger.log_metrics({"nan/first_bad_batch": batch})
        if self.on_nan == "raise" and can_raise:
            raise error
        if self.on_nan == "stop" and can_raise:
            state.stop_training()
            log.warning("%s Stopping training after this batch (on_nan='stop').", error)
        else:
            log.warning("%s", error)
