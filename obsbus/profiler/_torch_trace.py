"""Helpers of :class:`~obsbus.profiler.torch_profiler.TorchProfiler`. Not API.

Argument checks, the obsbus -> ``torch.profiler`` action map, and the file
writing the background writer does (Chrome trace, memory timeline, memory
snapshot). torch is imported inside the functions, so ``import obsbus`` stays
light.
"""

from __future__ import annotations

import gzip
import importlib.util
import inspect
import json
import logging
import os
import pickle
import shutil
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from obsbus.errors import MissingExtraError, ObsbusWarning
from obsbus.naming import check_placeholders
from obsbus.profiler.profiler_action import ProfilerAction

if TYPE_CHECKING:
    from obsbus.callbacks._cuda_memory import MemoryHistory
    from obsbus.logger import Logger
    from obsbus.state import State
    from obsbus.writer import BackgroundWriter

log = logging.getLogger("obsbus")
RECORDING = frozenset({ProfilerAction.ACTIVE, ProfilerAction.ACTIVE_AND_SAVE})
json_dumps = json.dumps

#: Profiler keyword -> TorchProfiler keyword, for the settings the Profiler passes on.
PROFILER_ARGS = {
    "torch_prof_folder": "folder",
    "torch_prof_filename": "filename",
    "torch_prof_remote_file_name": "remote_file_name",
    "torch_prof_memory_filename": "memory_filename",
    "torch_prof_memory_remote_file_name": "memory_remote_file_name",
    "torch_prof_overwrite": "overwrite",
    "torch_prof_use_gzip": "use_gzip",
    "torch_prof_record_shapes": "record_shapes",
    "torch_prof_profile_memory": "profile_memory",
    "torch_prof_with_stack": "with_stack",
    "torch_prof_with_flops": "with_flops",
    "torch_prof_num_traces_to_keep": "num_traces_to_keep",
    "record_memory_history": "record_memory_history",
    "memory_snapshot_path": "memory_snapshot_path",
}


def defaults(cls: type) -> dict[str, Any]:
    """The keyword defaults of ``cls.__init__`` (one source of truth for the Profiler's)."""
    params = inspect.signature(cls).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


def check_unused(settings: Mapping[str, Any], profiler_defaults: Mapping[str, Any]) -> None:
    """Raise if a ``torch_prof_*`` setting differs from its default while torch profiling is off."""
    given = [
        f"{key}={value!r}"
        for key, value in settings.items()
        if key.startswith("torch_prof_") and value != profiler_defaults[key]
    ]
    if given:
        raise ValueError(
            f"Profiler({', '.join(given)}) has no effect without torch_prof_folder: "
            "torch.profiler runs only when torch_prof_folder names where its traces go. "
            "To fix, also pass torch_prof_folder='torch_traces' (relative to the run folder), "
            "or leave those arguments out."
        )


def check_template(name: str, value: object, *, optional: bool, suffix: str = "") -> str | None:
    """A file-name template with known placeholders (and ``suffix``), or ``None`` if allowed."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        accepted = "a non-empty str" + (" or None" if optional else "")
        raise TypeError(f"TorchProfiler {name} must be {accepted}, got {value!r}.")
    check_placeholders(value, f"TorchProfiler {name}")
    if suffix and not value.endswith(suffix):
        raise ValueError(
            f"TorchProfiler {name} {value!r} must end with {suffix!r}: torch writes the "
            f"memory timeline as HTML. To fix, use e.g. 'rank{{rank}}.{{batch}}.pt.memory{suffix}'."
        )
    return value


def check_memory_timeline(
    record_shapes: bool, profile_memory: bool, with_stack: bool, tracing: bool
) -> None:
    """torch's memory timeline needs all three recordings, traces on, and matplotlib."""
    if not tracing:
        raise ValueError(
            "TorchProfiler memory_filename needs torch.profiler traces: pass a folder "
            "(torch_prof_folder on the Profiler) too."
        )
    flags = {
        "record_shapes": record_shapes,
        "profile_memory": profile_memory,
        "with_stack": with_stack,
    }
    off = [f"{name}={value}" for name, value in flags.items() if not value]
    if off:
        raise ValueError(
            "TorchProfiler memory_filename is set, and torch's memory timeline needs "
            f"record_shapes, profile_memory and with_stack all True; got {', '.join(off)}. "
            "To fix, set them (torch_prof_record_shapes=True, ... on the Profiler), or pass "
            "memory_filename=None."
        )
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingExtraError("profiler", "TorchProfiler memory_filename (memory timeline HTML)")


def torch_actions() -> dict[ProfilerAction, Any]:
    """obsbus action -> ``torch.profiler.ProfilerAction``."""
    from torch.profiler import ProfilerAction as TorchAction

    return {
        ProfilerAction.SKIP: TorchAction.NONE,
        ProfilerAction.WARMUP: TorchAction.WARMUP,
        ProfilerAction.ACTIVE: TorchAction.RECORD,
        ProfilerAction.ACTIVE_AND_SAVE: TorchAction.RECORD_AND_SAVE,
    }


