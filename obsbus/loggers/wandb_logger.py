"""Log to Weights & Biases, from a background thread, at the obsbus step."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Unpack

from obsbus._check import check_bool, check_folder, check_folder_at_init, check_mapping
from obsbus.errors import MissingExtraError
from obsbus.loggers._shared_options import TrackerOptions, shares_options
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers._tracker_checks import check_optional_name
from obsbus.loggers._tracker_client import ClientAttribute
from obsbus.loggers._wandb_client import NAME_MAXLEN, WandBClient, artifact_name

__all__ = ["WandBLogger", "artifact_name"]

_MODES = ("online", "offline", "disabled", "shared")
_OWN_INIT_ARGS = ("project", "group", "name", "entity", "tags", "mode", "dir")
_TAG_MAXLEN = 64
_BAD_PROJECT_CHARS = re.compile(r"[/\\#?%:]")


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
    client: WandBClient
    project = ClientAttribute()
    group = ClientAttribute()
    run_name = ClientAttribute()
    entity = ClientAttribute()
    tags = ClientAttribute()
    log_artifacts = ClientAttribute()
    init_kwargs = ClientAttribute()
    mode = ClientAttribute()
    save_dir = ClientAttribute()
    #: The wandb run, once started (touch it from the writer thread only).
    run = ClientAttribute()
    #: Values for a step older than one written: metrics dropped, tables/images moved.
    late_values = ClientAttribute()

    @shares_options(TrackerDestination.__init__, TrackerOptions)
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
        **options: Unpack[TrackerOptions],
    ) -> None:
        cls = type(self).__name__
        if importlib.util.find_spec("wandb") is None:
            raise MissingExtraError(self.extra, cls)
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
            check_optional_name(cls, what, value)
        if project is not None and (
            len(project) > NAME_MAXLEN or _BAD_PROJECT_CHARS.search(project)
        ):
            raise ValueError(
                f"{cls} project must be at most {NAME_MAXLEN} characters without any of "
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
        save = check_folder(cls, "save_dir", save_dir, allow_none=True)
        client = WandBClient(
            project=project,
            group=group,
            run_name=name,
            entity=entity,
            tags=list(tags or ()),
            log_artifacts=check_bool(cls, "log_artifacts", log_artifacts),
            init_kwargs=dict(init_kwargs or {}),
            mode=mode,
            # Relative to the working directory, as wandb takes it: a file there fails now.
            save_dir=None if save is None else check_folder_at_init(cls, "save_dir", save),
        )
        super().__init__(client, rank_zero_only=rank_zero_only, **options)

    def resolved_mode(self) -> str:
        """The mode the run will use: ``mode``, else ``$WANDB_MODE``, else ``"online"``."""
        return self.client.resolved_mode()
