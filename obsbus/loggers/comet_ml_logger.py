"""Comet experiments, online or offline, fed in the background (``pip install 'obsbus[comet]'``)."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus._check import check_folder, check_folder_at_init, check_mapping
from obsbus.errors import MissingExtraError
from obsbus.logger import Logger
from obsbus.loggers._tensorboard_summaries import image_arrays
from obsbus.loggers._tracker import RunInfo, TrackerDestination
from obsbus.loggers._tracker_media import hold_images, hold_table, table_rows
from obsbus.masking import masked_sys_argv
from obsbus.naming import check_placeholders
from obsbus.state import State
from obsbus.time import TimeLike
from obsbus.values import HostValues

__all__ = ["CometMLLogger"]

log = logging.getLogger("obsbus")


class CometMLLogger(TrackerDestination):
    """Logs metrics, parameters, images, tables and files to a Comet experiment.

    ``online=True`` (the default) creates a ``comet_ml.Experiment``, which
    needs ``COMET_API_KEY`` in the environment (a warning at ``init`` says so
    when it is missing; the key is never printed, nor taken from arguments).
    ``online=False`` creates an ``OfflineExperiment`` that writes a zip to
    ``offline_directory`` (default: the run folder's ``comet/``) at close;
    upload it later with ``comet upload <zip>``.

    Comet's own automatic logging is off unless asked for: source code,
    model graph, command-line arguments, stdout/stderr capture, framework
    metrics and parameters, git metadata and patch, environment and hardware
    details and monitoring, CO2 tracking. (obsbus logs the metrics itself.)
    Before ``comet_ml`` is first imported, and unless one of
    ``log_graph``, ``auto_param_logging`` or ``auto_metric_logging`` is set,
    ``COMET_DISABLE_AUTO_LOGGING`` defaults to ``1`` so that comet does not
    patch torch, TensorBoard and other libraries as they are imported (set
    it to ``0`` yourself to keep comet's integrations); offline,
    ``COMET_ERROR_TRACKING_ENABLE`` likewise defaults to ``false``, so comet
    does not report its own errors over the network. ``exp_kwargs`` are
    passed to the experiment and override all of the above.

    What is logged, from a background thread (metrics stay tensors until a
    ``log_interval`` at least ``write_period`` after the last hand-over, then
    move to the host in one transfer):

    - metrics: every numeric value under its obsbus key at its obsbus step
      (``experiment.log_metrics(..., step=step)``); non-numeric values are
      skipped, once reported per key;
    - parameters: ``log_hyperparameters`` (nested names joined with ``/``)
      and the environment as ``env__NAME`` (secrets dropped), masked
      (:mod:`obsbus.masking`); the command line comet records when you turn
      ``log_env_host`` or ``parse_args`` on is masked too (``--api-key=***``);
    - others: ``git.commit``, ``git.branch``, ``git.dirty``; traces as
      ``traces/{key}``; ``obsbus.status`` (``finished`` or ``failed``) at close;
    - assets: every file given to ``logger.upload_file``, under its remote
      name (replacing an earlier one of that name), ``system/git_metadata.json``;
      tables as ``{name}.csv``; images (``log_images``: ``HW``, ``CHW``,
      ``NCHW``, or ``HWC`` / ``NHWC`` with ``channels_last=True``) as images.

    The experiment is named after the run (``name`` overrides it) in the
    project ``{work_group}_{user}`` (``project_name`` overrides it). With
    ``rank_zero_only=False`` every rank has its own experiment,
    ``{name}-rank{rank}``, tagged with the run name and with
    ``obsbus.group`` = the run name, so the ranks of a run can be found
    together.

    The first seven arguments are Composer's, in Composer's order
    (``workspace``, ``project_name``, ``log_code``, ``log_graph``, ``name``,
    ``rank_zero_only``, ``exp_kwargs``); the rest are keyword-only.

    Args:
        workspace: the Comet workspace (default: the account's own).
        project_name: the Comet project (default ``{work_group}_{user}``).
        name: the experiment's name (default: the run name).
        online: log to Comet's servers; ``False`` writes an offline zip.
        offline_directory: where the offline zip goes; relative paths are
            taken from the run folder; placeholders such as ``{run_name}`` are
            filled. An existing file there is an error at ``init`` (an
            absolute path: at construction), naming the parameter and path.
        log_interval: when held metrics may be handed to comet (see ``write_period``).
        rank_zero_only: only rank 0 logs; otherwise every rank, each its own experiment.
        log_code, log_graph, auto_param_logging, auto_metric_logging: comet's
            switches of the same names (Composer's names and defaults).
        exp_kwargs: more keyword arguments for ``comet_ml.Experiment`` /
            ``OfflineExperiment`` (not ``api_key``: use ``COMET_API_KEY``).
        log_env: record the environment (secrets dropped) as parameters.
        log_git: record git commit/branch/dirty as others and ``system/git_metadata.json``.
        write_period: seconds between hand-overs of held metrics to the writer
            thread (each still at its own step); see
            :class:`~obsbus.loggers._tracker.TrackerDestination`.
        close_timeout: seconds ``close`` waits for comet before giving up (comet
            sends what it holds, or offline writes the zip, in ``end()``; raise
            it for very large runs).

    Example (not a doctest: importing comet_ml takes seconds)::

        from obsbus import Run

        comet = CometMLLogger(online=False)  # at close: {run folder}/comet/<id>.zip
        with Run(max_duration="100ba", loggers=[comet]) as run:
            for batch in run.train(data):
                run.state.loss = train_step(batch)
    """

    extra = "comet"

    def __init__(
        self,
        workspace: str | None = None,
        project_name: str | None = None,
        log_code: bool = False,
        log_graph: bool = False,
        name: str | None = None,
        rank_zero_only: bool = True,
        exp_kwargs: Mapping[str, Any] | None = None,
        *,
        online: bool = True,
        offline_directory: str | os.PathLike[str] | None = None,
        log_interval: TimeLike = "1ba",
        auto_param_logging: bool = False,
        auto_metric_logging: bool = False,
        log_env: bool = True,
        log_git: bool = True,
        write_period: float = 1.0,
        close_timeout: float = 30.0,
    ) -> None:
        cls = type(self).__name__
        names = {"workspace": workspace, "project_name": project_name, "name": name}
        for arg, text in names.items():
            if text is not None and (not isinstance(text, str) or not text):
                raise TypeError(f"{cls} {arg} must be a non-empty str or None, got {text!r}.")
        switches = {
            "online": online,
            "rank_zero_only": rank_zero_only,
            "log_code": log_code,
            "log_graph": log_graph,
            "auto_param_logging": auto_param_logging,
            "auto_metric_logging": auto_metric_logging,
            "log_env": log_env,
            "log_git": log_git,
        }
        for arg, flag in switches.items():
            if not isinstance(flag, bool):
                raise TypeError(f"{cls} {arg} must be True or False, got {flag!r}.")
        if offline_directory is not None and not isinstance(offline_directory, (str, os.PathLike)):
            raise TypeError(
                f"{cls} offline_directory must be a path or None, got {offline_directory!r}."
            )
        if offline_directory is not None and online:
            raise ValueError(
                f"{cls}: offline_directory={os.fspath(offline_directory)!r} is only used offline. "
                "To fix, pass online=False, or drop offline_directory."
            )
        if exp_kwargs is not None and not isinstance(exp_kwargs, Mapping):
            raise TypeError(f"{cls} exp_kwargs must be a dict or None, got {exp_kwargs!r}.")
        # Found at fit otherwise: a file where the zip's folder goes, a key that isn't a str.
        check_folder(cls, "offline_directory", offline_directory, allow_none=True)
        extra_kwargs = check_mapping(cls, "exp_kwargs", exp_kwargs)
        if "api_key" in extra_kwargs:
            raise ValueError(
                f"{cls} takes credentials from the environment only, not exp_kwargs['api_key']. "
                "To fix, export COMET_API_KEY and drop api_key."
            )
        if importlib.util.find_spec("comet_ml") is None:
            raise MissingExtraError(self.extra, cls)
        super().__init__(
            log_interval=log_interval,
            rank_zero_only=rank_zero_only,
            log_env=log_env,
            log_git=log_git,
            write_period=write_period,
            close_timeout=close_timeout,
        )
        self.workspace = workspace
        self.project_name = project_name
        self.experiment_name = name
        self.online = online
        self.offline_directory = (
            None
            if offline_directory is None
            else check_placeholders(os.fspath(offline_directory), f"{cls} offline_directory")
        )
        self.exp_kwargs = {
            "log_code": log_code,
            "log_graph": log_graph,
            "auto_param_logging": auto_param_logging,
            "auto_metric_logging": auto_metric_logging,
            "parse_args": False,
            "auto_output_logging": None,
            "log_git_metadata": False,
            "log_git_patch": False,
            "log_env_details": False,
            "log_env_gpu": False,
            "log_env_host": False,
            "log_env_cpu": False,
            "log_env_network": False,
            "log_env_disk": False,
            "auto_log_co2": False,
            "display_summary_level": 0,
        } | extra_kwargs
        self._offline_dir: Path | None = None
        self.experiment: Any = None
        self._not_numbers: set[str] = set()

    @property
    def offline_dir(self) -> Path | None:
        """Where the offline zip goes (known after ``init``; ``None`` online)."""
        return self._offline_dir

    # ----------------------------------------------------- training thread
    @override
    def init(self, state: State, logger: Logger) -> None:
        if not self.online:
            folder = self.offline_directory
            self._offline_dir = check_folder_at_init(  # a relative one is known only now
                type(self).__name__,
                "offline_directory",
                state.run_folder.root / "comet"
                if folder is None
                else state.run_folder.resolve(logger.format_name(folder)),
            )
        super().init(state, logger)

    @override
    def _check_credentials(self) -> None:
        if self.online and not os.environ.get("COMET_API_KEY"):
            log.warning(
                "obsbus: CometMLLogger is online but COMET_API_KEY is not set, so the experiment "
                "will likely fail to start (comet_ml may still find a key in its config file). "
                "To fix, export COMET_API_KEY, or pass online=False to write an offline archive."
            )
        wants_patches = any(
            self.exp_kwargs.get(k)
            for k in ("log_graph", "auto_param_logging", "auto_metric_logging")
        )
        if "comet_ml" not in sys.modules:
            # comet_ml reads these once, when it is imported (on the writer thread, next).
            if not wants_patches:  # no patching of torch, TensorBoard & co. as they import
                os.environ.setdefault("COMET_DISABLE_AUTO_LOGGING", "1")
            if not self.online:  # offline means offline: no error reports to comet's Sentry
                os.environ.setdefault("COMET_ERROR_TRACKING_ENABLE", "false")

    @override
    def log_images(
        self, images: Any, name: str = "Images", step: int | None = None, **kwargs: Any
    ) -> None:
        if self._active:
            channels_last = bool(kwargs.get("channels_last", False))
            # Snapshotted here (detached copies, no sync): the caller may change them next.
            self._submit(
                self._write_images, hold_images(images), name, self._step_now(step), channels_last
            )

    @override
    def log_traces(self, traces: Mapping[str, Any]) -> None:
        if self._active:
            self._submit(self._client_set_tags, {f"traces/{k}": str(v) for k, v in traces.items()})

    @override
    def log_table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        name: str = "Table",
        step: int | None = None,
    ) -> None:
        if self._active:
            self._submit(self._write_table, list(columns), *hold_table(rows), name)

    @override
    def can_upload_files(self) -> bool:
        return True

    # ------------------------------------------------------- writer thread
    @override
    def _client_start(self, info: RunInfo) -> None:
        comet_ml = importlib.import_module("comet_ml")
        kwargs = {
            "project_name": self.project_name or info.project,
            "workspace": self.workspace,
        } | self.exp_kwargs
        if not self.online:
            assert self._offline_dir is not None
            self._offline_dir.mkdir(parents=True, exist_ok=True)
            kwargs.setdefault("offline_directory", str(self._offline_dir))
        # With log_env_host or parse_args on, comet records sys.argv as the experiment
        # starts: masked while it does.
        with masked_sys_argv():
            if self.online:
                experiment = comet_ml.Experiment(**kwargs)
            else:
                experiment = comet_ml.OfflineExperiment(**kwargs)
        self.experiment = experiment
        name = self.experiment_name or info.run_name
        if not self.rank_zero_only:
            experiment.set_name(f"{name}-rank{info.rank}")
            experiment.add_tag(info.run_name)
            experiment.log_others({"obsbus.group": info.run_name, "obsbus.rank": info.rank})
        else:
            experiment.set_name(name)

    @override
    def _client_log_metrics(self, values: dict[str, Any], step: int) -> None:
        numbers: dict[str, Any] = {}
        for key, value in values.items():
            if isinstance(value, (int, float)):
                numbers[key] = int(value) if isinstance(value, bool) else value
            elif key not in self._not_numbers:
                self._not_numbers.add(key)
                log.warning(
                    "obsbus: CometMLLogger logs numbers only; %r is a %s and is skipped "
                    "(reported once per key).",
                    key,
                    type(value).__name__,
                )
        if numbers:
            self.experiment.log_metrics(numbers, step=step)

    @override
    def _client_log_params(self, params: dict[str, Any]) -> None:
        self.experiment.log_parameters(params)

    @override
    def _client_set_tags(self, tags: dict[str, str]) -> None:
        self.experiment.log_others(tags)

    @override
    def _client_upload_file(self, remote_file_name: str, file_path: Path) -> None:
        self.experiment.log_asset(str(file_path), file_name=remote_file_name, overwrite=True)

    def _write_images(self, images: Any, name: str, step: int, channels_last: bool) -> None:
        pil = importlib.import_module("PIL.Image")
        arrays = image_arrays(images, channels_last)
        for i, array in enumerate(arrays):
            # A PIL image, so comet stores the pixels as they are (it rescales arrays to min-max).
            image = pil.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)
            self.experiment.log_image(
                image, name=name if len(arrays) == 1 else f"{name}_{i}", step=step
            )

    def _write_table(
        self, columns: list[str], rows: list[list[Any]], pending: HostValues, name: str
    ) -> None:
        data = table_rows(rows, pending)
        self.experiment.log_table(f"{name}.csv", tabular_data=data, headers=columns)

    @override
    def _client_finish(self, failed: bool) -> None:
        experiment, self.experiment = self.experiment, None
        if experiment is None:
            return
        experiment.log_other("obsbus.status", "failed" if failed else "finished")
        experiment.end()
