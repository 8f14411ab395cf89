"""Log to Weights & Biases, from a background thread, at the obsbus step."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from typing_extensions import override

from obsbus._check import check_bool, check_folder, check_folder_at_init, check_mapping
from obsbus.errors import MissingExtraError
from obsbus.loggers._tracker import RunInfo, TrackerDestination
from obsbus.loggers._tracker_media import hold_images, hold_table, image_arrays, table_rows
from obsbus.masking import mask_value, masked_sys_argv
from obsbus.time import TimeLike
from obsbus.values import HostValues

__all__ = ["WandBLogger"]

log = logging.getLogger("obsbus")

_MODES = ("online", "offline", "disabled", "shared")
_OWN_INIT_ARGS = ("project", "group", "name", "entity", "tags", "mode", "dir")
_NAME_MAXLEN = 128  # W&B's limit for project and artifact names
_TAG_MAXLEN = 64
_BAD_PROJECT_CHARS = re.compile(r"[/\\#?%:]")
_BAD_ARTIFACT_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def artifact_name(remote_file_name: str) -> str:
    """A W&B artifact name for a file: only alphanumerics, ``-``, ``_`` and ``.``, 128 at most.

    Example:
        >>> artifact_name("my run/metrics-rank0.jsonl")
        'my-run.metrics-rank0.jsonl'
    """
    parts = [_BAD_ARTIFACT_CHARS.sub("-", p).strip("-") for p in remote_file_name.split("/")]
    name = ".".join(p for p in parts if p).strip(".") or "file"
    if len(name) > _NAME_MAXLEN:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: _NAME_MAXLEN - 9]}-{digest}"
    return name


def _artifact_type(remote_file_name: str) -> str:
    suffix = Path(remote_file_name).suffix.lstrip(".")
    return _BAD_ARTIFACT_CHARS.sub("", suffix) or "file"


def _check_str(cls: str, what: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise TypeError(f"{cls} {what} must be a non-empty str or None, got {value!r}.")


class WandBLogger(TrackerDestination):
    """Logs metrics, hyperparameters, tables, images and files to a W&B run.

    ``wandb`` is imported and its run started, fed and finished on a
    background thread only (``wandb.init`` works there: it installs no signal
    handler), so importing wandb (seconds) and each ``wandb.log`` call never
    cost the training step. What goes where:

    - metrics: ``run.log(values, step=step)`` with the obsbus step (the
      batch count unless given), so W&B's ``_step`` *is* the obsbus step and
      never drifts. Values logged at the same step share a history row.
      Tables and images first hand over the metrics held before them, so
      they never arrive ahead of earlier steps. W&B's steps only increase: a
      metric for a step older than one already written (an explicit old
      ``step``, or resuming a W&B run that went further) can't be stored and
      is dropped, counted in :attr:`late_values` and warned about; a table or
      image for such a step is shown at the latest step instead.
    - hyperparameters (flattened with ``/``), the environment (``env__NAME``,
      secrets dropped) and git (``git.commit``, ``git.branch``, ``git.dirty``):
      the run config (W&B tags are plain labels, so git goes to the config).
      Secrets are masked (:mod:`obsbus.masking`), in a ``config``/``notes`` given
      through ``init_kwargs`` too, and in the command line W&B records itself
      (the metadata's ``args``): ``--api-key=...`` shows as ``--api-key=***``.
    - ``log_table``: a ``wandb.Table``; ``log_images``: ``wandb.Image`` s (HW,
      CHW, HWC or batches; ``channels_last=`` overrides the guess);
      ``log_traces``: the run summary under ``traces/<key>``.
    - ``upload_file``: an artifact named from the remote file name (only
      alphanumerics, ``-``, ``_``, ``.``; see :func:`artifact_name`), typed
      by its extension, holding the file under its remote name, alias
      ``latest``. ``system/git_metadata.json`` arrives this way.
    - close: ``run.finish(exit_code=1)`` when the run ended with an
      exception, else ``0``.

    Files go to ``{run folder}/wandb/`` (Primus's ``{exp_root}/wandb``)
    unless ``save_dir`` is given. The run is created with
    ``reinit="create_new"`` so it neither ends nor is ended by a run the
    program starts itself; ``wandb.run`` is not set to it.

    Args:
        project: the W&B project; default ``$WANDB_PROJECT``, else
            ``{work_group}_{user_name}`` (Primus).
        group: the run group; with ``rank_zero_only=False`` it defaults to the
            obsbus run name, grouping the per-rank runs.
        name: the run name; default the obsbus run name (per rank:
            ``{name}-rank{rank}``).
        entity: the team or user; default ``$WANDB_ENTITY`` or your default entity.
        tags: run tags (strings of 1 to 64 characters).
        log_artifacts: store ``upload_file`` files as artifacts. Composer
            defaults to ``False`` because it uploads checkpoints this way;
            obsbus uploads logs, traces and git metadata, so ``True``.
        rank_zero_only: only one rank logs (``logging_rank``); else one run per rank.
        init_kwargs: more ``wandb.init`` arguments (``config``, ``notes``,
            ``settings``, ``resume``, ``id``, ``reinit``, ...). As in Composer
            it may also hold ``project``, ``group``, ``name``, ``entity``,
            ``tags``, ``mode`` and ``dir`` (= ``save_dir``): they are taken as
            those arguments, with the same checks; one given both ways with
            two different values is an error (Composer lets the argument win).
        mode: ``"online"``, ``"offline"`` (sync later with ``wandb sync``),
            ``"disabled"`` or ``"shared"``; default ``$WANDB_MODE`` or online.
            Online without ``WANDB_API_KEY`` is warned about at start.
        save_dir: the folder W&B writes its ``wandb/`` folder into.
        log_interval, logging_rank, log_env, log_git, write_period, close_timeout,
            max_queue_size:
            see :class:`~obsbus.loggers._tracker.TrackerDestination`.

    Example:
        >>> wb = WandBLogger(project="demo", tags=["baseline"], mode="offline")
        >>> wb.resolved_mode(), wb.can_upload_files()
        ('offline', True)

    A run then writes ``run-*.wandb`` under the run folder's ``wandb/``::

        with Trainer(model, data, "1ep", loggers=[WandBLogger(mode="offline")]) as trainer:
            trainer.fit()
    """

    extra = "wandb"

    def __init__(
        self,
        project: str | None = None,
        group: str | None = None,
        name: str | None = None,
        entity: str | None = None,
        tags: Sequence[str] | None = None,
        log_artifacts: bool = True,
        rank_zero_only: bool = True,
        init_kwargs: Mapping[str, Any] | None = None,
        *,
        mode: Literal["online", "offline", "disabled", "shared"] | None = None,
        save_dir: str | os.PathLike[str] | None = None,
        log_interval: TimeLike = "1ba",
        logging_rank: int | Literal["last"] = 0,
        log_env: bool = True,
        log_git: bool = True,
        write_period: float = 1.0,
        close_timeout: float = 30.0,
        max_queue_size: int = 1024,
    ) -> None:
        cls = type(self).__name__
        if importlib.util.find_spec("wandb") is None:
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
        if init_kwargs is not None and not isinstance(init_kwargs, Mapping):
            raise TypeError(f"{cls} init_kwargs must be a dict, got {init_kwargs!r}.")
        # wandb.init(**init_kwargs) at fit would fail on a key that isn't a str.
        init_kwargs = check_mapping(cls, "init_kwargs", init_kwargs)
        # Composer's init_kwargs may carry what the arguments give (WandBLogger(init_kwargs=
        # {"mode": "offline"}) in Composer's own tests): taken as those arguments, checked alike.
        own: dict[str, Any] = {"project": project, "group": group, "name": name,
                               "entity": entity, "tags": tags, "mode": mode,
                               "dir": save_dir}  # fmt: skip
        for key in _OWN_INIT_ARGS:
            if init_kwargs.get(key) is None:
                init_kwargs.pop(key, None)
                continue
            value = init_kwargs.pop(key)
            arg = "save_dir" if key == "dir" else key
            if own[key] is not None and own[key] != value:
                raise ValueError(
                    f"{cls}: init_kwargs[{key!r}]={value!r} and {arg}={own[key]!r} disagree. "
                    f"To fix, give {arg} once (Composer lets the argument win)."
                )
            own[key] = value
        project, group, name, entity = own["project"], own["group"], own["name"], own["entity"]
        tags, mode, save_dir = own["tags"], own["mode"], own["dir"]
        for what, value in (("project", project), ("group", group), ("name", name),
                            ("entity", entity)):  # fmt: skip
            _check_str(cls, what, value)
        if project is not None and (
            len(project) > _NAME_MAXLEN or _BAD_PROJECT_CHARS.search(project)
        ):
            raise ValueError(
                f"{cls} project must be at most {_NAME_MAXLEN} characters without any of "
                f"/ \\ # ? % :, got {project!r}."
            )
        if tags is not None and (isinstance(tags, str) or not isinstance(tags, Sequence)):
            raise TypeError(f"{cls} tags must be a list of str, got {tags!r}.")
        for tag in tags or ():
            if not isinstance(tag, str) or not 1 <= len(tag) <= _TAG_MAXLEN:
                raise ValueError(
                    f"{cls} tags must be str of 1 to {_TAG_MAXLEN} characters, got {tag!r}."
                )
        if mode is not None and mode not in _MODES:
            raise ValueError(f"{cls} mode must be one of {_MODES} or None, got {mode!r}.")
        self.project = project
        self.group = group
        self.run_name = name
        self.entity = entity
        self.tags = list(tags or ())
        self.log_artifacts = check_bool(cls, "log_artifacts", log_artifacts)
        self.init_kwargs = dict(init_kwargs or {})
        self.mode = mode
        save = check_folder(cls, "save_dir", save_dir, allow_none=True)
        # Relative to the working directory, as wandb takes it: a file there fails now.
        self.save_dir = None if save is None else check_folder_at_init(cls, "save_dir", save)
        self.run: Any = None  # the wandb run, once started (touch it from the writer thread only)
        self._wandb: Any = None
        self._step = 0
        #: Values for a step older than one written: metrics dropped, tables/images moved.
        self.late_values = 0

    # ------------------------------------------------------------ settings
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
    def _check_credentials(self) -> None:
        mode = self.resolved_mode()
        if mode in ("online", "shared") and not os.environ.get("WANDB_API_KEY"):
            log.warning(
                "obsbus: WandBLogger runs in %s mode but WANDB_API_KEY is not set; wandb "
                "falls back to a `wandb login` credential and fails to start without one. "
                "To fix, set WANDB_API_KEY, or use mode='offline' (sync later with "
                "`wandb sync`) or mode='disabled'.",
                mode,
            )

    # ------------------------------------------------- client (writer thread)
    @override
    def _client_start(self, info: RunInfo) -> None:
        import wandb

        self._wandb = wandb
        name = self.run_name or info.run_name
        group = self.group
        if not self.rank_zero_only:
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
    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        data = {key: value for key, value in values.items() if value is not None}
        if data and step < self._step:
            for key in data:
                self._late(repr(key), step)
        elif data:
            self._log(data, step)

    def _log_media(self, name: str, value: Any, step: int) -> None:
        if step < self._step:
            self._late(repr(name), step)
            step = self._step
        self._log({name: value}, step)

    @override
    def _client_log_params(self, params: dict[str, Any]) -> None:
        self.run.config.update(params, allow_val_change=True)

    @override
    def _client_set_tags(self, tags: dict[str, str]) -> None:
        self.run.config.update(tags, allow_val_change=True)

    @override
    def _client_upload_file(self, remote_file_name: str, file_path: Path) -> None:
        artifact = self._wandb.Artifact(
            artifact_name(remote_file_name),
            type=_artifact_type(remote_file_name),
            metadata={"remote_file_name": remote_file_name},
        )
        artifact.add_file(str(file_path), name=remote_file_name.lstrip("/") or file_path.name)
        self.run.log_artifact(artifact, aliases=["latest"])

    @override
    def _client_finish(self, failed: bool) -> None:
        run, self.run = self.run, None
        if self.late_values:
            log.warning(
                "obsbus: WandBLogger: %d value(s) came for steps already written to W&B "
                "(see the first warning).",
                self.late_values,
            )
        if run is not None:
            run.finish(exit_code=1 if failed else 0)

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
            self._hand_over()  # metrics held for earlier steps go first
            self._submit(self._write_table, list(columns), *hold_table(rows), name,
                         self._step_now(step))  # fmt: skip

    def _write_table(
        self, columns: list[str], rows: list[list[Any]], pending: HostValues, name: str, step: int
    ) -> None:
        table = self._wandb.Table(columns=columns, data=table_rows(rows, pending))
        self._log_media(name, table, step)

    @override
    def log_images(
        self, images: Any, name: str = "Images", step: int | None = None, **kwargs: Any
    ) -> None:
        if self._active:
            self._hand_over()
            channels_last = kwargs.get("channels_last")
            self._submit(self._write_images, hold_images(images), name, self._step_now(step),
                         channels_last)  # fmt: skip

    def _write_images(self, images: Any, name: str, step: int, channels_last: bool | None) -> None:
        wandb = self._wandb
        self._log_media(name, [wandb.Image(a) for a in image_arrays(images, channels_last)], step)

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self._active:
            self._submit(self._write_traces, {f"traces/{k}": v for k, v in traces.items()})

    def _write_traces(self, traces: dict[str, Any]) -> None:
        self.run.summary.update(traces)
