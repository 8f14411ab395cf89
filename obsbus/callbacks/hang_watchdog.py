"""When training stops making progress, write where every thread of this rank is stuck."""

from __future__ import annotations

import contextlib
import faulthandler
import inspect
import logging
import os
import re
import socket
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from typing_extensions import override

from obsbus._check import check_folder, check_folder_at_init, check_seconds, is_number
from obsbus.callback import Callback
from obsbus.event import Event
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
THREAD_NAME = "obsbus-hang-watchdog"
_EVENT_NAMES = frozenset(e.value for e in Event)
_CUDA_WAIT_S = 5.0  # the allocator's lock may be held by the stuck thread: never wait on it long
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
            thread.join(timeout=self.exit_timeout + self.exit_grace + _CUDA_WAIT_S + 1.0)
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
            path = self._write(state, logger, stalled, limit, where, frames)
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
            lambda: self._hand_off(state, logger, path, title, text, exiting), self.exit_timeout
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

    def _hand_off(
        self, state: State, logger: Logger, path: Path | None, title: str, text: str, flush: bool
    ) -> None:
        """Upload, alert and (before exiting) flush, within ``exit_timeout`` in all."""
        deadline = time.monotonic() + self.exit_timeout
        if path is not None:
            logger.upload_file(remote_name(state, path), path, overwrite=True)
        for dest in logger.destinations:
            alert = getattr(dest, "alert", None)
            if callable(alert):
                try:
                    alert(title, text, level="error", file=path)
                except Exception:
                    log.exception("obsbus HangWatchdog: %s.alert failed.", type(dest).__name__)
        if not flush:
            return
        for name in ("flush", "wait_for_uploads"):
            for dest in logger.destinations:
                method = getattr(dest, name, None)
                if callable(method):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        log.warning(
                            "obsbus HangWatchdog: exit_timeout ran out before %s.%s.",
                            type(dest).__name__,
                            name,
                        )
                        continue
                    try:
                        call_bounded(method, left)
                    except Exception:
                        log.exception(
                            "obsbus HangWatchdog: %s.%s failed.", type(dest).__name__, name
                        )
        loguru = sys.modules.get("loguru")
        if loguru is not None:
            loguru.logger.complete()

    # ----------------------------------------------------------------- dumping
    def _folder_path(self, state: State, logger: Logger) -> Path:
        return state.run_folder.resolve(logger.format_name(self.dump_folder))

    def _write(
        self,
        state: State,
        logger: Logger,
        stalled: float,
        limit: float,
        where: dict[str, str],
        frames: dict[int, FrameType],
    ) -> Path:
        stamp = datetime.now(UTC)
        ts = state.timestamp
        info = state.rank_info
        lines = [
            f"obsbus HangWatchdog: no batch has ended for {stalled:.1f} s (timeout {limit:g} s)",
            "",
            f"rank: {info.rank} of {info.world_size} (local rank {info.local_rank}, "
            f"node {info.node_rank})",
            f"host: {socket.gethostname()}  pid: {os.getpid()}",
            f"run: {state.run_name}",
            f"time: {stamp.isoformat(timespec='seconds')}",
            f"epoch: {ts._epoch}  batch: {ts._batch}  batch in epoch: {ts._batch_in_epoch}",
            f"last event seen: {self._last_event}",
            f"event in progress: {where['event']}",
            f"blocked frame: {where['innermost']}",
            f"call site: {where['call_site']}",
            f"seconds since the last progress: {stalled:.1f}",
            "",
            "== Python stacks (training thread first) ==",
        ]
        me = threading.get_ident()
        names = {t.ident: t.name for t in threading.enumerate()}
        order = sorted(frames, key=lambda i: (i != self._train_ident, i))
        for ident in order:
            if ident == me:
                continue
            mark = " [training thread]" if ident == self._train_ident else ""
            lines.append(f"Thread {names.get(ident, '?')!r} (ident {ident}){mark}:")
            lines.append("".join(traceback.format_stack(frames[ident])).rstrip())
            lines.append("")
        lines += ["== faulthandler.dump_traceback(all_threads=True) ==", faulthandler_text(), ""]
        lines += ["== torch.cuda memory ==", *cuda_memory(state), ""]
        folder = self._folder_path(state, logger)
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"rank{info.rank}-{stamp.strftime('%Y%m%dT%H%M%SZ')}"
        path, n = folder / f"{stem}.txt", 1
        while path.exists():  # a second stall within the same second keeps the first dump
            n += 1
            path = folder / f"{stem}-{n}.txt"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(mask_secrets("\n".join(lines)), encoding="utf-8")
        os.replace(tmp, path)  # an uploader or a person never reads half a dump
        self.dumps.append(path)
        return path


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


