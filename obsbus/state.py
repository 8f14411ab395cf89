"""What a training loop knows, shared with every callback."""

from __future__ import annotations

import os
import secrets
import time as _time
from collections.abc import Iterable
from typing import Any

from obsbus import dist
from obsbus._check import check_instance, check_int, check_mapping, check_optional_str
from obsbus._run_args import check_duration, check_objects_with
from obsbus._state_args import check_optional_int, check_precision, check_state_device
from obsbus.run_folder import RunFolder, os_user
from obsbus.time import Time, TimeLike, Timestamp, TimeUnit

_BATCH = TimeUnit.BATCH

__all__ = ["State", "default_run_name"]


def default_run_name() -> str:
    """A run name unique enough for a folder: ``{user}-{yyyymmdd-hhmmss}-{6 hex}``.

    ``$OBSBUS_RUN_NAME`` wins when set. On several ranks, every rank takes
    rank 0's name when ``torch.distributed`` is initialized; before that,
    set ``OBSBUS_RUN_NAME`` (or pass ``run_name``) so all ranks agree.
    """
    env = os.environ.get("OBSBUS_RUN_NAME")
    if env:
        return env
    name = f"{os_user()}-{_time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    if dist.is_initialized() and dist.get_world_size() > 1:
        name = dist.all_gather_object(name)[0]
    return name


