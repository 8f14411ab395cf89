"""The run folder: one place per run where every destination keeps its files."""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass
from pathlib import Path

from obsbus._check import NotAFolderError, check_str

__all__ = ["RunFolder"]

_SAFE = re.compile(r"^[A-Za-z0-9._@+=-]+$")


def os_user() -> str:
    """The OS user name (``$USER`` or ``user`` where there is no passwd entry)."""
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return os.environ.get("USER", "user")


def _check_part(name: str, value: object) -> str:
    check_str("RunFolder", name, value)
    assert isinstance(value, str)
    if not _SAFE.match(value) or value in (".", ".."):
        raise ValueError(
            f"RunFolder {name} {value!r} can't be a folder name: use letters, digits and "
            "'._@+=-' only (no '/', spaces or '..')."
        )
    return value


@dataclass(frozen=True)
class RunFolder:
    """Where a run's files live, rank-aware and known to every destination.

    By default the folder is ``{workspace}/{work_group}/{user_name}/{exp_name}``
    (Primus's experiment root) with defaults ``./runs``, ``default``, the OS
    user and the run name; ``RunFolder("path/to/folder")`` overrides it as
    one path. Layout::

        {root}/
            logs/{module}/rank-{rank}/   rank-aware loguru logs (debug/info/warning/error)
            logs/master/                 the launcher process's log (is_head=True)
            tensorboard/                 TensorBoard event files
            traces/                      profiler traces
            memory_snapshots/            CUDA memory snapshots (OOMObserver, MemorySnapshot)
            checkpoints/                 checkpoints
            config/                      resolved configuration

    Relative file names given to destinations (``FileLogger("metrics.txt")``)
    resolve against ``root`` (:meth:`resolve`). Folders are made on first use.

    Example:
        >>> folder = RunFolder.from_parts(workspace="/tmp/runs", user_name="ada", exp_name="lm-1")
        >>> str(folder.root), str(folder.logs_dir("train", rank=3))
        ('/tmp/runs/default/ada/lm-1', '/tmp/runs/default/ada/lm-1/logs/train/rank-3')
        >>> str(RunFolder("/data/my-run").resolve("metrics.txt"))
        '/data/my-run/metrics.txt'
        >>> folder.work_group, folder.user_name  # trackers' default project: default_ada
        ('default', 'ada')
    """

    root: Path
    #: The team or group the run belongs to (Primus's ``work_group``): trackers
    #: name their default project ``{work_group}_{user_name}`` from it.
    work_group: str
    #: Who runs it (Primus's ``user_name``; default the OS user).
    user_name: str

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        work_group: str = "default",
        user_name: str | None = None,
    ) -> None:
        if not isinstance(root, (str, os.PathLike)) or str(root) == "":
            raise TypeError(f"RunFolder root must be a non-empty path, got {root!r}.")
        # The same rule as from_parts: trackers name projects after these, and from_parts
        # builds the folder from them, so a '/' or '..' must not slip in through here.
        _check_part("work_group", work_group)
        if user_name is not None:
            _check_part("user_name", user_name)
        object.__setattr__(self, "work_group", work_group)
        object.__setattr__(self, "user_name", user_name if user_name is not None else os_user())
        path = Path(root).expanduser()
        if path.exists() and not path.is_dir():
            raise NotAFolderError(
                f"RunFolder root {str(path)!r} exists and is not a directory. To fix, remove "
                "the file or choose another run folder."
            )
        object.__setattr__(self, "root", path.absolute())

    @classmethod
    def from_parts(
        cls,
        *,
        exp_name: str,
        workspace: str | os.PathLike[str] | None = None,
        work_group: str = "default",
        user_name: str | None = None,
    ) -> RunFolder:
        """``{workspace}/{work_group}/{user_name}/{exp_name}``.

        ``workspace`` defaults to ``$OBSBUS_WORKSPACE`` or ``./runs``; ``user_name``
        to the OS user.
        """
        workspace = workspace or os.environ.get("OBSBUS_WORKSPACE") or "./runs"
        user = user_name if user_name is not None else os_user()
        parts = (
            _check_part("work_group", work_group),
            _check_part("user_name", user),
            _check_part("exp_name", exp_name),
        )
        return cls(Path(workspace).joinpath(*parts), work_group=work_group, user_name=user)

    @classmethod
    def coerce(cls, value: str | os.PathLike[str] | RunFolder | None, run_name: str) -> RunFolder:
        """A ``RunFolder`` from what a user passed: one, a path, or ``None`` (the default)."""
        if isinstance(value, RunFolder):
            return value
        if value is None:
            env = os.environ.get("OBSBUS_RUN_FOLDER")
            return cls(env) if env else cls.from_parts(exp_name=run_name)
        if isinstance(value, (str, os.PathLike)):
            return cls(value)
        raise TypeError(f"run_folder must be a path or a RunFolder, got {value!r}.")

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """``path`` if absolute, else ``root / path``."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.root / p

    def logs_dir(self, module: str, rank: int) -> Path:
        """``logs/{module}/rank-{rank}``, a worker's log folder."""
        return self.root / "logs" / _check_part("module", module) / f"rank-{rank}"

    @property
    def master_logs_dir(self) -> Path:
        """``logs/master``, the launcher's log folder."""
        return self.root / "logs" / "master"

    @property
    def tensorboard_dir(self) -> Path:
        return self.root / "tensorboard"

    @property
    def traces_dir(self) -> Path:
        return self.root / "traces"

    @property
    def checkpoints_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    def __str__(self) -> str:
        return str(self.root)
