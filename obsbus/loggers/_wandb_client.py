"""The W&B client of :class:`~obsbus.loggers.wandb_logger.WandBLogger` (writer thread)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus.loggers._tracker_client import RunInfo, TrackerClient
from obsbus.masking import mask_value, masked_sys_argv

__all__ = ["NAME_MAXLEN", "WandBClient", "artifact_name"]

log = logging.getLogger("obsbus")

#: W&B's limit for project and artifact names.
NAME_MAXLEN = 128
_BAD_ARTIFACT_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def artifact_name(remote_file_name: str) -> str:
    """A W&B artifact name for a file: only alphanumerics, ``-``, ``_`` and ``.``, 128 at most.

    Example:
        >>> artifact_name("my run/metrics-rank0.jsonl")
        'my-run.metrics-rank0.jsonl'
    """
    parts = [_BAD_ARTIFACT_CHARS.sub("-", p).strip("-") for p in remote_file_name.split("/")]
    name = ".".join(p for p in parts if p).strip(".") or "file"
    if len(name) > NAME_MAXLEN:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: NAME_MAXLEN - 9]}-{digest}"
    return name


def _artifact_type(remote_file_name: str) -> str:
    suffix = Path(remote_file_name).suffix.lstrip(".")
    return _BAD_ARTIFACT_CHARS.sub("", suffix) or "file"


class WandBClient(TrackerClient):
    """One W&B run: ``wandb.init`` at start, ``run.log`` at the obsbus step, ``run.finish``."""

    #: W&B's own columns: a metric of such a name would be dropped (``metric:_step`` instead).
    reserved_keys = frozenset({"_step", "_runtime", "_timestamp"})

    def __init__(
        self,
        *,
        project: str | None,
        group: str | None,
        run_name: str | None,
        entity: str | None,
        tags: list[str],
        log_artifacts: bool,
        init_kwargs: dict[str, Any],
        mode: str | None,
        save_dir: Path | None,
    ) -> None:
        self.project, self.group, self.run_name, self.entity = project, group, run_name, entity
        self.tags, self.log_artifacts, self.init_kwargs = tags, log_artifacts, init_kwargs
        self.mode, self.save_dir = mode, save_dir
        self.run: Any = None  # the wandb run, once started
        self._wandb: Any = None
        self._step = 0
        #: Values for a step older than one written: metrics dropped, tables/images moved.
        self.late_values = 0

    def resolved_mode(self) -> str:
        """The mode the run will use: ``mode``, else ``$WANDB_MODE``, else ``"online"``."""
        if self.mode is not None:
            return self.mode
        if os.environ.get("WANDB_DISABLED", "").lower() in ("true", "1", "yes"):
            return "disabled"
        env = os.environ.get("WANDB_MODE", "").lower()
        return {"dryrun": "offline", "run": "online"}.get(env, env) or "online"

    @override
    def can_upload_files(self) -> bool:
        return self.log_artifacts and self.resolved_mode() != "disabled"

    @override
    def check_credentials(self) -> None:
        mode = self.resolved_mode()
        if mode in ("online", "shared") and not os.environ.get("WANDB_API_KEY"):
            log.warning(
                "obsbus: WandBLogger runs in %s mode but WANDB_API_KEY is not set; wandb "
                "falls back to a `wandb login` credential and fails to start without one. "
                "To fix, set WANDB_API_KEY, or use mode='offline' (sync later with "
                "`wandb sync`) or mode='disabled'.",
                mode,
            )

    @override
    def start(self, info: RunInfo) -> None:
        import wandb

        self._wandb = wandb
        name = self.run_name or info.run_name
        group = self.group
        if info.every_rank:
            name = f"{name}-rank{info.rank}"
            group = group or info.run_name
        folder = self.save_dir or info.run_folder
        folder.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {
            "project": self.project or os.environ.get("WANDB_PROJECT") or info.project,
            "name": name,
            "dir": str(folder),
            "reinit": "create_new",
        }
        for key, value in (("group", group), ("entity", self.entity), ("mode", self.mode)):
            if value is not None:
                kwargs[key] = value
        if self.tags:
            kwargs["tags"] = self.tags
        kwargs.update(self.init_kwargs)
        for key in ("config", "notes"):  # hyperparameters by another path: masked the same
            if key in kwargs:
                kwargs[key] = mask_value(kwargs[key])
        # W&B records sys.argv in the run's metadata (the .wandb file): masked while it reads.
        with masked_sys_argv():
            self.run = wandb.init(**kwargs)
        self._step = int(getattr(self.run, "step", 0) or 0)
        self.late_values = 0

    def _log(self, data: dict[str, Any], step: int) -> None:
        self.run.log(data, step=step)
        self._step = step

    def _late(self, what: str, step: int) -> None:
        self.late_values += 1
        if self.late_values == 1:
            log.warning(
                "obsbus: WandBLogger got %s for step %d after step %d was written; W&B steps "
                "only increase, so such metrics are dropped (counted) and tables/images are "
                "shown at the latest step.",
                what,
                step,
                self._step,
            )

    @override
    def log_metrics(self, values: dict[str, Any], step: int) -> None:
        # None, keys that are not str and ints beyond float64 never come (TrackerDestination).
        if values and step < self._step:
            for key in values:
                self._late(repr(key), step)
                self.skip(key, f"W&B steps only increase, and step {step} came after "
                               f"step {self._step}")  # fmt: skip
        elif values:
            if "" in values:  # wandb drops an empty key without a word
                values = {key: value for key, value in values.items() if key}
                self.skip("", "W&B drops a metric whose key is ''")
            self._log(values, step)

    def _log_media(self, name: str, value: Any, step: int) -> None:
        if step < self._step:
            self._late(repr(name), step)
            step = self._step
        self._log({name: value}, step)

    @override
    def log_params(self, params: dict[str, Any]) -> None:
        self.run.config.update(params, allow_val_change=True)

    @override
    def set_tags(self, tags: dict[str, str]) -> None:
        self.run.config.update(tags, allow_val_change=True)  # W&B tags are plain labels

    @override
    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        self._log_media(name, self._wandb.Table(columns=columns, data=rows), step)

    @override
    def log_images(self, images: list[Any], name: str, step: int) -> None:
        self._log_media(name, [self._wandb.Image(a) for a in images], step)

    @override
    def log_traces(self, traces: dict[str, Any], step: int) -> None:
        self.run.summary.update({f"traces/{k}": v for k, v in traces.items()})

    @override
    def upload_file(self, remote_file_name: str, file_path: Path) -> None:
        artifact = self._wandb.Artifact(
            artifact_name(remote_file_name),
            type=_artifact_type(remote_file_name),
            metadata={"remote_file_name": remote_file_name},
        )
        artifact.add_file(str(file_path), name=remote_file_name.lstrip("/") or file_path.name)
        self.run.log_artifact(artifact, aliases=["latest"])

    @override
    def finish(self, failed: bool, exception: BaseException | None) -> None:
        run, self.run = self.run, None
        if self.late_values:
            log.warning(
                "obsbus: WandBLogger: %d value(s) came for steps already written to W&B "
                "(see the first warning).",
                self.late_values,
            )
        if run is not None:
            run.finish(exit_code=1 if failed else 0)
