"""When training stops making progress, write where every thread of this rank is stuck."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from typing_extensions import override

from obsbus._check import check_folder, check_folder_at_init, check_seconds, is_number
from obsbus.callback import Callback
from obsbus.callbacks._watchdog_dump import (
    CUDA_WAIT_S,
    THREAD_NAME,
    bounded,
    describe_stuck,
    hand_off,
    write_dump,
)
from obsbus.logger import Logger
from obsbus.masking import mask_secrets
from obsbus.naming import check_placeholders
from obsbus.state import State
from obsbus.time import Time, TimeUnit

__all__ = ["EXIT_CODE", "HangWatchdog"]

log = logging.getLogger("obsbus")

#: The exit status of a process that ``on_hang="dump_and_exit"`` ended (``HangWatchdog.EXIT_CODE``).
EXIT_CODE = 87
ON_HANG = ("dump", "dump_and_exit")
_DURATION = "seconds (a number > 0), a datetime.timedelta, or a string such as '30min', '90s', '2h'"


class HangWatchdog(Callback):
    """Dumps every thread's Python stack when no batch has ended for ``timeout``.

    A background thread (``obsbus-hang-watchdog``, a daemon) watches a counter
    that ``batch_end``, ``eval_batch_end`` and ``predict_batch_end`` bump: the
    training thread pays one integer increment and one attribute store per
    batch (no lock, no clock read, no syscall); the watchdog samples the
    counter every ``poll_interval`` seconds and measures staleness on its own
    clock, so a hang is seen within ``timeout + poll_interval``. (A counter,
    not a timestamp: even ``time.monotonic()``, a vDSO call on Linux, is a C
    call per batch; the counter needs none.) It watches from ``fit_start`` to
    ``fit_end`` (or ``exception``, ``close``), and an evaluation or prediction
    outside a fit from its start event to its end event. When the counter
    has not moved for ``timeout`` (before the first batch of a watch:
    ``first_batch_timeout``) this rank writes
    ``{dump_folder}/rank{rank}-{time}.txt`` (relative to the run folder unless
    absolute; ``{time}`` is UTC, ``20261203T114500Z``) holding:

    - the summary: rank (of world size), host, pid, run name, epoch, batch,
      the last event seen (the latest of ``fit_start``, ``epoch_start``,
      ``batch_end``, ``epoch_end``, ``eval_start``, ``eval_batch_end``,
      ``eval_end``, ``predict_batch_end``, which it hooks), the event and hook
      in progress when the training thread is stuck inside one (read from
      that thread's frames, at no cost per step), seconds since the last
      progress;
    - the blocked frame: the training thread's innermost Python frame, and
      its call site (the innermost frame outside torch and the standard
      library), as ``function (file:line)``;
    - the Python stack of every thread (``traceback``, training thread first),
      then ``faulthandler.dump_traceback(all_threads=True)``;
    - when this process already initialized CUDA (never initialized here),
      ``torch.cuda.memory_stats`` of its devices (read in at most 5 s).

    The text is masked (:func:`~obsbus.masking.mask_secrets`). Then it logs
    an error on the ``obsbus`` logger, hands the file to
    ``logger.upload_file`` as ``{run_name}/{path in the run folder}`` (from
    the watchdog thread, which destinations accept: see
    :class:`~obsbus.LoggerDestination`), and calls
    ``alert(title, text, *, level="error", file=path)`` on every destination
    that has one (alert destinations such as a Slack logger); a failing
    upload or alert is logged and never escapes. One stall dumps once; when
    batches resume a warning says so and the watch re-arms.

    With ``on_hang="dump_and_exit"`` it then flushes each destination that has
    a public ``flush`` (a :class:`~obsbus.loggers.FileLogger` writes and fsyncs
    its metrics) and waits for ``wait_for_uploads``, all within
    ``exit_timeout`` seconds, waits ``exit_grace`` seconds, and ends the
    process with ``os._exit(HangWatchdog.EXIT_CODE)`` (87), so a scheduler can tell a hang
    from a crash and restart the job. No ``close`` runs: the training thread
    is stuck.

    Across ranks there is no collective (a collective is what hangs): each
    rank times itself and writes its own file, which names its rank and last
    event. A thread that holds the GIL forever (a C extension spinning
    without releasing it) stops this thread too; stuck collectives, I/O and
    sleeps release it.

    Keys: none; it writes files.

    Args:
        timeout: how long without a finished batch counts as a hang.
        first_batch_timeout: the allowance before the first batch of each watch
            (compilation, data loader start-up); ``None``: ``timeout``, so a
            first collective that never completes is caught as well.
        dump_folder: where the dumps go; placeholders (``{run_name}``,
            ``{rank}``, ...) allowed.
        on_hang: ``"dump"`` (training goes on waiting) or ``"dump_and_exit"``.
        poll_interval: seconds between two looks at the counter; ``None``:
            ``timeout / 10``, between 0.01 s and 5 s.
        exit_timeout: the seconds the uploads, alerts and, before exiting,
            the flushes may take in all.
        exit_grace: with ``dump_and_exit``, the seconds to wait after the
            dump before exiting, so that the other ranks, whose timers run a
            little behind, write their dumps before this rank's exit breaks
            their stuck collective (they would fail with an error instead).

    Example:
        >>> import tempfile, time
        >>> from obsbus import Callback, Run
        >>> class Stuck(Callback):
        ...     def batch_end(self, state, logger):
        ...         if state.timestamp.batch.value == 2:
        ...             time.sleep(0.6)
        >>> dog = HangWatchdog(timeout=0.2)
        >>> with Run(max_duration="3ba", callbacks=[Stuck(), dog],
        ...          run_folder=tempfile.mkdtemp()) as run:
        ...     for batch in run.train([[1.0]] * 3):
        ...         pass
        >>> [p.name.startswith("rank0-") for p in dog.dumps]
        [True]
        >>> "in Stuck.batch_end" in dog.dumps[0].read_text()
        True
    """

    EXIT_CODE = EXIT_CODE

    def __init__(
        self,
        timeout: float | str | timedelta = "30min",
        first_batch_timeout: float | str | timedelta | None = None,
        dump_folder: str = "hangs",
        on_hang: str = "dump",
        *,
        poll_interval: float | None = None,
        exit_timeout: float = 30.0,
        exit_grace: float = 30.0,
    ) -> None:
        self.timeout = wall_seconds("HangWatchdog", "timeout", timeout)
        self.first_batch_timeout = (
            self.timeout
            if first_batch_timeout is None
            else wall_seconds("HangWatchdog", "first_batch_timeout", first_batch_timeout)
        )
        self.dump_folder = check_placeholders(dump_folder, "HangWatchdog dump_folder")
        check_folder("HangWatchdog", "dump_folder", dump_folder)
        if on_hang not in ON_HANG:
            raise ValueError(f"HangWatchdog on_hang must be one of {ON_HANG}, got {on_hang!r}.")
        self.on_hang = on_hang
        self.poll_interval = (
            min(max(self.timeout / 10, 0.01), 5.0)
            if poll_interval is None
            else check_seconds("HangWatchdog", "poll_interval", poll_interval)
        )
        self.exit_timeout = check_seconds("HangWatchdog", "exit_timeout", exit_timeout)
        self.exit_grace = check_seconds("HangWatchdog", "exit_grace", exit_grace, allow_zero=True)
        #: The dump files written so far, in order (for tools and tests).
        self.dumps: list[Path] = []
        self._beats = 0  # batches ended; the only thing the training thread writes per batch
        self._last_event = "init"
        self._state: State | None = None
        self._logger: Logger | None = None
        self._train_ident: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._until = ""  # the event that ends the current watch

    # ------------------------------------------------------------------ hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        check_folder_at_init("HangWatchdog", "dump_folder", self._folder_path(state, logger))

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._stop_thread()  # a fit always watches from its own start
        self._start(state, logger, "fit_start", "fit_end")

    # An evaluation or prediction outside a fit is watched too; inside one, the fit's watch
    # goes on (the batch-end counter is the same).
    @override
    def eval_standalone_start(self, state: State, logger: Logger) -> None:
        if self._thread is None:
            self._start(state, logger, "eval_standalone_start", "eval_standalone_end")

    @override
    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        self._end("eval_standalone_end")

    @override
    def predict_start(self, state: State, logger: Logger) -> None:
        if self._thread is None:
            self._start(state, logger, "predict_start", "predict_end")
        else:
            self._last_event = "predict_start"

    @override
    def predict_end(self, state: State, logger: Logger) -> None:
        self._end("predict_end")

    def _start(self, state: State, logger: Logger, event: str, until: str) -> None:
        self._state, self._logger = state, logger
        self._last_event = event
        self._until = until
        self._train_ident = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, args=(self._stop,), name=THREAD_NAME, daemon=True
        )
        self._thread.start()

    def _end(self, event: str) -> None:
        self._last_event = event
        if self._until == event:
            self._stop_thread()

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        self._beats += 1
        self._last_event = "batch_end"

    @override
    def eval_batch_end(self, state: State, logger: Logger) -> None:
        self._beats += 1
        self._last_event = "eval_batch_end"

    @override
    def predict_batch_end(self, state: State, logger: Logger) -> None:
        self._beats += 1
        self._last_event = "predict_batch_end"

    # Once per epoch or evaluation: they only say where the run was.
    @override
    def epoch_start(self, state: State, logger: Logger) -> None:
        self._last_event = "epoch_start"

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        self._last_event = "epoch_end"

    @override
    def eval_start(self, state: State, logger: Logger) -> None:
        self._last_event = "eval_start"

    @override
    def eval_end(self, state: State, logger: Logger) -> None:
        self._last_event = "eval_end"

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        self._end("fit_end")

    @override
    def exception(self, state: State, logger: Logger) -> None:
        self._last_event = "exception"
        self._stop_thread()

    @override
    def close(self, state: State, logger: Logger) -> None:
        self._stop_thread()

    def _stop_thread(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # A dump under way finishes (and with dump_and_exit, exits) before the run goes on.
            thread.join(timeout=self.exit_timeout + self.exit_grace + CUDA_WAIT_S + 1.0)
        self._thread = None

    # --------------------------------------------------------------- watching
    def _watch(self, stop: threading.Event) -> None:
        seen = first = self._beats
        since = time.monotonic()
        fired = False
        while True:
            stopping = stop.wait(self.poll_interval)
            beats, now = self._beats, time.monotonic()
            if beats != seen:
                if fired:  # also when the fit ended before the next look
                    log.warning(
                        "obsbus HangWatchdog: batches resumed after %.1f s without progress.",
                        now - since,
                    )
                seen, since, fired = beats, now, False
            if stopping:
                return
            limit = self.first_batch_timeout if beats == first else self.timeout
            if not fired and now - since >= limit:
                fired = True
                try:
                    self._on_hang(now - since, limit)
                except Exception:  # the watchdog must never take the process down by itself
                    log.exception("obsbus HangWatchdog failed while reporting a hang.")

    def _on_hang(self, stalled: float, limit: float) -> None:
        state, logger = self._state, self._logger
        assert state is not None
        assert logger is not None
        frames = sys._current_frames()
        train = frames.get(self._train_ident) if self._train_ident is not None else None
        where = describe_stuck(train)
        path: Path | None = None
        try:
            path = write_dump(
                self._folder_path(state, logger),
                state,
                stalled=stalled,
                limit=limit,
                last_event=self._last_event,
                where=where,
                frames=frames,
                train_ident=self._train_ident,
            )
            self.dumps.append(path)
        except Exception:
            log.exception("obsbus HangWatchdog could not write its dump file.")
        title = f"Hang on rank {state.rank} of run {state.run_name}"
        text = mask_secrets(
            f"Rank {state.rank} of {state.world_size}: no batch has ended for {stalled:.1f} s "
            f"(timeout {limit:g} s) at epoch {state.timestamp._epoch}, batch "
            f"{state.timestamp._batch}; last event {self._last_event}; {where['summary']}. "
            f"Stacks of every thread: {path if path is not None else 'not written'}."
        )
        log.error("obsbus HangWatchdog: %s", text)
        exiting = self.on_hang == "dump_and_exit"
        bounded(
            lambda: hand_off(state, logger, path, title, text, exiting, self.exit_timeout),
            self.exit_timeout,
        )
        if exiting:
            # The other ranks' timers run a little behind this one's; exiting at once would
            # break their stuck collective before they dump (they would crash, undumped).
            time.sleep(self.exit_grace)
            log.error("obsbus HangWatchdog: exiting with code %d.", EXIT_CODE)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):  # a closed or odd stream: exit anyway
                    stream.flush()
            os._exit(EXIT_CODE)

    # ----------------------------------------------------------------- dumping
    def _folder_path(self, state: State, logger: Logger) -> Path:
        return state.run_folder.resolve(logger.format_name(self.dump_folder))


def wall_seconds(owner: str, name: str, value: object) -> float:
    """``value`` (seconds, a ``timedelta``, ``"30min"``, ``"90s"``, ``"1h30m"``) as seconds > 0."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, str):
        text = re.sub(r"(?<=\d)(?:mins?|minutes?)(?=\d|$)", "m", value.strip().lower())
        try:
            parsed = Time.from_timestring(text)
        except (TypeError, ValueError):
            parsed = None
        if parsed is None or parsed.unit is not TimeUnit.SECOND or not parsed.value > 0:
            raise ValueError(f"{owner} {name} must be {_DURATION}, got {value!r}.")
        return float(parsed.value)
    if not is_number(value):
        raise TypeError(f"{owner} {name} must be {_DURATION}, got {value!r}.")
    return check_seconds(owner, name, value)
