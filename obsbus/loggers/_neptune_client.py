"""The Neptune client of :class:`~obsbus.loggers.neptune_logger.NeptuneLogger` (writer thread)."""

from __future__ import annotations

import csv
import io
import logging
import math
import numbers
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus.loggers._tracker_client import RunInfo, TrackerClient

if TYPE_CHECKING:
    from obsbus.logger import Logger
    from obsbus.state import State

__all__ = ["NeptuneClient"]

log = logging.getLogger("obsbus")

_ONLINE = ("async", "sync")


def _path(*parts: str) -> str:
    """A Neptune path: the parts joined by ``/``, without empty segments."""
    return "/".join(seg for part in parts for seg in part.split("/") if seg)


class NeptuneClient(TrackerClient):
    """One Neptune run: ``neptune.init_run`` at start, series under ``base_namespace``."""

    def __init__(
        self,
        *,
        project: str | None,
        run_name: str | None,
        mode: str | None,
        tags: list[str],
        base_namespace: str,
        params_namespace: str,
        upload_artifacts: bool,
        neptune_kwargs: dict[str, Any],
        init_defaults: dict[str, Any],
        close_timeout: float,
    ) -> None:
        self.project, self.run_name, self.mode, self.tags = project, run_name, mode, tags
        self.base_namespace, self.params_namespace = base_namespace, params_namespace
        self.upload_artifacts, self.neptune_kwargs = upload_artifacts, neptune_kwargs
        self.init_defaults = init_defaults  # init_run arguments before neptune_kwargs
        self.close_timeout = close_timeout
        self.run: Any = None  # the neptune Run, once started
        self._file: Any = None  # neptune.types.File
        self._stringify: Any = None  # neptune.utils.stringify_unsupported
        self._last_step: dict[str, int] = {}
        self._warned: set[str] = set()
        self._default_project = ""
        #: Metric values dropped because their step was not after the series' last one.
        self.late_values = 0

    def resolved_mode(self) -> str:
        """The mode the run will use: ``mode``, else ``$NEPTUNE_MODE``, else ``"async"``."""
        return self.mode or os.environ.get("NEPTUNE_MODE") or "async"

    @override
    def can_upload_files(self) -> bool:
        return self.upload_artifacts

    @override
    def prepare(self, state: State, logger: Logger) -> None:
        folder = state.run_folder
        self._default_project = f"{folder.work_group}_{folder.user_name}"

    @override
    def check_credentials(self) -> None:
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
                project or self._default_project,
            )

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("obsbus: NeptuneLogger " + message, *args)

    @override
    def start(self, info: RunInfo) -> None:
        import neptune
        from neptune.types import File
        from neptune.utils import stringify_unsupported

        self._file, self._stringify = File, stringify_unsupported
        name = self.run_name or info.run_name
        tags = list(self.tags)
        if info.every_rank:
            name = f"{name}-rank{info.rank}"
            tags.append(info.run_name)
        kwargs: dict[str, Any] = {
            "project": self.project or os.environ.get("NEPTUNE_PROJECT") or info.project,
            "name": name,
            "mode": self.resolved_mode(),
            **self.init_defaults,
        }
        if tags:
            kwargs["tags"] = tags
        kwargs.update(self.neptune_kwargs)
        self.run = neptune.init_run(**kwargs)
        self._last_step = {}
        self._warned = set()
        self.late_values = 0

    @override
    def log_metrics(self, values: dict[str, Any], step: int) -> None:
        for key, value in values.items():
            path = _path(self.base_namespace, key)
            if isinstance(value, bool) or (
                not isinstance(value, (int, float)) and isinstance(value, numbers.Real)
            ):
                value = float(value)  # bools and numpy scalars
            if isinstance(value, (int, float)):
                if not math.isfinite(value):
                    first = f"first: {value!r} at step {step}"
                    self.skip(
                        key, f"Neptune series take finite numbers, not non-finite ones ({first})"
                    )
                    continue
            elif not isinstance(value, str):
                self.skip(key, f"{type(value).__name__} values are not numbers or strings")
                continue
            if step <= self._last_step.get(path, -1):
                self.late_values += 1
                last = self._last_step[path]
                self.skip(key, f"Neptune series need increasing steps; {step} came after {last}")
                continue
            try:
                self.run[path].append(value, step=step)
            except Exception as exc:  # e.g. a key that is also a namespace of another key
                self.skip(key, f"could not log {path!r}: {exc}")
                continue
            self._last_step[path] = step

    @override
    def log_params(self, params: dict[str, Any]) -> None:
        for key, value in params.items():
            path = _path(self.params_namespace, key)
            try:
                self.run[path] = self._stringify(value)
            except Exception as exc:
                self._warn_once(path, "could not log %r: %s", path, exc)

    @override
    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.run[_path(key.replace(".", "/"))] = value

    @override
    def upload_file(self, remote_file_name: str, file_path: Path) -> None:
        extension = file_path.suffix.lstrip(".") or "bin"
        with file_path.open("rb") as stream:  # neptune copies the stream into its own store now
            file = self._file.from_stream(stream, extension=extension)
            self.run[_path("files", remote_file_name)].upload(file)

    @override
    def finish(self, failed: bool, exception: BaseException | None) -> None:
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

    @override
    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(columns)
        writer.writerows(rows)
        content = self._file.from_content(text.getvalue(), extension="csv")
        self.run[_path(self.base_namespace, name, f"step_{step}")].upload(content)

    @override
    def log_images(self, images: list[Any], name: str, step: int) -> None:
        as_image = self._file.as_image
        for i, array in enumerate(images):
            path = _path(self.base_namespace, name, str(i))
            if step <= self._last_step.get(path, -1):
                self.late_values += 1
                self._warn_once(f"late:{path}", "dropped image %r at step %d.", path, step)
                continue
            self.run[path].append(as_image(array), step=step)
            self._last_step[path] = step

    @override
    def log_traces(self, traces: dict[str, Any], step: int) -> None:
        for key, value in traces.items():
            self.run[_path(self.base_namespace, "traces", key)] = self._stringify(value)
