"""Drive the event bus from your own training loop."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from obsbus._batch import default_num_samples, default_num_tokens, resolve_device, to_device
from obsbus._check import check_bool, check_callable, check_mapping
from obsbus._loss import combine_losses, detached, loss_metrics
from obsbus._metrics import Metrics, MetricSet, check_metrics
from obsbus._run_args import (
    check_callbacks,
    check_device,
    check_duration,
    check_loggers,
    check_optimizers,
    check_profiler,
)
from obsbus._run_start import start_run
from obsbus._signals import sigterm_as_exception
from obsbus._state_args import check_precision
from obsbus.callback import Callback
from obsbus.engine import Engine
from obsbus.event import Event
from obsbus.interval import LogInterval
from obsbus.logger import Logger, LoggerDestination
from obsbus.run_folder import RunFolder
from obsbus.state import State
from obsbus.time import Time, TimeLike, Timestamp, TimeUnit

if TYPE_CHECKING:
    from obsbus.profiler.profiler import Profiler

__all__ = ["Run"]

# The events of every batch as module constants: `Event.BATCH_END` costs 0.45 µs on
# CPython 3.11 against 0.05 µs for a global (timeit), and a train step fires 13 of them,
# so the constants save ~5 µs a step, 0.5% of bench_loop.py's ~1 ms step. Events that
# fire once per run, epoch or evaluation are looked up on Event.
_AFTER_BACKWARD = Event.AFTER_BACKWARD
_AFTER_DATALOADER = Event.AFTER_DATALOADER
_AFTER_FORWARD = Event.AFTER_FORWARD
_AFTER_LOSS = Event.AFTER_LOSS
_AFTER_TRAIN_BATCH = Event.AFTER_TRAIN_BATCH
_BATCH_CHECKPOINT = Event.BATCH_CHECKPOINT
_BATCH_END = Event.BATCH_END
_BATCH_START = Event.BATCH_START
_BEFORE_BACKWARD = Event.BEFORE_BACKWARD
_BEFORE_DATALOADER = Event.BEFORE_DATALOADER
_BEFORE_FORWARD = Event.BEFORE_FORWARD
_BEFORE_LOSS = Event.BEFORE_LOSS
_BEFORE_TRAIN_BATCH = Event.BEFORE_TRAIN_BATCH
_EVAL_AFTER_FORWARD = Event.EVAL_AFTER_FORWARD
_EVAL_BATCH_END = Event.EVAL_BATCH_END
_EVAL_BATCH_START = Event.EVAL_BATCH_START
_EVAL_BEFORE_FORWARD = Event.EVAL_BEFORE_FORWARD
_PREDICT_AFTER_FORWARD = Event.PREDICT_AFTER_FORWARD
_PREDICT_BATCH_END = Event.PREDICT_BATCH_END
_PREDICT_BATCH_START = Event.PREDICT_BATCH_START
_PREDICT_BEFORE_FORWARD = Event.PREDICT_BEFORE_FORWARD

_FORWARD = {
    "train": (_BEFORE_FORWARD, _AFTER_FORWARD),
    "eval": (_EVAL_BEFORE_FORWARD, _EVAL_AFTER_FORWARD),
    "predict": (_PREDICT_BEFORE_FORWARD, _PREDICT_AFTER_FORWARD),
}
_SEQUENCES = (tuple, list)
EvalInterval = TimeLike | Callable[[State, Event], bool]


def _check_eval_interval(
    interval: EvalInterval, owner: str = "Run"
) -> Time | Callable[[State, Event], bool]:
    if callable(interval) and not isinstance(interval, (Time, str)):
        return interval
    accepted = (
        "a positive number of epochs or batches ('1ep', '500ba'; a bare int is epochs) "
        "or a function (state, event) -> bool"
    )
    try:
        value = Time.from_input(interval, default_unit=TimeUnit.EPOCH)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"{owner} eval_interval must be {accepted}, got {interval!r} ({exc})"
        ) from None
    if value.unit not in (TimeUnit.EPOCH, TimeUnit.BATCH) or value.value <= 0:
        never = (
            " To train without evaluating (Composer's eval_interval=0), leave eval_dataloader out."
            if value.value == 0
            else ""
        )
        raise ValueError(f"{owner} eval_interval must be {accepted}, got {interval!r}.{never}")
    return value


def _len_or_none(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


class Run:
    """The event bus for a loop you write yourself: same events, same ``State``.

    ``with Run(...) as run:`` fires ``fit_start`` on entry and ``fit_end`` on
    exit (or ``exception`` if the block raises or the process gets SIGTERM),
    then closes every plug-in. Inside, iterators and calls fire the rest:

    - ``for batch in run.train(loader)``: epochs until ``max_duration`` (one
      epoch without one), with the dataloader and batch events; or
      ``for batch in run.epoch(loader)`` for one epoch inside your own
      epoch loop. The code after the body of one iteration ends the batch.
    - ``run.forward(model, x)``, ``run.loss(fn, out, y)``,
      ``run.backward(loss)``: the forward, loss and backward events (call them
      once per microbatch for gradient accumulation).
    - ``for batch in run.eval(loader)`` and ``for batch in run.predict(loader)``.

    A loop that calls none of the per-step methods still gets batch, epoch and
    fit events; set ``run.state.loss`` to have the loss logged.

    **Metrics.** ``train_metrics=`` and ``eval_metrics=`` take torchmetrics-style
    metrics (anything with ``update``, ``compute`` and ``reset``): one, a list
    (each named by its class name, as in Composer) or ``{name: metric}``. They
    are moved to the run's device; call ``run.update_metrics(outputs, targets)``
    in the loop. Train metrics are computed every ``train_metrics_interval``
    (default ``"1ba"``, Composer's every batch; a bare int is epochs), reset
    after, and logged as ``metrics/train/{name}``; they are kept in
    ``state.train_metrics``. Eval metrics are copied per dataloader label,
    reset at ``eval_start``, computed at ``eval_end`` and logged as
    ``metrics/{label}/{name}`` (next to ``metrics/{label}/loss``); they are kept
    in ``state.eval_metrics[label]``. ``update`` and ``compute`` run on the
    device and nothing is turned into a number: no host sync. On several
    ranks a torchmetrics ``compute`` gathers across them, so a
    ``train_metrics_interval`` of your log interval keeps that off other steps.

    **Resuming.** ``timestamp=Timestamp(epoch=..., batch=..., sample=...)``
    starts the run where an earlier one stopped (before ``init``), so steps,
    intervals and ``max_duration`` continue from there (Composer restores it
    from a checkpoint with ``load_path``).

    **Another framework's backward.** ``backward=`` takes the function that
    runs the backward pass in Lightning Fabric, Accelerate or DeepSpeed-style
    loops (``fabric.backward``, ``accelerator.backward``: called as
    ``backward(loss, **kwargs)``); ``run.backward(loss)`` then calls it between
    ``before_backward`` and ``after_backward``, with the same loss handling.
    ``None`` (the default) calls ``loss.backward()``. For example::

        fabric = Fabric(accelerator="cpu", devices=1)
        model, opt = fabric.setup(model, opt)
        with Run(model=model, optimizers=opt, backward=fabric.backward) as run:
            for x, y in run.train(fabric.setup_dataloaders(loader)):
                opt.zero_grad()
                loss = run.loss(F.mse_loss, run.forward(model, x), y)
                run.backward(loss)  # fabric.backward(loss), between the events
                opt.step()

    ``precision`` (``"fp32"``, ``"amp_fp16"``, ``"amp_bf16"``) only records in
    ``state.precision`` what the loop runs at; your loop does the autocast
    (:class:`~obsbus.Trainer` does it for you).

    Example:
        >>> import torch
        >>> from obsbus.loggers import InMemoryLogger
        >>> model = torch.nn.Linear(4, 1)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> data = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)]
        >>> mem = InMemoryLogger()
        >>> with Run(model=model, optimizers=opt, max_duration="2ep", loggers=[mem]) as run:
        ...     for x, y in run.train(data):
        ...         opt.zero_grad()
        ...         out = run.forward(model, x)
        ...         loss = run.loss(torch.nn.functional.mse_loss, out, y)
        ...         run.backward(loss)
        ...         opt.step()
        >>> run.state.timestamp.batch, len(mem.get_timeseries("loss/train/total")["batch"])
        (Time(6, 'ba'), 6)
    """

    def __init__(
        self,
        *,
        model: Any = None,
        optimizers: Any = None,
        schedulers: Any = None,
        max_duration: TimeLike | None = None,
        callbacks: Callback | Iterable[Callback] | None = (),
        loggers: LoggerDestination | Iterable[LoggerDestination] | None = (),
        run_name: str | None = None,
        device: Any = None,
        grad_accum: int = 1,
        hparams: dict[str, Any] | None = None,
        run_folder: str | os.PathLike[str] | RunFolder | None = None,
        num_samples_fn: Callable[[Any], int] | None = None,
        num_tokens_fn: Callable[[Any], int] | None = None,
        eval_interval: EvalInterval | None = None,
        eval_fn: Callable[[Run], None] | None = None,
        profiler: Profiler | None = None,
        handle_sigterm: bool = True,
        strict: bool = False,
        train_metrics: Metrics | None = None,
        eval_metrics: Metrics | None = None,
        train_metrics_interval: TimeLike = "1ba",
        precision: str | None = None,
        timestamp: Timestamp | None = None,
        backward: Callable[..., Any] | None = None,
    ) -> None:
        if (eval_interval is None) != (eval_fn is None):
            raise ValueError(
                "eval_interval and eval_fn go together: give both (evaluate every "
                "eval_interval by calling eval_fn(run)) or neither."
            )
        # Everything is checked before the first event, so a bad argument fails here, naming
        # itself, instead of as a raw error inside the loop (or as a run of zero batches).
        self._eval_interval = None if eval_interval is None else _check_eval_interval(eval_interval)
        self._eval_fn = check_callable("Run", "eval_fn", eval_fn)
        self._backward = check_callable("Run", "backward", backward)
        self._num_samples: Callable[[Any], int] = (
            check_callable("Run", "num_samples_fn", num_samples_fn) or default_num_samples
        )
        self._num_tokens: Callable[[Any], int] = (
            check_callable("Run", "num_tokens_fn", num_tokens_fn) or default_num_tokens
        )
        if max_duration is not None:
            max_duration = check_duration("Run", "max_duration", max_duration)
        callbacks = check_callbacks("Run", callbacks)
        loggers = check_loggers("Run", loggers)
        check_optimizers("Run", optimizers, schedulers)
        check_profiler("Run", profiler)
        hparams = check_mapping("Run", "hparams", hparams)
        check_bool("Run", "strict", strict)
        self._move_to = (
            None
            if (checked := check_device("Run", "device", device)) is None
            else resolve_device(checked)
        )
        self._handle_sigterm = check_bool("Run", "handle_sigterm", handle_sigterm)
        self._train_metrics = MetricSet(check_metrics("Run", "train_metrics", train_metrics))
        self._eval_template = MetricSet(check_metrics("Run", "eval_metrics", eval_metrics))
        self._eval_sets: dict[str, MetricSet] = {}
        self._metrics_every = LogInterval(
            train_metrics_interval, "Run train_metrics_interval", TimeUnit.EPOCH
        )
        precision = check_precision("Run", precision)
        if timestamp is not None and not isinstance(timestamp, Timestamp):
            raise TypeError(
                f"Run timestamp must be an obsbus Timestamp (where a resumed run starts, e.g. "
                f"Timestamp(epoch=2, batch=200)) or None, got {timestamp!r}."
            )
        if device is None and model is not None:
            params = getattr(model, "parameters", None)
            first = next(iter(params()), None) if callable(params) else None
            device = getattr(first, "device", None)
        self.state = State(
            run_name,
            max_duration=max_duration,
            model=model,
            optimizers=optimizers,
            schedulers=schedulers,
            device=device,
            grad_accum=grad_accum,
            hparams=hparams,
            run_folder=run_folder,
            precision=precision,
        )
        if timestamp is not None:
            self.state.timestamp = timestamp
        if device is not None:
            self._train_metrics.to(device)
            self._eval_template.to(device)
        self.state.train_metrics = self._train_metrics.metrics
        self.logger = Logger(self.state, loggers, strict=strict)
        self.engine = Engine(self.state, self.logger, callbacks)
        if profiler is not None:
            self.engine.attach_profiler(profiler)
        # As Composer's state.callbacks: the destinations first, then every callback.
        self.state.loggers = list(self.logger.destinations)
        self.state.callbacks = [*self.state.loggers, *self.engine.callbacks]
        self._mode = "train"
        self._fitting = False
        self._in_eval_group = False
        self._fit_cm: Any = None
        self._mark = time.perf_counter()
        self._loss_parts: list[tuple[Any, float | None]] = []
        self._eval_loss: Any = None
        self._eval_count = 0
        # Claims the run's files before anything is written: a run refused for its name
        # leaves the folder of the run that has it as it was (obsbus._run_start).
        start_run(self.state, self.engine, self.logger, profiler)

    # ------------------------------------------------------------------ fit
    @contextmanager
    def fitting(self) -> Iterator[Run]:
        """``fit_start`` ... ``fit_end`` (or ``exception``), without closing; reusable."""
        if self._fitting:
            raise RuntimeError("This Run is already fitting; fitting() does not nest.")
        sigterm = sigterm_as_exception() if self._handle_sigterm else _null()
        with sigterm:
            self._fitting = True
            self.state.stop_requested = False
            self.state.exception = None
            self._mark = time.perf_counter()
            try:
                with self.guard():
                    self.engine.run_event(Event.FIT_START)
                    ts = self.state.timestamp
                    if ts._epoch_in_iteration == 0 and ts._batch_in_epoch == 0:
                        # As Composer: the run is one iteration (no iteration_length), so a
                        # later fit() continues it and iteration_end never fires.
                        self.engine.run_event(Event.ITERATION_START)
                    yield self
                    self._log_train_metrics()  # what the last interval did not compute
                    self.engine.run_event(Event.FIT_END)
            finally:
                self._fitting = False

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Fire ``exception`` (once per error) if the block raises, then re-raise.

        ``fitting()`` and ``evaluating()`` use it; wrap other work (prediction,
        a standalone eval loop) in it so destinations flush on a crash there too.
        """
        try:
            yield
        except GeneratorExit:
            raise
        except BaseException as exc:
            if self.state.exception is not exc:
                self.state.exception = exc
                self.engine.run_event(Event.EXCEPTION)
            raise

    def __enter__(self) -> Run:
        self._fit_cm = self.fitting()
        return self._fit_cm.__enter__()  # type: ignore[no-any-return]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        cm, self._fit_cm = self._fit_cm, None
        try:
            if cm is not None:
                cm.__exit__(exc_type, exc, tb)
        finally:
            self.close()

    def close(self) -> None:
        """Close every callback and destination (idempotent)."""
        self.engine.close()

    # ---------------------------------------------------------------- train
    def _elapsed(self) -> float:
        """Seconds since the last mark, and move the mark to now."""
        now = time.perf_counter()
        elapsed, self._mark = now - self._mark, now
        return elapsed

    def train(self, dataloader: Iterable[Any]) -> Iterator[Any]:
        """Yield training batches, epoch after epoch, until ``max_duration`` or a stop."""
        self._require_fitting("train")
        while not self.state.is_done():
            empty = True
            for batch in self.epoch(dataloader):
                empty = False
                yield batch
            if self.state.max_duration is None or empty:
                return

    def epoch(self, dataloader: Iterable[Any]) -> Iterator[Any]:
        """Yield the training batches of one epoch, firing the epoch and batch events."""
        self._require_fitting("epoch")
        state, run_event, handles = self.state, self.engine.run_event, self.engine.handles
        logger, train_metrics = self.logger, self._train_metrics.metrics
        state.dataloader, state.dataloader_label = dataloader, "train"
        length = _len_or_none(dataloader)
        state.dataloader_len = None if length is None else Time(length, TimeUnit.BATCH)
        run_event(Event.EPOCH_START)
        iterator = iter(dataloader)
        # This loop is every step's path, so it makes as few calls as it can: Python code
        # run between two torch steps costs 3-4x what timeit says (bench/RESULTS.md, issue
        # 20). An event nobody handles is skipped for one dict lookup (Engine.handles); the
        # common batch (a tuple or list led by a tensor, with the default counters, and
        # already on the device when there is one) is counted inline, as
        # default_num_samples would count it, and kept as it is, as to_device would keep it.
        tensor, move_to = self._plain_batch_tensor(), self._move_to
        clock = time.perf_counter
        while True:
            if handles[_BEFORE_DATALOADER]:
                run_event(_BEFORE_DATALOADER)
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if (
                tensor is not None
                and type(batch) in _SEQUENCES
                and batch
                and type(batch[0]) is tensor
                and batch[0].ndim
                and (move_to is None or _all_on(batch, move_to, tensor))
            ):
                state.batch_num_samples, state.batch_num_tokens = batch[0].shape[0], 0
                state.batch_num_flops, state.batch = None, batch
            else:
                self._set_batch(batch)
            if handles[_AFTER_DATALOADER]:
                run_event(_AFTER_DATALOADER)
            if handles[_BATCH_START]:
                run_event(_BATCH_START)
            state.loss, state.outputs = None, None
            self._loss_parts = []
            if handles[_BEFORE_TRAIN_BATCH]:
                run_event(_BEFORE_TRAIN_BATCH)
            self._mode = "train"
            yield state.batch
            # The batch is done. Its loss: from run.loss (already detached), else what the
            # loop set in state.loss, without its graph.
            parts = self._loss_parts
            if parts:
                one = len(parts) == 1 and parts[0][1] is None
                state.loss = parts[0][0] if one else combine_losses(parts)
            elif state.loss is not None:
                loss = state.loss
                state.loss = loss.detach() if type(loss) is tensor else detached(loss)
            if handles[_AFTER_TRAIN_BATCH]:
                run_event(_AFTER_TRAIN_BATCH)
            now = clock()
            state.timestamp = state.timestamp.to_next_batch(
                state.batch_num_samples, state.batch_num_tokens, now - self._mark
            )
            self._mark = now
            # The loss goes to the destinations, when there are any (else nobody would see
            # it), once the batch is counted, so its step matches what monitors log at
            # batch_end.
            loss = state.loss
            if loss is not None and logger.destinations:
                metrics = loss_metrics(loss)
                if train_metrics and self._metrics_every.at_batch_end(state):
                    metrics.update(self._train_metrics.compute("metrics/train/"))
                if metrics:
                    logger.log_metrics(metrics)
            elif train_metrics and self._metrics_every.at_batch_end(state):
                self._log_train_metrics()
            if handles[_BATCH_END]:
                run_event(_BATCH_END)
            if self._eval_interval is not None:
                self._maybe_eval(_BATCH_END)
            if handles[_BATCH_CHECKPOINT]:
                run_event(_BATCH_CHECKPOINT)
            if state.is_done():
                if length is None or state.timestamp._batch_in_epoch < length:
                    return  # a cut epoch does not end
                break
        state.timestamp = state.timestamp.to_next_epoch(self._elapsed())
        if train_metrics and self._metrics_every.at_epoch_end(state):
            self._log_train_metrics()
        run_event(Event.EPOCH_END)
        self._maybe_eval(Event.EPOCH_END)
        run_event(Event.EPOCH_CHECKPOINT)

    def _plain_batch_tensor(self) -> Any:
        """``torch.Tensor`` when batches may be counted inline (the default counters,
        torch loaded), else ``None``."""
        torch = sys.modules.get("torch")
        plain = self._num_samples is default_num_samples and self._num_tokens is default_num_tokens
        return torch.Tensor if plain and torch is not None else None

    def _set_batch(self, batch: Any) -> None:
        state = self.state
        state.batch_num_samples = self._num_samples(batch)
        state.batch_num_tokens = self._num_tokens(batch)
        state.batch_num_flops = None  # a loop that knows them sets them
        state.batch = batch if self._move_to is None else to_device(batch, self._move_to)

    def _log_train_metrics(self) -> None:
        computed = self._train_metrics.compute("metrics/train/")
        if computed:
            self.logger.log_metrics(computed)

    def _maybe_eval(self, event: Event) -> None:
        interval = self._eval_interval
        if interval is None or self._eval_fn is None:
            return
        if isinstance(interval, Time):
            ts = self.state.timestamp
            if interval.unit is TimeUnit.BATCH:
                due = event is _BATCH_END and ts._batch % interval.value == 0
            else:
                due = event is Event.EPOCH_END and ts._epoch % interval.value == 0
        else:
            due = bool(interval(self.state, event))
        if due:
            start = time.perf_counter()
            with self.evaluating():
                self._eval_fn(self)
            # Evaluation counts in the run's wall clock, not in the next batch's time.
            spent = time.perf_counter() - start
            self._mark += spent
            ts = self.state.timestamp
            self.state.timestamp = ts.copy(
                total_wct=ts.total_wct + spent, iteration_wct=ts.iteration_wct + spent
            )

    def _require_fitting(self, what: str) -> None:
        if not self._fitting:
            raise RuntimeError(
                f"run.{what}() must be called inside `with run:` (or `with run.fitting():`), "
                "which fires fit_start and fit_end around it."
            )

    def stop_training(self) -> None:
        """Stop after the current batch; the same as ``run.state.stop_training()``."""
        self.state.stop_training()

    # ------------------------------------------------------------ per step
    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` between the forward events of the current phase."""
        before, after = _FORWARD[self._mode]
        engine = self.engine
        if engine.handles[before]:
            engine.run_event(before)
        self.state.outputs = fn(*args, **kwargs)
        if engine.handles[after]:
            engine.run_event(after)
        return self.state.outputs

    def loss(
        self, fn: Callable[..., Any], *args: Any, weight: float | None = None, **kwargs: Any
    ) -> Any:
        """Compute a loss with ``fn(*args, **kwargs)`` and record it.

        In training, fires ``before_loss``/``after_loss``; ``state.loss`` holds
        the microbatch loss during ``after_loss`` (a callback may replace it)
        and the batch's loss afterwards: the mean of the microbatch losses, or
        their ``weight``-weighted sum when weights are given (a dict or list
        loss is combined key by key, and logged as ``loss/train/{key}`` with
        ``loss/train/total`` its ``"total"`` entry or the sum). In evaluation,
        the loss is averaged over samples into ``metrics/{label}/loss``.
        Returns the (possibly replaced) loss; nothing here syncs the device.
        """
        if self._mode == "eval":
            value = fn(*args, **kwargs)
            weighted = value.detach() * self.state.batch_num_samples
            self._eval_loss = weighted if self._eval_loss is None else self._eval_loss + weighted
            self._eval_count += self.state.batch_num_samples
            return value
        if self._mode == "predict":
            return fn(*args, **kwargs)
        engine = self.engine
        if engine.handles[_BEFORE_LOSS]:
            engine.run_event(_BEFORE_LOSS)
        self.state.loss = fn(*args, **kwargs)
        if engine.handles[_AFTER_LOSS]:
            engine.run_event(_AFTER_LOSS)
        loss = self.state.loss
        self._loss_parts.append((detached(loss), weight))
        return loss

    def backward(self, loss: Any = None, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)`` (default ``state.loss``) between the backward events.

        With ``Run(backward=fn)``, calls ``fn(loss, **kwargs)`` instead (e.g.
        ``fabric.backward`` or ``accelerator.backward``).
        """
        engine = self.engine
        if engine.handles[_BEFORE_BACKWARD]:
            engine.run_event(_BEFORE_BACKWARD)
        loss = self.state.loss if loss is None else loss
        if self._backward is None:
            loss.backward(**kwargs)
        else:
            self._backward(loss, **kwargs)
        if engine.handles[_AFTER_BACKWARD]:
            engine.run_event(_AFTER_BACKWARD)

    def update_metrics(self, outputs: Any, targets: Any) -> None:
        """``metric.update(outputs, targets)`` for the metrics of the current phase.

        In training, the ``train_metrics``; inside :meth:`eval`, the
        ``eval_metrics`` of that dataloader. On the device, nothing converted:
        no host sync. Train metrics are computed every
        ``train_metrics_interval`` (and at the end of fit) and logged as
        ``metrics/train/{name}``; eval metrics at ``eval_end``, as
        ``metrics/{label}/{name}``. ``outputs`` is detached first.
        """
        current = self._current_metrics()
        if current is not None:
            current.update(outputs, targets)

    def _update_metrics_from(self, model: Any, batch: Any, outputs: Any) -> None:
        """What the Trainer calls: Composer's ``model.update_metric`` or ``(outputs, targets)``."""
        current = self._current_metrics()
        if current is not None:
            current.update_with(model, batch, outputs)

    def _current_metrics(self) -> MetricSet | None:
        if self._mode == "train":
            found: MetricSet | None = self._train_metrics
        elif self._mode == "eval":
            found = self._eval_sets.get(self.state.dataloader_label or "eval")
        else:
            return None
        return found if found else None

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Log metrics to every destination (values may be tensors)."""
        self.logger.log_metrics(metrics, step)

    # ----------------------------------------------------- eval and predict
    @contextmanager
    def evaluating(self) -> Iterator[None]:
        """Group several :meth:`eval` loops: ``eval_before_all``/``eval_after_all`` in fit,
        ``eval_standalone_start``/``eval_standalone_end`` outside it."""
        if self._in_eval_group:
            yield
            return
        start, end = (
            (Event.EVAL_BEFORE_ALL, Event.EVAL_AFTER_ALL)
            if self._fitting
            else (Event.EVAL_STANDALONE_START, Event.EVAL_STANDALONE_END)
        )
        self._in_eval_group = True
        try:
            with self.guard():
                self.engine.run_event(start)
                yield
                self.engine.run_event(end)
        finally:
            self._in_eval_group = False

    def eval(self, dataloader: Iterable[Any], label: str = "eval") -> Iterator[Any]:
        """Yield the batches of ``dataloader`` between the eval events.

        Losses computed with :meth:`loss` are averaged over samples and logged
        as ``metrics/{label}/loss`` at ``eval_end`` (also in
        ``state.eval_metrics[label]["loss"]``).
        """
        with self.evaluating():
            yield from self._eval_loop(dataloader, label)

    def _eval_loop(self, dataloader: Iterable[Any], label: str) -> Iterator[Any]:
        state, run_event = self.state, self.engine.run_event
        saved = (self._mode, state.dataloader, state.dataloader_label, state.dataloader_len)
        self._mode = "eval"
        state.dataloader, state.dataloader_label = dataloader, label
        length = _len_or_none(dataloader)
        state.dataloader_len = None if length is None else Time(length, TimeUnit.BATCH)
        state.eval_timestamp = Timestamp()
        self._eval_loss, self._eval_count = None, 0
        metric_set = self._eval_metric_set(label)
        mark = time.perf_counter()
        run_event(Event.EVAL_START)
        for batch in dataloader:
            self._set_batch(batch)
            run_event(_EVAL_BATCH_START)
            yield state.batch
            now = time.perf_counter()
            state.eval_timestamp = state.eval_timestamp.to_next_batch(
                state.batch_num_samples, state.batch_num_tokens, now - mark
            )
            mark = now
            run_event(_EVAL_BATCH_END)
        metrics = state.eval_metrics.setdefault(label, {})
        logged = {} if metric_set is None else metric_set.compute(f"metrics/{label}/")
        if self._eval_count:
            metrics["loss"] = self._eval_loss / self._eval_count
            logged = {f"metrics/{label}/loss": metrics["loss"], **logged}
        if logged:
            self.logger.log_metrics(logged)
        run_event(Event.EVAL_END)
        self._mode, state.dataloader, state.dataloader_label, state.dataloader_len = saved

    def _eval_metric_set(self, label: str) -> MetricSet | None:
        """The eval metrics of ``label``, reset: copies of ``eval_metrics``, one set per label."""
        if not self._eval_template:
            return None
        found = self._eval_sets.get(label)
        if found is None:
            found = self._eval_sets[label] = self._eval_template.copy()
        found.reset()
        self.state.eval_metrics.setdefault(label, {}).update(found.metrics)
        return found

    def predict(self, dataloader: Iterable[Any]) -> Iterator[Any]:
        """Yield the batches of ``dataloader`` between the predict events."""
        state, run_event = self.state, self.engine.run_event
        saved = self._mode
        self._mode = "predict"
        state.dataloader, state.dataloader_label = dataloader, "predict"
        run_event(Event.PREDICT_START)
        for batch in dataloader:
            self._set_batch(batch)
            run_event(_PREDICT_BATCH_START)
            yield state.batch
            run_event(_PREDICT_BATCH_END)
        run_event(Event.PREDICT_END)
        self._mode = saved


def _all_on(batch: tuple[Any, ...] | list[Any], device: Any, tensor: Any) -> bool:
    """Whether every item of ``batch`` is a plain tensor already on ``device``."""
    for item in batch:  # noqa: SIM110 (a loop: no generator object on every step)
        if type(item) is not tensor or item.device != device:
            return False
    return True


@contextmanager
def _null() -> Iterator[None]:
    yield