def describe_stuck(frame: FrameType | None) -> dict[str, str]:
    """Where the training thread is: innermost frame, call site, the event and hook it is in."""
    if frame is None:
        gone = "the training thread has no Python frame (it ended)"
        return {"innermost": gone, "call_site": gone, "event": "unknown", "summary": gone}
    stack: list[FrameType] = []
    f: FrameType | None = frame
    while f is not None:
        stack.append(f)
        f = f.f_back
    stack.reverse()  # outermost first
    site = next((f for f in reversed(stack) if not _is_library(f.f_code.co_filename)), stack[-1])
    event = "none (not inside an obsbus event)"
    hooks = [
        f for f in stack if f.f_code.co_name in _EVENT_NAMES and "self" in f.f_code.co_varnames
    ]
    if hooks:
        hook = hooks[-1]
        event = f"{hook.f_code.co_name} (in {hook.f_code.co_qualname})"
    inner, call = _frame_text(stack[-1]), _frame_text(site)
    return {
        "innermost": inner,
        "call_site": call,
        "event": event,
        "summary": f"blocked in {inner}, called from {call}"
        if site is not stack[-1]
        else f"blocked in {inner}",
    }


def _frame_text(frame: FrameType) -> str:
    code = frame.f_code
    return f"{code.co_qualname} ({code.co_filename}:{frame.f_lineno})"


def _is_library(filename: str) -> bool:
    """Whether ``filename`` is torch's or the standard library's (site-packages is not)."""
    paths = sysconfig.get_paths()
    packages = (paths["purelib"] + os.sep, paths["platlib"] + os.sep)
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if isinstance(torch_file, str) and filename.startswith(os.path.dirname(torch_file) + os.sep):
        return True
    return filename.startswith(paths["stdlib"] + os.sep) and not filename.startswith(packages)


def faulthandler_text() -> str:
    """What ``faulthandler.dump_traceback`` writes (it needs a real file descriptor)."""
    with tempfile.TemporaryFile() as f:
        faulthandler.dump_traceback(f, all_threads=True)
        f.seek(0)
        return f.read().decode("utf-8", errors="replace").rstrip()


def cuda_memory(state: State) -> list[str]:
    """``torch.cuda.memory_stats`` lines, when this process initialized CUDA; read bounded."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return ["CUDA is not initialized in this process."]
    device = state.device
    if getattr(device, "type", None) == "cuda" and getattr(device, "index", None) is not None:
        devices = [device.index]
    else:
        devices = list(range(torch.cuda.device_count()))
    lines: list[str] = []

    def read() -> None:
        for index in devices:
            stats = torch.cuda.memory_stats(index)
            row = ", ".join(
                f"{key}={stats.get(key, 0) / 2**20:.1f} MiB"
                for key in (
                    "allocated_bytes.all.current",
                    "allocated_bytes.all.peak",
                    "reserved_bytes.all.current",
                    "reserved_bytes.all.peak",
                )
            )
            retries, ooms = stats.get("num_alloc_retries", 0), stats.get("num_ooms", 0)
            lines.append(f"cuda:{index}: {row}, num_alloc_retries={retries}, num_ooms={ooms}")

    if not bounded(read, _CUDA_WAIT_S):
        lines.append(
            f"not read within {_CUDA_WAIT_S:g} s (the stuck thread may hold the allocator)"
        )
    return lines


def bounded(fn: Callable[[], object], seconds: float) -> bool:
    """Run ``fn`` on a daemon thread; ``False`` if it did not end within ``seconds``."""

    def run() -> None:
        try:
            fn()
        except Exception:
            log.exception("obsbus HangWatchdog: %s failed.", getattr(fn, "__name__", fn))

    worker = threading.Thread(target=run, name=f"{THREAD_NAME}-work", daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


def call_bounded(method: Callable[..., Any], seconds: float) -> None:
    """``method(timeout=seconds)`` where it takes a timeout (and ``fsync=True``), else bounded."""
    params: Mapping[str, Any]
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs: dict[str, Any] = {}
    if "fsync" in params:
        kwargs["fsync"] = True
    if "timeout" in params:
        method(timeout=seconds, **kwargs)
    else:
        bounded(lambda: method(**kwargs), seconds)


def remote_name(state: State, path: Path) -> str:
    """``{run_name}/`` + the path inside the run folder (or the bare name outside it)."""
    try:
        inside = path.relative_to(state.run_folder.root).as_posix()
    except ValueError:
        inside = path.name
    return f"{state.run_name}/{inside}"
