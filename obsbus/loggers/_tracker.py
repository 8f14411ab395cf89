"""The machinery every experiment-tracker destination shares.

A tracker's client (``wandb``, ``mlflow``, ``comet_ml``, ...) is slow, may
hang and may raise. :class:`TrackerDestination` keeps all of that off the
training thread: ``log_metrics`` only holds the values (tensors stay
tensors); at a ``log_interval`` at least ``write_period`` seconds after the
last hand-over, every held value moves to the host in one transfer and a
:class:`~obsbus.BackgroundWriter` hands them to the client, each at its own
step (rows of one step with different keys merged into one call).
The client is started, fed and finished on that thread only. A client that
fails to start is reported once and the destination goes quiet; one that
hangs fills its queue, after which new writes are dropped and counted
instead of blocking training (DESIGN principle 3); close waits at most
``close_timeout`` seconds and reports what was not delivered.

The tracker itself is a :class:`~obsbus.loggers._tracker_client.TrackerClient`
given to the destination: this class owns every logging method (metrics,
hyperparameters, tables, images, traces, files) and the policy, and calls
the client through its ``_client_*`` methods (each forwards to the client;
tests override them to watch or block a call). Each public tracker class is
a subclass whose ``__init__`` checks its own arguments, builds its client and
passes the shared options through (:data:`~obsbus.loggers._shared_options.SHARED_OPTIONS`:
the same names, and the same defaults but MLflow's ``logging_rank="last"``), most as
``**options`` (:func:`~obsbus.loggers._shared_options.shares_options`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from typing_extensions import override

from obsbus._check import check_bool, check_instance, check_seconds, did_you_mean
from obsbus._held import MAX_HELD_ROWS, Backpressure, Handed, RowHolder
from obsbus.interval import LogInterval
from obsbus.logger import Logger, LoggerDestination
from obsbus.loggers._column_names import ColumnNames
from obsbus.loggers._images import image_arrays
from obsbus.loggers._run_metadata import environment_snapshot, flatten_hyperparameters, record_git
from obsbus.loggers._tracker_client import RunInfo, TrackerClient
from obsbus.loggers._tracker_media import hold_images, hold_table, table_rows
from obsbus.run_folder import os_user
from obsbus.state import State
from obsbus.time import TimeLike, TimeUnit
from obsbus.values import HostValues
from obsbus.writer import BackgroundWriter, WritePeriod

__all__ = ["RunInfo", "TrackerClient", "TrackerDestination"]

log = logging.getLogger("obsbus")

#: Rows (``log_metrics`` calls) held before a hand-over whatever ``write_period`` says
#: (:data:`obsbus._held.MAX_HELD_ROWS`, which FileLogger shares).
MAX_HELD_STEPS = MAX_HELD_ROWS
#: The largest float64: an int beyond it can't be a tracker's number (it would become inf).
_FLOAT_MAX = int(sys.float_info.max)


class TrackerDestination(LoggerDestination):
    """A destination that feeds a tracker's client from a background thread; see the module.

    Args:
        client: the tracker (default: one that stores nothing).
        log_interval: when held metrics may be handed to the client (in batches).
        write_period: seconds; held metrics go to the writer at the first
            ``log_interval`` at least this long after the last hand-over (and
            at eval end, fit end, an exception and close). Every metric is still
            written at its own step; fewer, larger hand-overs cost the training
            thread one transfer and one queue put per period instead of per
            interval, and the client's work comes in bursts. ``0``: at every
            ``log_interval``. Once ``MAX_HELD_STEPS`` (1024) rows are held they go
            at once, whatever the period, even where no batch boundary comes
            (a long eval). Hyperparameters logged
            after metrics reach the client after them; files given to
            ``upload_file`` (from any thread) go at once.
        rank_zero_only: only one rank logs (``logging_rank``); otherwise every rank.
        logging_rank: the rank that logs when ``rank_zero_only``: an int or
            ``"last"`` (``world_size - 1``, MLflow's choice in Megatron).
        log_env: record the environment (secrets dropped) as ``env__NAME`` parameters.
        log_git: record git commit/branch/dirty as tags and ``system/git_metadata.json``.
        close_timeout: seconds close waits for the client before giving up.
        max_queue_size: writes that may wait for the client before new ones are dropped.
    """

    #: The pip extra that installs the client, for :class:`MissingExtraError`.
    extra: str = ""

    def __init__(
        self,
        client: TrackerClient | None = None,
        *,
        log_interval: TimeLike = "1ba",
        rank_zero_only: bool = True,
        logging_rank: int | Literal["last"] = 0,
        log_env: bool = True,
        log_git: bool = True,
        write_period: float = 1.0,
        close_timeout: float = 30.0,
        max_queue_size: int = 1024,
    ) -> None:
        cls = type(self).__name__
        check_instance(cls, "client", client, TrackerClient, allow_none=True,
                       accepted="a TrackerClient (obsbus.loggers._tracker_client)")  # fmt: skip
        #: The tracker's client (touch it from the writer thread only, once started).
        self.client = TrackerClient() if client is None else client
        self.log_interval = LogInterval(log_interval, f"{cls} log_interval", TimeUnit.BATCH)
        # Every wrong value is a ValueError here, of any type (as it always was): no _check
        # helper takes "an int or one of these strs".
        if logging_rank != "last" and (
            isinstance(logging_rank, bool) or not isinstance(logging_rank, int) or logging_rank < 0
        ):
            given: object = logging_rank  # what a caller passed, not what the annotation says
            hint = did_you_mean(given, ["last"]) if isinstance(given, str) else ""
            raise ValueError(
                f"{cls} logging_rank must be a rank >= 0 or 'last', got {logging_rank!r}.{hint}"
            )
        # nan or inf would make close wait forever on a hung client (nan compares false).
        self.close_timeout = check_seconds(cls, "close_timeout", close_timeout)
        self.rank_zero_only = check_bool(cls, "rank_zero_only", rank_zero_only)
        self.logging_rank = logging_rank
        self.log_env = check_bool(cls, "log_env", log_env)
        self.log_git = check_bool(cls, "log_git", log_git)
        self._period = WritePeriod(cls, write_period)
        self._writer = BackgroundWriter(cls, max_queue_size=max_queue_size)
        self._state: State | None = None
        self._logger: Logger | None = None
        self._held = RowHolder()  # (step, metrics) per log_metrics call, from any thread
        self._columns = ColumnNames("the tracker's own")  # reserved keys, renamed
        self._pressure = Backpressure()
        self._active = False
        self._started = False
        self._client_ready = False
        self._failed_run = False
        self._last_progress = time.monotonic()
        self._dropped = 0
        self._drop_told = False  # the first drop is reported, once
        self._skipped = 0
        # Writes queued (training thread) and run or skipped (writer thread); what close gave
        # up on is their difference.
        self._queued = 0
        self._ran = 0
        self._gave_up = False

    # ---------------- the client, through one seam per call (writer thread but the first)
    def _check_credentials(self) -> None:
        self.client.check_credentials()

    def _client_start(self, info: RunInfo) -> None:
        self.client.start(info)

    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        self.client.log_metrics(values, step)

    def _client_log_params(self, params: dict[str, Any]) -> None:
        self.client.log_params(params)

    def _client_set_tags(self, tags: dict[str, str]) -> None:
        self.client.set_tags(tags)

    def _client_upload_file(self, remote_file_name: str, file_path: Path) -> None:
        self.client.upload_file(remote_file_name, file_path)

    def _client_finish(self, failed: bool) -> None:
        self.client.finish(failed, self._state.exception if self._state is not None else None)

    def _client_flush(self) -> None:
        self.client.flush()

    def _has(self, method: str) -> bool:
        """Whether the client (or a subclass's seam) implements ``method``: else never queued."""
        seam = f"_client_{method}"
        if getattr(type(self), seam, None) is not getattr(TrackerDestination, seam, None):
            return True
        return getattr(type(self.client), method) is not getattr(TrackerClient, method)

    # -------------------------------------------------------- shared plumbing
    @property
    def name(self) -> str:
        """The name messages use: the class name (``MLFlowLogger#2`` for a second one)."""
        return self._writer.name

    @name.setter
    def name(self, value: str) -> None:
        self._writer.name = value

    @property
    def active(self) -> bool:
        """Whether this rank logs (known after ``init``)."""
        return self._active

    @property
    def write_period(self) -> float:
        """Seconds between hand-overs of held metrics to the writer (see the class)."""
        return self._period.seconds

    @property
    def undelivered_writes(self) -> int:
        """Writes not delivered: dropped while the client hung, skipped as it never started,
        or left in the queue (or running) when ``close`` stopped waiting for a hung client.

        Each ``log_metrics`` call counts as one write, however they were batched.
        """
        left = self._queued - self._ran if self._gave_up else 0
        return self._dropped + self._skipped + left

    def default_project(self) -> str:
        """Primus's default project name, ``{work_group}_{user_name}``, from the run folder.

        Set them with ``RunFolder.from_parts(work_group=..., user_name=...)`` (or
        ``RunFolder(path, work_group=...)``); without a run, ``default_{OS user}``.
        """
        folder = self._state.run_folder if self._state is not None else None
        if folder is None:
            return f"default_{os_user()}"
        return f"{folder.work_group}_{folder.user_name}"

    def _step_now(self, step: int | None = None) -> int:
        """``step`` if given, else the run's batch count (the step metrics are logged at)."""
        if step is not None:
            return step
        return self._state.timestamp._batch if self._state is not None else 0

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue a client call; drop it (counted, reported once) when the client hangs.

        A full queue waits up to ``close_timeout`` for the client; a client
        that has made no progress for that long gets its writes dropped at
        once, so a hung tracker costs training one wait, not the run.
        """
        writer = self._writer
        stalled = writer.pending >= writer.max_queue_size and (
            time.monotonic() - self._last_progress > self.close_timeout
        )
        if not stalled and writer.try_submit(self._run_client, fn, args, timeout=self._budget()):
            self._queued += self._writes_in(fn, args)
            return
        first, self._drop_told = not self._drop_told, True
        self._dropped += self._writes_in(fn, args)
        if first:
            log.error(
                "obsbus: %s has made no progress for %.1fs and its queue is full; "
                "further writes are dropped and counted so training goes on.",
                self.name,
                self.close_timeout,
            )

    def _writes_in(self, fn: Callable[..., None], args: tuple[Any, ...]) -> int:
        """How many writes a queued call holds (a metrics hand-over: one per row; the start,
        a flush or the finish: none, they carry no data of their own)."""
        if fn == self._write_held:
            handed: Handed = args[0]
            return handed.count
        control = (self._start_client, self._client_flush, self._client_finish)
        return 0 if fn in control else 1

    def _run_client(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            if self._client_ready or fn == self._start_client:
                fn(*args)
            else:
                self._skipped += self._writes_in(fn, args)
        finally:
            self._ran += self._writes_in(fn, args)
            self._last_progress = time.monotonic()

    def _start_client(self, info: RunInfo) -> None:
        self._client_start(info)
        self._client_ready = True
        if self.log_env:
            self._client_log_params(environment_snapshot())
        if self.log_git:
            upload = self._client_upload_file if self.can_upload_files() else None
            record_git(info.run_folder, self._client_set_tags, upload)

    def _chosen_rank(self, world_size: int) -> int:
        return world_size - 1 if self.logging_rank == "last" else int(self.logging_rank)

    # ------------------------------------------------------- LoggerDestination
    @override
    def can_upload_files(self) -> bool:
        return self.client.can_upload_files()

    @override
    def init(self, state: State, logger: Logger) -> None:
        self.client.prepare(state, logger)
        self._state, self._logger = state, logger
        self._writer.report_to(logger.failures)
        self.client.skip = self._skip
        self._active = not self.rank_zero_only or state.rank == self._chosen_rank(state.world_size)
        if not self._active or self._started:
            return
        self._check_credentials()
        self._started = True
        info = RunInfo(
            run_name=state.run_name,
            project=self.default_project(),
            rank=state.rank,
            world_size=state.world_size,
            run_folder=state.run_folder.root,
            start_step=state.timestamp._batch,
            every_rank=not self.rank_zero_only,
            report=self._report,
        )
        self._submit(self._start_client, info)

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if self._active and self._held.add((self._step_now(step), dict(metrics))) >= (
            MAX_HELD_STEPS
        ):
            self._hand_over()  # no batch boundary may come: bound the memory

    @override
    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        if self._active:
            self._hand_over()  # metrics logged before reach the client first
            self._submit(self._client_log_params, flatten_hyperparameters(hyperparameters))

    @override
    def upload_file(
        self, state: State, remote_file_name: str, file_path: Path, *, overwrite: bool = False
    ) -> None:
        if not (self._active and self.can_upload_files()):
            return
        if not self._started:  # closed: a new writer would run it with no client
            log.warning(
                "obsbus: %s is closed; %r (%s) was not uploaded to it.",
                self.name,
                remote_file_name,
                file_path,
            )
            return
        self._submit(self._client_upload_file, remote_file_name, Path(file_path))

    @override
    def log_table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        name: str = "Table",
        step: int | None = None,
    ) -> None:
        if self._active and self._has("log_table"):
            self._hand_over()  # metrics held for earlier steps go first
            self._submit(self._send_table, list(columns), *hold_table(rows), name,
                         self._step_now(step))  # fmt: skip

    def _send_table(
        self, columns: list[str], rows: list[list[Any]], pending: HostValues, name: str, step: int
    ) -> None:
        self.client.log_table(columns, table_rows(rows, pending), name, step)

    @override
    def log_images(
        self, images: Any, name: str = "Images", step: int | None = None, **kwargs: Any
    ) -> None:
        if self._active and self._has("log_images"):
            self._hand_over()
            # Snapshotted here (detached copies, no sync): the caller may change them next.
            self._submit(self._send_images, hold_images(images), name, self._step_now(step),
                         kwargs.get("channels_last"))  # fmt: skip

    def _send_images(self, images: Any, name: str, step: int, channels_last: bool | None) -> None:
        client = self.client
        layout = client.channels_last if channels_last is None else bool(channels_last)
        client.log_images(image_arrays(images, layout, uint8=client.uint8_images), name, step)

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self._active and self._has("log_traces"):
            self._submit(self._send_traces, dict(traces), self._step_now())

    def _send_traces(self, traces: dict[str, Any], step: int) -> None:
        self.client.log_traces(traces, step)

    def _report(self, what: str, exc: BaseException) -> None:
        self._writer.failures.report(self.name, what, exc)

    def _skip(self, key: object, reason: str) -> None:
        self._writer.failures.skipped(self.name, key, reason)

    def flush(self) -> None:
        """Hand everything held to the writer and queue the client's ``flush`` (no wait)."""
        self._hand_over_and_flush()

    def _hand_over(self) -> None:
        """Everything held goes to the writer: one host transfer for all values due.

        Safe against a signal raised into it: see :mod:`obsbus._held`.
        """
        if self._held:
            self._period.handed_over()
            rows = self._held.hand_over(self._submit_rows)
            queue = self._writer.try_submit  # a client that falls behind holds about two caps
            if rows and not self._pressure.handed(
                rows, lambda fn: queue(fn, timeout=0.0), self._budget()
            ):
                self._writer.gave_up()  # a hung client: wait no more

    def _submit_rows(self, handed: Handed) -> None:
        self._submit(self._write_held, handed)

    def _hand_over_if_due(self) -> None:
        """Hand over when ``write_period`` has passed since the last one, or too much is held."""
        if len(self._held) >= MAX_HELD_STEPS or self._period.due():
            self._hand_over()

    def _write_held(self, handed: Handed) -> None:
        """Consecutive rows of one step with different keys go to the client as one call.

        Each value is checked first (:meth:`_storable`): one the tracker can't
        store is skipped and counted by key, and the rest of its row is sent.
        A call the client still fails is reported and its values counted by
        key; the calls after it are made.
        """
        row: dict[str, Any] = {}
        row_step = 0
        for (step, _), values in handed.claim():
            values = self._storable(values)
            if row and (step != row_step or not row.keys().isdisjoint(values)):
                self._send_row(row, row_step)
                row = {}
            row_step = step
            row.update(values)
        if row:
            self._send_row(row, row_step)
        try:
            self.client.metrics_done()
        except Exception as exc:
            self._report("metrics_done", exc)

    def _send_row(self, row: dict[str, Any], step: int) -> None:
        try:
            self._client_log_metrics(row, step)
        except Exception as exc:  # the backend refused the call: its values are counted
            self._report("log_metrics", exc)
            failures = self._writer.failures
            for key in row:
                failures.skipped(self.name, key, f"the tracker raised {exc!r}", warn=False)

    def _storable(self, values: dict[Any, Any]) -> dict[str, Any]:
        """``values`` without what no tracker stores (a key that is not a str, ``None``, an int
        beyond float64), counted by key; a key the tracker keeps for itself is renamed."""
        reserved = self.client.reserved_keys
        for key, value in values.items():
            kind = type(value)
            if (
                type(key) is not str
                or value is None
                or (kind is int and not -_FLOAT_MAX <= value <= _FLOAT_MAX)
                or key in reserved
            ):
                break
        else:
            return values  # the usual row: a few type checks
        kept: dict[str, Any] = {}
        for key, value in values.items():
            if not isinstance(key, str):
                self._skip(key, f"its key is a {type(key).__name__}, not a str")
            elif value is None:
                self._skip(key, "None is not a number")
            elif isinstance(value, int) and not -_FLOAT_MAX <= value <= _FLOAT_MAX:
                self._skip(key, f"an int of {len(str(abs(value)))} digits is beyond float64")
            elif key in reserved:
                kept[self._columns(self.name, key)] = value
            else:
                kept[key] = value
        return kept

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self._held and self.log_interval.at_batch_end(state):
            self._hand_over_if_due()

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self._held and (self.log_interval.epochs == 0 or self.log_interval.at_epoch_end(state)):
            self._hand_over_if_due()

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        self._hand_over()

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._hand_over_and_flush()
        self._wait_for_client()

    @override
    def exception(self, state: State, logger: Logger) -> None:
        self._failed_run = True
        self._hand_over_and_flush()
        self._wait_for_client()

    def _budget(self) -> float:
        """How long to wait for the client now: ``close_timeout``, cut to the deadline the
        destinations share while the run ends, and nothing while it is still stuck."""
        if self._writer.stalled:
            return 0.0
        logger = self._logger
        return self.close_timeout if logger is None else logger.deadline.left(self.close_timeout)

    def _wait_for_client(self) -> None:
        self._writer.flush(timeout=self._budget())  # a timeout marks the writer stalled

    def _hand_over_and_flush(self) -> None:
        """Hand everything held over, then queue :meth:`_client_flush` (if the client has one)."""
        self._hand_over()
        if self._started and self._has("flush"):
            self._submit(self._client_flush)

    @override
    def close(self, state: State, logger: Logger) -> None:
        if not self._started:
            return
        self._hand_over()
        self._submit(self._client_finish, self._failed_run or state.exception is not None)
        self._gave_up = not self._writer.close(timeout=self._budget(), report=False)
        failures = self._writer.failures
        if self._gave_up:
            log.error(
                "obsbus: %s's client did not finish in time (close_timeout=%.1fs, one deadline "
                "for all destinations); %d write(s) were not delivered (the call running is "
                "left to finish; the rest are dropped).",
                self.name,
                self.close_timeout,
                self.undelivered_writes,
            )
            failures.lost(
                self.name,
                self.undelivered_writes - self._skipped,
                f"its client did not finish within the close deadline "
                f"(close_timeout={self.close_timeout:g}s, shared by all destinations)",
            )
        elif self._dropped:
            log.error("obsbus: %s dropped %d write(s); see above.", self.name, self._dropped)
            failures.lost(
                self.name, self._dropped, "its client made no progress; the queue was full"
            )
        if self._skipped:
            log.error(
                "obsbus: %s never started its client (see the first error above); "
                "%d write(s) were not delivered.",
                self.name,
                self._skipped,
            )
            failures.lost(self.name, self._skipped, "its client never started")
        self._started = self._client_ready = False
