"""Log to Neptune (the ``neptune`` 1.x client), from a background thread, under namespaces."""

from __future__ import annotations

import importlib.util
import logging
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from typing_extensions import override

from obsbus._check import check_bool
from obsbus.errors import MissingExtraError
from obsbus.loggers._tracker import RunInfo, TrackerDestination
from obsbus.loggers._tracker_media import hold_images, hold_table, image_arrays, table_rows
from obsbus.time import TimeLike
from obsbus.values import HostValues

__all__ = ["NeptuneLogger"]

log = logging.getLogger("obsbus")

_MODES = ("async", "sync", "offline", "debug")
_ONLINE = ("async", "sync")
_OWN_KWARGS = ("project", "name", "mode", "tags")
# Defaults obsbus changes, each overridable through neptune_kwargs: the console
# capture swaps sys.stdout/sys.stderr process-wide from the thread that starts
# the run (FileLogger captures the console instead), and obsbus records git itself.
_DEFAULTS = {"capture_stdout": False, "capture_stderr": False, "git_ref": False}


def _namespace(cls: str, what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{cls} {what} must be a str, got {value!r}.")
    if value.startswith("/") or value.endswith("/") or "//" in value:
        raise ValueError(
            f"{cls} {what} must be a Neptune path like 'training' or 'a/b' (no leading, "
            f"trailing or double '/'), got {value!r}."
        )
    return value


def _path(*parts: str) -> str:
    """A Neptune path: the parts joined by ``/``, without empty segments."""
    return "/".join(seg for part in parts for seg in part.split("/") if seg)


class NeptuneLogger(TrackerDestination):
    """Logs metrics, parameters, files, images and tables to a Neptune run.

    ``neptune`` (1.x) is imported and its run started, fed and stopped on a
    background thread only: the import alone takes seconds. Where things go
    (``training`` and ``parameters`` are the defaults of ``base_namespace``
    and ``params_namespace``):

    - metrics: ``run["training/<key>"].append(value, step=step)`` with the
      obsbus step, e.g. ``training/loss/train/total``. Neptune wants each
      series' steps strictly increasing: a value for a step not after the
      last one written to its series is dropped, counted in
      :attr:`late_values` and warned about once. NaN/inf are skipped (Neptune
      can't store them), as are values that are neither numbers nor strings;
      each key is warned about once.
    - hyperparameters (flattened with ``/``) and the environment
      (``env__NAME``, secrets dropped), masked (:mod:`obsbus.masking`):
      ``parameters/<key>``; values Neptune can't store (None, lists) as their
      ``str``. Neptune records the entry point's path (``source_code/entrypoint``),
      not its arguments.
    - git: ``git/commit``, ``git/branch``, ``git/dirty``; user ``tags`` go to
      ``sys/tags``.
    - ``upload_file``: ``files/<remote name>`` (a copy is staged at once, so
      the file may change later); ``system/git_metadata.json`` arrives this way.
    - ``log_images``: image series ``training/<name>/<i>`` (one per image of a
      batch); ``log_table``: a CSV file ``training/<name>/step_<step>``;
      ``log_traces``: ``training/traces/<key>`` (the last value).
    - a run that ended with an exception gets ``sys/failed = True``; close
      stops the run, waiting at most half of ``close_timeout`` for the upload
      (in async mode what is left stays under ``.neptune/async`` for
      ``neptune sync``).

    Neptune's own data folder is ``$NEPTUNE_DATA_DIRECTORY`` (default
    ``.neptune`` in the working directory). Modes: ``async`` (default, needs
    ``NEPTUNE_API_TOKEN`` and a ``workspace/project``), ``sync``, ``offline``
    (an operation log under ``.neptune/offline``, uploaded later with
    ``neptune sync``) and ``debug`` (kept in memory, for tests).

    Args:
        project: ``workspace/project``; default ``$NEPTUNE_PROJECT``, else
            ``{work_group}_{user_name}`` (fine offline and in debug mode).
        name: the run name (``sys/name``); default the obsbus run name (per
            rank: ``{name}-rank{rank}``, tagged with the run name).
        mode: see above; default ``$NEPTUNE_MODE`` or ``"async"``.
        tags: ``sys/tags``.
        base_namespace: where metrics, images, tables and traces go (``""``: the root).
        params_namespace: where hyperparameters and the environment go.
        upload_artifacts: store ``upload_file`` files under ``files/``.
        rank_zero_only: only one rank logs (``logging_rank``); else one run per rank.
        log_interval, logging_rank, log_env, log_git, write_period, close_timeout,
            max_queue_size:
            see :class:`~obsbus.loggers._tracker.TrackerDestination`.
        neptune_kwargs: more ``neptune.init_run`` arguments
            (``capture_hardware_metrics``, ``custom_run_id``, ``with_id``, ...).
            Not ``api_token``: credentials come from ``NEPTUNE_API_TOKEN`` only.

    Example:
        >>> nep = NeptuneLogger(mode="debug", base_namespace="train")
        >>> nep.resolved_mode(), nep.base_namespace, nep.can_upload_files()
        ('debug', 'train', True)

    A run in offline mode keeps an operation log for ``neptune sync``::

        with Trainer(model, data, "1ep", loggers=[NeptuneLogger(mode="offline")]) as trainer:
            trainer.fit()
    """

    extra = "neptune"

    def __init__(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        mode: Literal["async", "sync", "offline", "debug"] | None = None,
        tags: Sequence[str] | None = None,
        base_namespace: str = "training",
        params_namespace: str = "parameters",
        upload_artifacts: bool = True,
        rank_zero_only: bool = True,
        log_interval: TimeLike = "1ba",
        logging_rank: int | Literal["last"] = 0,
        log_env: bool = True,
        log_git: bool = True,
        write_period: float = 1.0,
        close_timeout: float = 30.0,
        max_queue_size: int = 1024,
        **neptune_kwargs: Any,
    ) -> None:
        cls = type(self).__name__
        if importlib.util.find_spec("neptune") is None:
            raise MissingExtraError(self.extra, cls)
        super().__init__(
            log_interval=log_interval,
            rank_zero_only=rank_zero_only,
            logging_rank=logging_rank,
            log_env=log_env,
            log_git=log_git,
            write_period=write_period,
            close_timeout=close_timeout,
            max_queue_size=max_queue_size,
        )
        for what, value in (("project", project), ("name", name)):
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"{cls} {what} must be a non-empty str or None, got {value!r}.")
        if mode is not None and mode not in _MODES:
            raise ValueError(
                f"{cls} mode must be one of {_MODES} or None, got {mode!r}"
                + (" (a read-only run can't be logged to)." if str(mode) == "read-only" else ".")
            )
        if tags is not None and (
            isinstance(tags, str)
            or not isinstance(tags, Sequence)
            or not all(isinstance(t, str) and t for t in tags)
        ):
            raise TypeError(f"{cls} tags must be a list of non-empty str, got {tags!r}.")
        if "api_token" in neptune_kwargs:
            raise ValueError(
                f"{cls} takes no api_token: credentials come from the environment only. "
                "To fix, set NEPTUNE_API_TOKEN instead."
            )
        clashes = sorted(set(neptune_kwargs) & set(_OWN_KWARGS))
        if clashes:
            raise ValueError(f"{cls} got {clashes} twice.")
        self.project = project
        self.run_name = name
        self.mode = mode
        self.tags = list(tags or ())
        self.base_namespace = _namespace(cls, "base_namespace", base_namespace)
        self.params_namespace = _namespace(cls, "params_namespace", params_namespace)
        self.upload_artifacts = check_bool(cls, "upload_artifacts", upload_artifacts)
        self.neptune_kwargs = dict(neptune_kwargs)
        self.run: Any = None  # the neptune Run, once started (touch it from the writer thread only)
        self._file: Any = None  # neptune.types.File
        self._stringify: Any = None  # neptune.utils.stringify_unsupported
        self._last_step: dict[str, int] = {}
        self._warned: set[str] = set()
        #: Metric values dropped because their step was not after the series' last one.
        self.late_values = 0

    # ------------------------------------------------------------ settings
    def resolved_mode(self) -> str:
        """The mode the run will use: ``mode``, else ``$NEPTUNE_MODE``, else ``"async"``."""
        return self.mode or os.environ.get("NEPTUNE_MODE") or "async"

    @override
    def can_upload_files(self) -> bool:
        return self.upload_artifacts

    @override
    def _check_credentials(self) -> None:
        mode = self.resolved_mode()
        if mode not in _ONLINE:
            return
        if not os.environ.get("NEPTUNE_API_TOKEN"):
            log.warning(
                "obsbus: NeptuneLogger runs in %s mode but NEPTUNE_API_TOKEN is not set, so "
                "the run will fail to start. To fix, set NEPTUNE_API_TOKEN, or use "
                "mode='offline' (upload later with `neptune sync`) or mode='debug'.",
                mode,
            )
        project = self.project or os.environ.get("NEPTUNE_PROJECT")
        if not project or "/" not in project:
            log.warning(
                "obsbus: NeptuneLogger runs in %s mode with project %r; Neptune wants "
                "'workspace/project'. To fix, pass project= or set NEPTUNE_PROJECT.",
                mode,
                project or self.default_project(),
            )

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("obsbus: NeptuneLogger " + message, *args)

    # ------------------------------------------------- client (writer thread)
    @override
    def _client_start(self, info: RunInfo) -> None:
        import neptune
        from neptune.types import File
        from neptune.utils import stringify_unsupported

        self._file, self._stringify = File, stringify_unsupported
        name = self.run_name or info.run_name
        tags = list(self.tags)
        if not self.rank_zero_only:
            name = f"{name}-rank{info.rank}"
            tags.append(info.run_name)
        kwargs: dict[str, Any] = {
            "project": self.project or os.environ.get("NEPTUNE_PROJECT") or info.project,
            "name": name,
            "mode": self.resolved_mode(),
            **_DEFAULTS,
        }
        if tags:
            kwargs["tags"] = tags
        kwargs.update(self.neptune_kwargs)
        self.run = neptune.init_run(**kwargs)
        self._last_step = {}
        self._warned = set()
        self.late_values = 0

    @override
    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        for key, value in values.items():
            path = _path(self.base_namespace, key)
            if isinstance(value, bool) or (
                not isinstance(value, (int, float)) and isinstance(value, numbers.Real)
            ):
                value = float(value)  # bools and numpy scalars
            if isinstance(value, (int, float)):
                if not math.isfinite(value):
                    self._warn_once(path, "skips non-finite values of %r (first: %r at step %d).",
                                    path, value, step)  # fmt: skip
                    continue
            elif not isinstance(value, str):
                self._warn_once(path, "skips %r: %s values are not numbers or strings.",
                                path, type(value).__name__)  # fmt: skip
                continue
            if step <= self._last_step.get(path, -1):
                self.late_values += 1
                self._warn_once(f"late:{path}", "dropped %r at step %d: Neptune series need "
                                "increasing steps and step %d was written.", path, step,
                                self._last_step[path])  # fmt: skip
                continue
            try:
                self.run[path].append(value, step=step)
            except Exception as exc:  # e.g. a key that is also a namespace of another key
                self._warn_once(path, "could not log %r: %s", path, exc)
                continue
            self._last_step[path] = step

    @override
    def _client_log_params(self, params: dict[str, Any]) -> None:
        for key, value in params.items():
            path = _path(self.params_namespace, key)
            try:
                self.run[path] = self._stringify(value)
            except Exception as exc:
                self._warn_once(path, "could not log %r: %s", path, exc)

    @override
    def _client_set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.run[_path(key.replace(".", "/"))] = value

    @override
    def _client_upload_file(self, remote_file_name: str, file_path: Path) -> None:
        extension = file_path.suffix.lstrip(".") or "bin"
        with file_path.open("rb") as stream:  # neptune copies the stream into its own store now
            file = self._file.from_stream(stream, extension=extension)
            self.run[_path("files", remote_file_name)].upload(file)

    @override
    def _client_finish(self, failed: bool) -> None:
        run, self.run = self.run, None
        if run is None:
            return
        if self.late_values:
            log.warning(
                "obsbus: NeptuneLogger dropped %d value(s) whose step was not after the "
                "last one of their series (see the first warning).",
                self.late_values,
            )
        if failed:
            run["sys/failed"] = True
        run.stop(seconds=self.close_timeout / 2)

    # --------------------------------------------- tables, images, traces
    @override
    def log_table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        name: str = "Table",
        step: int | None = None,
    ) -> None:
        if self._active:
            self._submit(self._write_table, list(columns), *hold_table(rows), name,
                         self._step_now(step))  # fmt: skip

    def _write_table(
        self, columns: list[str], rows: list[list[Any]], pending: HostValues, name: str, step: int
    ) -> None:
        import csv
        import io

        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(columns)
        writer.writerows(table_rows(rows, pending))
        content = self._file.from_content(text.getvalue(), extension="csv")
        self.run[_path(self.base_namespace, name, f"step_{step}")].upload(content)

    @override
    def log_images(
        self, images: Any, name: str = "Images", step: int | None = None, **kwargs: Any
    ) -> None:
        if self._active:
            self._submit(self._write_images, hold_images(images), name, self._step_now(step),
                         kwargs.get("channels_last"))  # fmt: skip

    def _write_images(self, images: Any, name: str, step: int, channels_last: bool | None) -> None:
        as_image = self._file.as_image
        for i, array in enumerate(image_arrays(images, channels_last)):
            path = _path(self.base_namespace, name, str(i))
            if step <= self._last_step.get(path, -1):
                self.late_values += 1
                self._warn_once(f"late:{path}", "dropped image %r at step %d.", path, step)
                continue
            self.run[path].append(as_image(array), step=step)
            self._last_step[path] = step

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self._active:
            self._submit(self._write_traces, dict(traces))

    def _write_traces(self, traces: dict[str, Any]) -> None:
        for key, value in traces.items():
            self.run[_path(self.base_namespace, "traces", key)] = self._stringify(value)
