"""What a training loop knows, shared with every callback."""

from __future__ import annotations

import os
import secrets
import time as _time
from collections.abc import Sequence
from typing import Any

from obsbus import dist
from obsbus.run_folder import RunFolder, os_user
from obsbus.time import Time, TimeLike, Timestamp, TimeUnit

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


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    return [value]


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
        loss: the loss of the current microbatch at ``after_loss``, and of the
            whole batch from ``after_train_batch`` on (a tensor; not synced).
        outputs: the model's outputs for the current (micro)batch.
        eval_metrics: ``{dataloader_label: {metric_name: value}}``.
        dataloader: the current dataloader; ``dataloader_label`` names it.
        dataloader_len: batches per epoch, when known, as a ``Time`` in ``ba``.
        device: the device the loop runs on, e.g. ``"cpu"`` or ``"cuda:0"``.
        grad_accum: microbatches per batch.
        exception: the exception that is ending the run, at ``exception``.
        stop_requested: whether :meth:`stop_training` was called.
        profiler: the :class:`~obsbus.profiler.Profiler` attached to the run, or
            ``None``; callbacks make markers with ``state.profiler.marker(name)``.
        hparams: hyperparameters the loop knows about (logged at ``fit_start``
            by destinations that record them).

    Example:
        >>> state = State(run_name="demo", max_duration="10ba")
        >>> state.max_duration, state.timestamp.batch < "10ba"
        (Time(10, 'ba'), True)
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
    ) -> None:
        if run_name is not None and (not isinstance(run_name, str) or not run_name):
            raise ValueError(f"run_name must be a non-empty str, got {run_name!r}.")
        if isinstance(grad_accum, bool) or not isinstance(grad_accum, int) or grad_accum < 1:
            raise ValueError(f"grad_accum must be a positive int, got {grad_accum!r}.")
        self.run_name: str = run_name or default_run_name()
        self.run_folder = RunFolder.coerce(run_folder, self.run_name)
        self.rank_info: dist.RankInfo = dist.rank_info()
        self.timestamp = Timestamp()
        self.eval_timestamp = Timestamp()
        self._max_duration: Time | None = None
        self.max_duration = max_duration
        self.model = model
        self.optimizers: list[Any] = _as_list(optimizers)
        self.schedulers: list[Any] = _as_list(schedulers)
        self.device = device
        self.grad_accum = grad_accum
        self.hparams: dict[str, Any] = dict(hparams or {})
        self.batch: Any = None
        self.batch_num_samples: int = 0
        self.batch_num_tokens: int = 0
        self.loss: Any = None
        self.outputs: Any = None
        self.eval_metrics: dict[str, dict[str, Any]] = {}
        self.dataloader: Any = None
        self.dataloader_label: str | None = None
        self.dataloader_len: Time | None = None
        self.exception: BaseException | None = None
        self.stop_requested = False
        self.profiler: Any = None

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
        return self.timestamp.raw(duration.unit) >= duration.value

    def refresh_rank_info(self) -> None:
        """Re-read rank information (after ``torch.distributed`` is initialized)."""
        self.rank_info = dist.rank_info()

    def __repr__(self) -> str:
        return (
            f"State(run_name={self.run_name!r}, rank={self.rank}/{self.world_size}, "
            f"timestamp={self.timestamp!r}, max_duration={self.max_duration})"
        )