def activities(device: Any) -> list[Any]:
    """CPU always; CUDA when it exists and the run is not pinned to another device."""
    import torch
    from torch.profiler import ProfilerActivity

    found = [ProfilerActivity.CPU]
    on_cuda = device is None or torch.device(device).type == "cuda"
    if on_cuda and torch.cuda.is_available():
        found.append(ProfilerActivity.CUDA)
    return found


def memory_device(device: Any) -> str:
    """The device whose memory timeline torch plots (``cuda:N`` on CUDA, else ``cpu``)."""
    import torch

    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        index = torch.device(device).index
        return f"cuda:{torch.cuda.current_device() if index is None else index}"
    return "cpu"


def export_chrome_trace(results: Any, path: Path, use_gzip: bool) -> None:
    """Write a finished window (an autograd ``profile``) as a Chrome trace, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = path.with_name(f".{path.name}.{os.getpid()}.json.tmp")
    packed = path.with_name(f".{path.name}.{os.getpid()}.gz.tmp")
    try:
        results.export_chrome_trace(str(raw))
        if use_gzip:
            with open(raw, "rb") as src, gzip.open(packed, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(packed, path)
        else:
            os.replace(raw, path)
    finally:
        raw.unlink(missing_ok=True)
        packed.unlink(missing_ok=True)


def export_memory_timeline(results: Any, path: Path, device: str) -> None:
    """torch's memory timeline HTML for a finished window.

    What ``torch.profiler.profile.export_memory_timeline`` does, on the window's
    own results, so it can run off the training thread after the next window began.
    """
    from torch.profiler._memory_profiler import MemoryProfile, MemoryProfileTimeline

    path.parent.mkdir(parents=True, exist_ok=True)
    timeline = MemoryProfileTimeline(MemoryProfile(results.kineto_results))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.html")
    try:
        timeline.export_memory_timeline_html(str(tmp), device)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_pickle(path: Path, value: Any) -> None:
    """Pickle ``value`` to ``path`` atomically (what https://pytorch.org/memory_viz opens)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            pickle.dump(value, f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def contained(what: str, log: Any, fn: Callable[..., object], *args: Any) -> bool:
    """Run ``fn``; log and swallow an error (one failing hand-off must not stop the others)."""
    try:
        fn(*args)
    except Exception:
        log.exception("obsbus: TorchProfiler could not %s", what)
        return False
    return True


class HistoryRecorder:
    """``record_memory_history``: the CUDA allocator's history, and its snapshot at the end.

    Recording starts at ``fit_start`` (through the process-wide history that
    OOMObserver and MemorySnapshot share) and stops at ``close``; :meth:`dump`
    takes the snapshot on the training thread and pickles it on the writer.
    Without CUDA it warns once and does nothing. Tests set :attr:`history` to
    a fake.
    """

    def __init__(self, enabled: bool, path: str) -> None:
        self.enabled = enabled
        self.path = path
        self.history: MemoryHistory | None = None
        self.recording = False
        self._warned = False

    def start(self, state: State) -> None:
        if not self.enabled or self.recording:
            return
        if self.history is None:
            from obsbus.callbacks._cuda_memory import CUDA_HISTORY

            self.history = CUDA_HISTORY
        reason = self.history.unavailable_reason(state.device)
        if reason is None:
            self.history.start(self, 100_000, "python")  # Megatron's trace_alloc_max_entries
            self.recording = True
        elif not self._warned:
            self._warned = True
            warnings.warn(
                f"Profiler record_memory_history does nothing: {reason}. It records the CUDA "
                "allocator's memory history; leave it off on runs without CUDA.",
                ObsbusWarning,
                stacklevel=4,
            )

    def dump(
        self, state: State, logger: Logger, writer: BackgroundWriter, written: list[Path]
    ) -> None:
        if not self.recording or self.history is None:
            return
        path = state.run_folder.resolve(logger.format_name(self.path))
        try:
            snapshot = self.history.snapshot()
        except Exception:
            log.exception("obsbus: Profiler record_memory_history: no snapshot for %s", path)
            return
        remote = f"{state.run_name}/memory_snapshots/{path.name}"
        writer.submit(_write_snapshot, path, snapshot, logger, remote, written)

    def stop(self) -> None:
        if self.recording and self.history is not None:
            self.history.stop(self)
        self.recording = False


def _write_snapshot(
    path: Path, snapshot: Any, logger: Logger, remote: str, written: list[Path]
) -> None:
    write_pickle(path, snapshot)
    written.append(path)
    log.info("obsbus: memory snapshot written: %s", path)
    if logger.has_file_uploader():
        logger.upload_file(remote, path, overwrite=True)
