"""TensorBoard event files, written in the background (``pip install 'obsbus[tensorboard]'``)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Unpack

from typing_extensions import override

from obsbus._check import check_bool, check_folder, check_int
from obsbus.errors import MissingExtraError
from obsbus.logger import Logger
from obsbus.loggers._shared_options import TrackerOptions, shares_options
from obsbus.loggers._tensorboard_client import TensorboardClient
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers._tracker_client import ClientAttribute
from obsbus.naming import check_placeholders
from obsbus.state import State

__all__ = ["TensorboardLogger"]

# Primus's log_*_to_tensorboard switches that choose which logged keys are written.
_FILTERS = (
    ("log_learning_rate", ("lr-",)),
    ("log_loss_scale", ("loss_scale",)),
    ("log_timers", ("time/", "throughput/step_time_")),
    ("log_memory", ("memory/",)),
)


class TensorboardLogger(TrackerDestination):
    """Writes metrics, hyperparameters, images and text to TensorBoard event files.

    Files go to the run folder's ``tensorboard/`` (``log_dir`` overrides it;
    placeholders such as ``{run_name}`` are filled, a relative path is taken
    from the run folder). With ``rank_zero_only=False`` every rank writes its
    own run, ``{log_dir}/rank{rank}``. Open them with
    ``tensorboard --logdir <run folder>/tensorboard``.

    What is written, as TensorBoard's own records (neither TensorFlow nor
    ``torch.utils.tensorboard`` is needed), from a background thread
    (metrics stay tensors until a ``log_interval`` at least ``write_period``
    after the last hand-over, or a flush, then move to the host in one
    transfer):

    - **Scalars**: every numeric metric under its obsbus key, at its obsbus
      step, as float32 (TensorBoard's ``simple_value``); non-numeric values
      are skipped, once reported per key. Which keys depends on Primus's
      switches (their Primus name; the default is Primus's):

      * ``log_learning_rate`` (``log_learning_rate_to_tensorboard``, on):
        ``lr-*``, the keys of :class:`~obsbus.callbacks.LRMonitor`.
      * ``log_loss_scale`` (``log_loss_scale_to_tensorboard``, on):
        ``loss_scale*``, what a loop logs for its AMP scale, e.g.
        ``run.log_metrics({"loss_scale": scaler.get_scale()})``.
      * ``log_timers`` (``log_timers_to_tensorboard``, off): ``time/*``
        (SpeedMonitor, RuntimeEstimator) and ``throughput/step_time_*``.
      * ``log_memory`` (``log_memory_to_tensorboard``, off): ``memory/*``
        (MemoryMonitor, RocmSmiMonitor).
      * ``log_batch_size`` (``log_batch_size_to_tensorboard``, off): adds
        ``batch_size/samples`` (and ``batch_size/tokens`` when tokens are
        counted), this rank's batch as the state knows it.
      * ``log_world_size`` (``log_world_size_to_tensorboard``, off): adds
        ``world_size``.
      * ``log_validation_ppl`` (``log_validation_ppl_to_tensorboard``, off):
        adds ``metrics/{label}/perplexity``, ``exp`` of each
        ``metrics/{label}/loss`` (``inf`` where that overflows).

      Every other key (``loss/train/total``, ``metrics/*``, ``throughput/*``,
      ``l2_norm/*``, ``system/*``, ...) is always written. The added keys are
      written at each ``log_interval``.
    - **Hyperparameters** through the HParams plugin: one session per run
      holding everything logged with ``log_hyperparameters`` (nested names
      joined with ``/``), the environment as ``env__NAME`` (secrets dropped)
      and ``git.commit``/``git.branch``/``git.dirty``, written with the first
      metrics; its end record says success or failure (the run raised).
      Parameters logged after the first metrics go to the text plugin as a
      table under ``hyperparameters``, since TensorBoard reads one session
      record per run.
    - **Images** from ``log_images`` (``HW``, ``CHW``, ``NCHW``, or ``HWC`` /
      ``NHWC`` with ``channels_last=True``; floats in [0, 1]): one PNG per
      image under ``name`` (``name/{i}`` for several).
    - **Text**: ``log_traces`` as ``traces/{key}``; ``log_table`` as a
      Markdown table under its ``name``.

    Every ``flush_interval`` batches, and at ``fit_end``, ``exception`` and
    ``close``, the events are flushed to disk (also every ``queue_size``
    events and every two minutes). When a destination stores files
    (``logger.upload_file``), the event file is then closed and handed over
    as ``{run_name}/tensorboard/[rank{rank}/]<file name>``, and later events
    go to a new file: a file is handed over only once it is complete and
    will never change, so an uploader that reads it later can't catch it
    half-written, and nothing is copied. File names sort in writing order,
    as TensorBoard reads them. Without such a destination the run keeps one
    event file. The last file is handed over at ``close``, and destinations
    close in the order given, so list the one that stores files after this.

    Args:
        log_dir: where event files go (default: the run folder's ``tensorboard/``;
            Composer's is ``./tensorboard_logs``). A relative one resolves against
            the run folder (Composer: the working directory) and placeholders are
            filled at ``init``; an existing file there is an error then (an
            absolute one: at construction), naming ``log_dir`` and the path.
        log_interval: when held metrics may be written (Primus's
            ``tensorboard_log_interval``; ``"1ba"``, ``"1ep"``, a bare int is
            batches), and the steps the derived keys (above) are taken at.
        flush_interval: batches between flushes to disk (and uploads).
        rank_zero_only: only one rank writes (``logging_rank``); otherwise every rank, each
            to ``rank{rank}/``.
        queue_size: events written between flushes to disk at most (Primus's
            ``tensorboard_queue_size``, the SummaryWriter's ``max_queue``). Not the
            shared ``max_queue_size``, which bounds the writes waiting for the writer thread.
        log_learning_rate, log_loss_scale, log_timers, log_batch_size, log_memory,
            log_world_size, log_validation_ppl: Primus's ``log_*_to_tensorboard``
            switches; see the list above.
        log_env: record the environment (secrets dropped) as hyperparameters.
        log_git: record the git commit, branch and dirtiness as hyperparameters.
        write_period: seconds between hand-overs of held metrics to the writer
            thread (each still at its own step); see
            :class:`~obsbus.loggers._tracker.TrackerDestination`.
        close_timeout: seconds ``close`` waits for the writes before giving up.
        logging_rank, max_queue_size: see
            :class:`~obsbus.loggers._tracker.TrackerDestination`.

    Example:
        >>> import tempfile
        >>> from obsbus import Run
        >>> from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        >>> folder = tempfile.mkdtemp()
        >>> with Run(max_duration="2ba", run_folder=folder,
        ...          loggers=[TensorboardLogger(log_env=False)]) as run:
        ...     for batch in run.train([[1], [2]]):
        ...         run.state.loss = 0.25
        >>> events = EventAccumulator(f"{folder}/tensorboard")
        >>> _ = events.Reload()
        >>> [(e.step, e.value) for e in events.Scalars("loss/train/total")]
        [(1, 0.25), (2, 0.25)]
    """

    extra = "tensorboard"
    client: TensorboardClient
    log_dir = ClientAttribute()
    queue_size = ClientAttribute()
    log_validation_ppl = ClientAttribute()

    @shares_options(TrackerDestination.__init__, TrackerOptions)
    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        flush_interval: int = 100,
        rank_zero_only: bool = True,
        *,
        queue_size: int = 1000,
        log_learning_rate: bool = True,
        log_loss_scale: bool = True,
        log_timers: bool = False,
        log_batch_size: bool = False,
        log_memory: bool = False,
        log_world_size: bool = False,
        log_validation_ppl: bool = False,
        **options: Unpack[TrackerOptions],
    ) -> None:
        cls = type(self).__name__
        check_folder(cls, "log_dir", log_dir, allow_none=True)  # a file there: now, not at fit
        folder = (
            None if log_dir is None else check_placeholders(os.fspath(log_dir), f"{cls} log_dir")
        )
        flush_interval = check_int(cls, "flush_interval", flush_interval, minimum=1)
        queue_size = check_int(cls, "queue_size", queue_size, minimum=1)
        switches = {
            "log_learning_rate": log_learning_rate,
            "log_loss_scale": log_loss_scale,
            "log_timers": log_timers,
            "log_batch_size": log_batch_size,
            "log_memory": log_memory,
            "log_world_size": log_world_size,
            "log_validation_ppl": log_validation_ppl,
        }
        for name, value in switches.items():
            check_bool(cls, name, value)
        if importlib.util.find_spec("tensorboard") is None:
            raise MissingExtraError(self.extra, cls)
        dropped = tuple(
            prefix for switch, prefixes in _FILTERS if not switches[switch] for prefix in prefixes
        )
        client = TensorboardClient(
            log_dir=folder,
            queue_size=queue_size,
            dropped_prefixes=dropped,
            log_validation_ppl=log_validation_ppl,
        )
        super().__init__(client, rank_zero_only=rank_zero_only, **options)
        self.flush_interval = flush_interval
        self.log_learning_rate = log_learning_rate
        self.log_loss_scale = log_loss_scale
        self.log_timers = log_timers
        self.log_batch_size = log_batch_size
        self.log_memory = log_memory
        self.log_world_size = log_world_size
        self._derives = log_batch_size or log_world_size

    @property
    def run_dir(self) -> Path | None:
        """The folder this rank's event files go to (known after ``init``)."""
        return self.client.run_dir

    def _derived(self, state: State) -> dict[str, Any]:
        values: dict[str, Any] = {}
        if self.log_batch_size:
            values["batch_size/samples"] = state.batch_num_samples
            if state.batch_num_tokens:
                values["batch_size/tokens"] = state.batch_num_tokens
        if self.log_world_size:
            values["world_size"] = state.world_size
        return values

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self._derives and self.active and self.log_interval.at_batch_end(state):
            self.log_metrics(self._derived(state), step=state.timestamp._batch)
        super().batch_end(state, logger)
        if state.timestamp._batch % self.flush_interval == 0:
            self.flush()  # a flushed event file holds every step up to here

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        epochs = self.log_interval.epochs
        if self._derives and self.active and epochs and self.log_interval.at_epoch_end(state):
            self.log_metrics(self._derived(state), step=state.timestamp._batch)
        super().epoch_end(state, logger)