class State:
    """The state of a run, filled by whatever loop drives the bus.

    obsbus's :class:`~obsbus.Trainer` and :class:`~obsbus.Run` fill it, and so
    can any other trainer: nothing here requires obsbus's own loop.

    Attributes:
        run_name: the run's name, used in file names.
        run_folder: the :class:`~obsbus.RunFolder` where the run's files live
            (default ``./runs/default/{user}/{run_name}``).
        rank_info: rank, local rank, world size, local world size, node rank.
        timestamp: how far training has got (:class:`~obsbus.Timestamp`).
        eval_timestamp: how far the current evaluation has got.
        max_duration: when training ends, or ``None`` when the loop decides.
        model: the model, or ``None``.
        optimizers: every optimizer, as a list.
        schedulers: every LR scheduler, as a list.
        batch: the current batch (training, eval or predict).
        batch_num_samples: samples in the current batch.
        batch_num_tokens: tokens in the current batch (0 when not counted).
        batch_num_flops: FLOPs this rank spends on the current batch (forward and
            backward, every microbatch), when the loop's home knows them (the
            Hugging Face and Lightning bridges set it; a ``Run`` loop may);
            ``None`` otherwise. :class:`~obsbus.callbacks.SpeedMonitor` reads it.
        loss: the loss of the current microbatch at ``after_loss``, and of the
            whole batch from ``after_train_batch`` on (a tensor; not synced).
        outputs: the model's outputs for the current (micro)batch.
        train_metrics: ``{name: metric}``, the train metrics the loop updates
            (torchmetrics-style objects; see :class:`~obsbus.Run`).
        eval_metrics: ``{dataloader_label: {metric_name: value}}``: the eval
            metric objects and the eval loss (a tensor) of each label.
        callbacks: every plug-in the run dispatches to, destinations first
            (as Composer's ``state.callbacks``); ``loggers``: the destinations.
            Filled by :class:`~obsbus.Run`; changing them adds no plug-in.
        dataloader: the current dataloader; ``dataloader_label`` names it
            (set both with :meth:`set_dataloader`).
        dataloader_len: batches per epoch, when known, as a ``Time`` in ``ba``.
        device: the device the loop runs on, e.g. ``"cpu"`` or ``"cuda:0"``.
        grad_accum: microbatches per batch.
        device_train_microbatch_size: samples per microbatch, when the loop knows it.
        precision: ``"fp32"``, ``"amp_fp16"`` or ``"amp_bf16"`` (what the
            forward runs at), or ``None`` when the loop does not say.
        rank_zero_seed: the seed of rank 0, when the loop sets one.
        exception: the exception that is ending the run, at ``exception``.
        stop_requested: whether :meth:`stop_training` was called.
        profiler: the :class:`~obsbus.profiler.Profiler` attached to the run, or
            ``None``; callbacks make markers with ``state.profiler.marker(name)``.
        hparams: hyperparameters the loop knows about (logged at ``fit_start``
            by destinations that record them).

    Every argument is checked when the state is built; a wrong one is a
    ``TypeError``/``ValueError`` that quotes it and says what is accepted.

    Example:
        >>> state = State(run_name="demo", max_duration="10ba")
        >>> state.max_duration, state.timestamp.batch < "10ba"
        (Time(10, 'ba'), True)
        >>> state = State(run_name="demo", precision="amp_bf16", rank_zero_seed=17)
        >>> state.set_dataloader([[1], [2], [3]], "train")
        >>> state.dataloader_label, state.dataloader_len, state.precision
        ('train', Time(3, 'ba'), 'amp_bf16')
        >>> State(max_duration=0)
        Traceback (most recent call last):
        ...
        ValueError: State max_duration must be a positive time such as '2ep', ... got 0: ...
    """

    def __init__(
        self,
        run_name: str | None = None,
        *,
        max_duration: TimeLike | None = None,
        model: Any = None,
        optimizers: Any = None,
        schedulers: Any = None,
        device: Any = None,
        grad_accum: int = 1,
        hparams: dict[str, Any] | None = None,
        run_folder: str | os.PathLike[str] | RunFolder | None = None,
        precision: str | None = None,
        rank_zero_seed: int | None = None,
        device_train_microbatch_size: int | None = None,
        dataloader: Iterable[Any] | None = None,
        dataloader_label: str | None = None,
    ) -> None:
        try:
            check_optional_str("State", "run_name", run_name)
            check_int("State", "grad_accum", grad_accum, minimum=1)
        except TypeError as exc:  # a wrong type has always been a ValueError here
            raise ValueError(str(exc)) from None
        # Each argument is checked here, so a bad one fails when the state is built, by name.
        if max_duration is not None:
            max_duration = check_duration("State", "max_duration", max_duration)
        hparams = check_mapping("State", "hparams", hparams)
        self.device = check_state_device(device)
        self.precision: str | None = check_precision("State", precision)
        self.rank_zero_seed: int | None = check_optional_int(
            "rank_zero_seed", rank_zero_seed, minimum=0
        )
        self.device_train_microbatch_size: int | None = check_optional_int(
            "device_train_microbatch_size", device_train_microbatch_size, minimum=1
        )
        self.run_name: str = run_name or default_run_name()
        self.run_folder = RunFolder.coerce(run_folder, self.run_name)
        self.rank_info: dist.RankInfo = dist.rank_info()
        self.timestamp = Timestamp()
        self.eval_timestamp = Timestamp()
        self._max_duration: Time | None = None
        self.max_duration = max_duration
        self.model = model
        self._optimizers: list[Any] = []
        self._schedulers: list[Any] = []
        self.optimizers = optimizers
        self.schedulers = schedulers
        self.grad_accum = grad_accum
        self.hparams: dict[str, Any] = hparams
        self.batch: Any = None
        self.batch_num_samples: int = 0
        self.batch_num_tokens: int = 0
        self.batch_num_flops: float | None = None
        self.loss: Any = None
        self.outputs: Any = None
        self.train_metrics: dict[str, Any] = {}
        self.eval_metrics: dict[str, dict[str, Any]] = {}
        self.callbacks: list[Any] = []
        self.loggers: list[Any] = []
        self.dataloader: Any = None
        self.dataloader_label: str | None = None
        self.dataloader_len: Time | None = None
        check_instance("State", "dataloader_label", dataloader_label, str, allow_none=True,
                       accepted="a non-empty str such as 'train'")  # fmt: skip
        if dataloader is not None or dataloader_label is not None:
            self.set_dataloader(dataloader, dataloader_label)
        self.exception: BaseException | None = None
        self.stop_requested = False
        self.profiler: Any = None

    @property
    def optimizers(self) -> list[Any]:
        """Every optimizer, as a list (one assigned alone becomes a list of one, as in Composer)."""
        return self._optimizers

    @optimizers.setter
    def optimizers(self, value: Any) -> None:
        self._optimizers = check_objects_with(
            "State",
            "optimizers",
            value,
            "param_groups",
            accepted="an optimizer (a torch.optim.Optimizer or anything with param_groups), "
            "a list of them or None",
        )

    @property
    def schedulers(self) -> list[Any]:
        """Every LR scheduler, as a list (one assigned alone becomes a list of one)."""
        return self._schedulers

    @schedulers.setter
    def schedulers(self, value: Any) -> None:
        self._schedulers = check_objects_with(
            "State",
            "schedulers",
            value,
            "step",
            accepted="an LR scheduler (anything with step()), a list of them or None",
        )

    def set_dataloader(
        self,
        dataloader: Iterable[Any] | None = None,
        dataloader_label: str | None = None,
        dataloader_len: int | Time | None = None,
    ) -> None:
        """Set the active dataloader and its label (Composer's ``State.set_dataloader``).

        ``dataloader_len`` (batches) defaults to ``len(dataloader)`` when it has
        one; ``-1`` means the same, as in Composer.
        """
        if dataloader is None:
            dataloader_label = None
        elif not hasattr(dataloader, "__iter__") or isinstance(dataloader, (str, bytes)):
            raise TypeError(
                f"State dataloader must be an iterable of batches or None, got {dataloader!r}."
            )
        elif not isinstance(dataloader_label, str) or not dataloader_label:
            raise ValueError(
                "State dataloader_label must be a non-empty str such as 'train' or 'eval' when "
                f"a dataloader is set, got {dataloader_label!r}."
            )
        self.dataloader, self.dataloader_label = dataloader, dataloader_label
        if dataloader is None:
            self.dataloader_len = None
            return
        if dataloader_len is None or (
            isinstance(dataloader_len, int)
            and not isinstance(dataloader_len, bool)
            and dataloader_len == -1
        ):
            try:
                length: int | None = len(dataloader)  # type: ignore[arg-type]
            except TypeError:
                length = None
            self.dataloader_len = None if length is None else Time(length, TimeUnit.BATCH)
            return
        if isinstance(dataloader_len, Time):
            self.dataloader_len = dataloader_len
            return
        try:
            batches = check_int("State", "dataloader_len", dataloader_len)
        except (TypeError, ValueError) as exc:
            raise type(exc)(
                f"{exc} To fix, pass the number of batches, or -1 for len(dataloader)."
            ) from None
        self.dataloader_len = Time(batches, TimeUnit.BATCH)

    @property
    def max_duration(self) -> Time | None:
        return self._max_duration

    @max_duration.setter
    def max_duration(self, value: TimeLike | None) -> None:
        if value is None:
            self._max_duration = None
            return
        duration = Time.from_input(value, default_unit=TimeUnit.EPOCH)
        if duration.unit in (TimeUnit.DURATION, TimeUnit.ITERATION):
            raise ValueError(
                f"max_duration {str(duration)!r} is not supported: it must be in ep, ba, sp, "
                "tok or sec (or a wall-clock form such as '1h30m')."
            )
        self._max_duration = duration

    # Rank shorthands, as every monitor needs them.
    @property
    def rank(self) -> int:
        return self.rank_info.rank

    @property
    def local_rank(self) -> int:
        return self.rank_info.local_rank

    @property
    def world_size(self) -> int:
        return self.rank_info.world_size

    def stop_training(self) -> None:
        """Ask the loop to stop after the current batch (``fit_end`` still runs)."""
        self.stop_requested = True

    def get_elapsed_duration(self) -> Time | None:
        """The fraction of ``max_duration`` done, as a ``Time`` in ``dur``; ``None`` without one."""
        if self._max_duration is None:
            return None
        done = self.timestamp.get(self._max_duration.unit)
        total = self._max_duration.value
        return Time(min(done.value / total, 1.0) if total else 1.0, TimeUnit.DURATION)

    def is_done(self) -> bool:
        """Whether training should end: ``max_duration`` reached or a stop requested."""
        if self.stop_requested:
            return True
        duration = self._max_duration
        if duration is None:
            return False
        if duration.unit is _BATCH:  # every step asks: no raw() call for the common unit
            return self.timestamp._batch >= duration.value
        return self.timestamp.raw(duration.unit) >= duration.value

    def refresh_rank_info(self) -> None:
        """Re-read rank information (after ``torch.distributed`` is initialized)."""
        self.rank_info = dist.rank_info()

    def __repr__(self) -> str:
        return (
            f"State(run_name={self.run_name!r}, rank={self.rank}/{self.world_size}, "
            f"timestamp={self.timestamp!r}, max_duration={self.max_duration})"
        )
