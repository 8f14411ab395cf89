"""The CUDA allocator's memory history and snapshot files, shared by OOMObserver and MemorySnapshot.

Not API. The allocator keeps one history per process, so every plug-in that
records goes through one :class:`MemoryHistory` (``CUDA_HISTORY``), which
turns recording on for the first owner and off after the last. Tests give a
plug-in a subclass whose low-level calls are fakes, so the file writing,
naming and uploading run on a CPU-only machine.
"""

from __future__ import annotations

import logging
import pickle
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus._check import check_bool, check_folder, check_folder_at_init, check_int
from obsbus.callback import Callback
from obsbus.callbacks._run_files import atomic_write, remote_name
from obsbus.errors import ObsbusWarning
from obsbus.naming import check_placeholders

if TYPE_CHECKING:
    from obsbus.logger import Logger
    from obsbus.state import State

log = logging.getLogger("obsbus")

#: ``(device, bytes requested, device capacity (or the allowed fraction) in bytes, bytes free)``.
OomCallback = Callable[[int, int, int, int], None]
STACKS = ("python", "all")
SNAPSHOT_FOLDER = "memory_snapshots"


class MemoryHistory:
    """The allocator's alloc/free history, shared by every owner in the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: dict[object, tuple[int, str]] = {}
        self._recording: tuple[int, str] | None = None
        self._observers: dict[object, OomCallback] = {}
        self._attached = False

    # ------------------------------------------------------- overridden by fakes
    def unavailable_reason(self, device: Any) -> str | None:
        """Why there is no CUDA history to record for a run on ``device``; ``None`` if there is."""
        import torch

        if device is not None and torch.device(device).type != "cuda":
            return f"the run is on {str(device)!r}, not on a CUDA device"
        if not torch.cuda.is_available():
            return "CUDA is not available on this machine"
        return None

    def _record(self, setting: tuple[int, str] | None) -> None:
        import torch

        if setting is None:
            torch.cuda.memory._record_memory_history(None)
        else:
            max_entries, stacks = setting
            torch.cuda.memory._record_memory_history("all", stacks=stacks, max_entries=max_entries)

    def _attach(self, dispatch: OomCallback) -> bool:
        import torch

        # Not in torch's stubs; missing from builds without CUDA.
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return False
        attach(dispatch)
        return True

    def snapshot(self) -> dict[str, Any]:
        """``torch.cuda.memory._snapshot()``: segments, blocks and the recorded trace."""
        import torch

        return torch.cuda.memory._snapshot()  # type: ignore[no-any-return]

    # -------------------------------------------------------------- shared logic
    def start(self, owner: object, max_entries: int, stacks: str) -> None:
        """Record for ``owner``: the most entries and the most stacks any owner asked for."""
        with self._lock:
            self._owners[owner] = (max_entries, stacks)
            self._apply()

    def stop(self, owner: object) -> None:
        """``owner`` no longer needs the history; recording ends after the last owner."""
        with self._lock:
            if self._owners.pop(owner, None) is not None:
                self._apply()

    def is_recording(self, owner: object) -> bool:
        return owner in self._owners

    def _apply(self) -> None:
        if not self._owners:
            wanted: tuple[int, str] | None = None
        else:
            entries = max(e for e, _ in self._owners.values())
            stacks = "all" if any(s == "all" for _, s in self._owners.values()) else "python"
            # Never shrink a running buffer: that would drop another owner's entries.
            if self._recording is not None:
                entries = max(entries, self._recording[0])
            wanted = (entries, stacks)
        if wanted != self._recording:
            self._record(wanted)
            self._recording = wanted

    def add_oom_observer(self, owner: object, callback: OomCallback) -> bool:
        """Call ``callback`` when the allocator runs out of memory; ``False`` if it can't.

        torch has no way to detach an observer, so one dispatcher is attached
        per process, the first time, and owners come and go behind it.
        """
        with self._lock:
            if not self._attached:
                self._attached = self._attach(self._dispatch)
            if self._attached:
                self._observers[owner] = callback
            return self._attached

    def remove_oom_observer(self, owner: object) -> None:
        with self._lock:
            self._observers.pop(owner, None)

    def _dispatch(self, device: int, alloc: int, total: int, free: int) -> None:
        # Runs inside the failing allocation: an error escaping here would replace the OOM.
        with self._lock:
            callbacks = list(self._observers.values())
        for callback in callbacks:
            try:
                callback(device, alloc, total, free)
            except Exception:
                log.exception("obsbus: an out-of-memory observer failed")


CUDA_HISTORY = MemoryHistory()


def find_oom(exc: BaseException | None) -> BaseException | None:
    """``exc``, or the error it was raised from, if it is a ``torch.OutOfMemoryError``."""
    import torch

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, torch.OutOfMemoryError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def check_max_entries(owner: str, value: object) -> int:
    try:
        return check_int(owner, "max_entries", value, minimum=1)
    except ValueError as exc:
        raise ValueError(
            f"{exc} Each entry costs a few KB of host memory; 100000 (Composer's default) "
            "keeps the last ~100k allocations."
        ) from None


def check_stacks(owner: str, value: object) -> str:
    if value not in STACKS:
        raise ValueError(
            f"{owner} stacks must be 'python' (Python frames; fast to snapshot) or 'all' "
            f"(also C++ frames; symbolizing them can take minutes), got {value!r}."
        )
    return str(value)


class SnapshotFiles:
    """Writes a snapshot as ``{stem}.pickle`` and ``{stem}.html`` and hands both to the logger.

    ``folder`` (relative to the run folder unless absolute) and ``filename``
    take the file-name placeholders, filled when the files are written.
    """

    def __init__(self, owner: str, folder: str, filename: str, html: bool, upload: bool) -> None:
        self.owner = owner
        self.folder = check_placeholders(folder, f"{owner} folder")
        check_folder(owner, "folder", folder)  # an absolute one now; a relative one at init
        self.filename = check_placeholders(filename, f"{owner} filename")
        self.html = check_bool(owner, "html", html)
        self.upload = check_bool(owner, "upload", upload)

    def check_folder(self, state: State, logger: Logger) -> None:
        """At ``init``: a file where the folder goes fails now, not at the first snapshot."""
        folder = state.run_folder.resolve(logger.format_name(self.folder))
        check_folder_at_init(self.owner, "folder", folder)

    def stem(self, state: State, logger: Logger) -> Path:
        folder = state.run_folder.resolve(logger.format_name(self.folder))
        return folder / logger.format_name(self.filename)

    def write(self, state: State, logger: Logger, snapshot: Any, stem: Path) -> list[Path]:
        """Write the pickle (what https://pytorch.org/memory_viz opens) and the HTML timeline."""
        stem.parent.mkdir(parents=True, exist_ok=True)
        paths = [stem.with_name(stem.name + ".pickle")]
        atomic_write(paths[0], lambda f: pickle.dump(snapshot, f))
        if self.html:
            from torch.cuda._memory_viz import trace_plot

            page = trace_plot(snapshot).encode("utf-8")  # type: ignore[no-untyped-call]
            paths.append(stem.with_name(stem.name + ".html"))
            atomic_write(paths[1], lambda f: f.write(page))
        if self.upload:
            for path in paths:
                logger.upload_file(remote_name(state, path), path, overwrite=True)
        return paths


class CudaCheck:
    """Decides once whether a plug-in has a CUDA history to record, and warns once if not."""

    __slots__ = ("enabled", "owner")

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.enabled: bool | None = None

    def __call__(self, history: MemoryHistory, state: State) -> bool:
        if self.enabled is None:
            reason = history.unavailable_reason(state.device)
            self.enabled = reason is None
            if reason is not None:
                warnings.warn(
                    f"{self.owner} does nothing: {reason}. It records the CUDA allocator's "
                    "memory history; remove it from callbacks on runs without CUDA.",
                    ObsbusWarning,
                    stacklevel=2,
                )
        return self.enabled


class SnapshotRecorder(Callback):
    """A callback that records the CUDA allocator's history and writes snapshots of it.

    What :class:`~obsbus.callbacks.MemorySnapshot` and
    :class:`~obsbus.callbacks.OOMObserver` share: the checked settings, the
    files, the history (shared by every recorder of the process), the one
    CUDA check, and the folder checked at ``init``.
    """

    def __init__(
        self,
        owner: str,
        max_entries: object,
        stacks: object,
        files: tuple[str, str, bool, bool],
    ) -> None:
        self.max_entries = check_max_entries(owner, max_entries)
        self.stacks = check_stacks(owner, stacks)
        self.files = SnapshotFiles(owner, *files)
        self._history: MemoryHistory = CUDA_HISTORY
        self._cuda = CudaCheck(owner)
        #: The files written so far, in order (for tools and tests).
        self.written: list[Path] = []

    @override
    def init(self, state: State, logger: Logger) -> None:
        self.files.check_folder(state, logger)
        self._cuda(self._history, state)
