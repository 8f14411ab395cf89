"""What :class:`~obsbus.callbacks.HangWatchdog` does about a hang: the dump, and handing it on.

The dump file says where every thread of this rank is stuck; it is then
uploaded, alerted about and, before an exit, the destinations are flushed.
Everything here runs on the watchdog's thread while the training thread is
stuck, so nothing waits on it unbounded: the CUDA allocator's statistics are
read within :data:`CUDA_WAIT_S` seconds, and the hand-off within its
timeout, on threads of their own. Not API.
"""

from __future__ import annotations

import faulthandler
import inspect
import logging
import os
import socket
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from obsbus.callbacks._run_files import atomic_write, remote_name
from obsbus.event import Event
from obsbus.logger import Logger
from obsbus.masking import mask_secrets
from obsbus.state import State

__all__ = [
    "CUDA_WAIT_S",
    "THREAD_NAME",
    "bounded",
    "call_bounded",
    "cuda_memory",
    "describe_stuck",
    "hand_off",
    "write_dump",
]

log = logging.getLogger("obsbus")

THREAD_NAME = "obsbus-hang-watchdog"
CUDA_WAIT_S = 5.0  # the allocator's lock may be held by the stuck thread: never wait on it long
_EVENT_NAMES = frozenset(e.value for e in Event)


def write_dump(
    folder: Path,
    state: State,
    *,
    stalled: float,
    limit: float,
    last_event: str,
    where: Mapping[str, str],
    frames: Mapping[int, FrameType],
    train_ident: int | None,
) -> Path:
    """Write the dump file into ``folder`` (atomically, masked) and return its path.

    ``where`` is :func:`describe_stuck` of the training thread (``train_ident``),
    ``frames`` is ``sys._current_frames()``; this thread's own frame is left out.
    """
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
        f"last event seen: {last_event}",
        f"event in progress: {where['event']}",
        f"blocked frame: {where['innermost']}",
        f"call site: {where['call_site']}",
        f"seconds since the last progress: {stalled:.1f}",
        "",
        "== Python stacks (training thread first) ==",
    ]
    me = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    order = sorted(frames, key=lambda i: (i != train_ident, i))
    for ident in order:
        if ident == me:
            continue
        mark = " [training thread]" if ident == train_ident else ""
        lines.append(f"Thread {names.get(ident, '?')!r} (ident {ident}){mark}:")
        lines.append("".join(traceback.format_stack(frames[ident])).rstrip())
        lines.append("")
    lines += ["== faulthandler.dump_traceback(all_threads=True) ==", faulthandler_text(), ""]
    lines += ["== torch.cuda memory ==", *cuda_memory(state), ""]
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"rank{info.rank}-{stamp.strftime('%Y%m%dT%H%M%SZ')}"
    path, n = folder / f"{stem}.txt", 1
    while path.exists():  # a second stall within the same second keeps the first dump
        n += 1
        path = folder / f"{stem}-{n}.txt"
    text = mask_secrets("\n".join(lines)).encode("utf-8")
    atomic_write(path, lambda f: f.write(text))
    return path


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

    if not bounded(read, CUDA_WAIT_S):
        lines.append(f"not read within {CUDA_WAIT_S:g} s (the stuck thread may hold the allocator)")
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


def hand_off(
    state: State,
    logger: Logger,
    path: Path | None,
    title: str,
    text: str,
    flush: bool,
    timeout: float,
) -> None:
    """Upload the dump, alert and (before exiting, ``flush``) flush, within ``timeout`` in all.

    An alert destination's ``alert(title, text, *, level, file)`` is called;
    with ``flush``, every destination's public ``flush`` and
    ``wait_for_uploads``, each within what is left of ``timeout``.
    """
    deadline = time.monotonic() + timeout
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
                    log.exception("obsbus HangWatchdog: %s.%s failed.", type(dest).__name__, name)
    loguru = sys.modules.get("loguru")
    if loguru is not None:
        loguru.logger.complete()


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
