"""Log to Neptune (the ``neptune`` 1.x client), from a background thread, under namespaces."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any, Literal

from obsbus._check import check_bool, check_instance
from obsbus.errors import MissingExtraError
from obsbus.loggers._neptune_client import NeptuneClient
from obsbus.loggers._shared_options import shared_options
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers._tracker_checks import check_optional_name
from obsbus.loggers._tracker_client import ClientAttribute
from obsbus.time import TimeLike

__all__ = ["NeptuneLogger"]

_MODES = ("async", "sync", "offline", "debug")
_OWN_KWARGS = ("project", "name", "mode", "tags")
# Defaults obsbus changes, each overridable through neptune_kwargs: the console
# capture swaps sys.stdout/sys.stderr process-wide from the thread that starts
# the run (FileLogger captures the console instead), and obsbus records git itself.
_DEFAULTS = {"capture_stdout": False, "capture_stderr": False, "git_ref": False}


def _namespace(cls: str, what: str, value: object) -> str:
    check_instance(cls, what, value, str)
    assert isinstance(value, str)
    if value.startswith("/") or value.endswith("/") or "//" in value:
        raise ValueError(
            f"{cls} {what} must be a Neptune path like 'training' or 'a/b' (no leading, "
            f"trailing or double '/'), got {value!r}."
        )
    return value


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
    client: NeptuneClient
    project = ClientAttribute()
    run_name = ClientAttribute()
    mode = ClientAttribute()
    tags = ClientAttribute()
    base_namespace = ClientAttribute()
    params_namespace = ClientAttribute()
    upload_artifacts = ClientAttribute()
    neptune_kwargs = ClientAttribute()
    #: The neptune Run, once started (touch it from the writer thread only).
    run = ClientAttribute()
    #: Metric values dropped because their step was not after the series' last one.
    late_values = ClientAttribute()

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
        options = shared_options(locals())
        for what, value in (("project", project), ("name", name)):
            check_optional_name(cls, what, value)
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
        client = NeptuneClient(
            project=project,
            run_name=name,
            mode=mode,
            tags=list(tags or ()),
            base_namespace=_namespace(cls, "base_namespace", base_namespace),
            params_namespace=_namespace(cls, "params_namespace", params_namespace),
            upload_artifacts=check_bool(cls, "upload_artifacts", upload_artifacts),
            neptune_kwargs=dict(neptune_kwargs),
            init_defaults=dict(_DEFAULTS),
            close_timeout=close_timeout,
        )
        super().__init__(client, **options)

    def resolved_mode(self) -> str:
        """The mode the run will use: ``mode``, else ``$NEPTUNE_MODE``, else ``"async"``."""
        return self.client.resolved_mode()
