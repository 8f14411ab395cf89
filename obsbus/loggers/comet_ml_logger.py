"""Comet experiments, online or offline, fed in the background (``pip install 'obsbus[comet]'``)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack

from obsbus._check import check_bool, check_folder, check_mapping
from obsbus.errors import MissingExtraError
from obsbus.loggers._comet_client import CometClient
from obsbus.loggers._shared_options import TrackerOptions, shares_options
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers._tracker_checks import check_optional_name
from obsbus.loggers._tracker_client import ClientAttribute
from obsbus.naming import check_placeholders

__all__ = ["CometMLLogger"]


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
        rank_zero_only: only one rank logs (``logging_rank``); otherwise every rank, each
            its own experiment.
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
        logging_rank, max_queue_size: see
            :class:`~obsbus.loggers._tracker.TrackerDestination`.

    Example (not a doctest: importing comet_ml takes seconds)::

        from obsbus import Run

        comet = CometMLLogger(online=False)  # at close: {run folder}/comet/<id>.zip
        with Run(max_duration="100ba", loggers=[comet]) as run:
            for batch in run.train(data):
                run.state.loss = train_step(batch)
    """

    extra = "comet"
    client: CometClient
    workspace = ClientAttribute()
    project_name = ClientAttribute()
    experiment_name = ClientAttribute()
    online = ClientAttribute()
    offline_directory = ClientAttribute()
    exp_kwargs = ClientAttribute()
    #: The comet experiment, once started (touch it from the writer thread only).
    experiment = ClientAttribute()

    @shares_options(TrackerDestination.__init__, TrackerOptions)
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
        auto_param_logging: bool = False,
        auto_metric_logging: bool = False,
        **options: Unpack[TrackerOptions],
    ) -> None:
        cls = type(self).__name__
        for arg, text in (("workspace", workspace), ("project_name", project_name),
                          ("name", name)):  # fmt: skip
            check_optional_name(cls, arg, text)
        switches = {"online": online, "log_code": log_code, "log_graph": log_graph,
                    "auto_param_logging": auto_param_logging,
                    "auto_metric_logging": auto_metric_logging}  # fmt: skip
        for arg, flag in switches.items():
            check_bool(cls, arg, flag)
        # Found at fit otherwise: a file where the zip's folder goes, a key that isn't a str.
        check_folder(cls, "offline_directory", offline_directory, allow_none=True)
        extra_kwargs = check_mapping(cls, "exp_kwargs", exp_kwargs)
        if offline_directory is not None and online:
            raise ValueError(
                f"{cls}: offline_directory={os.fspath(offline_directory)!r} is only used offline. "
                "To fix, pass online=False, or drop offline_directory."
            )
        if "api_key" in extra_kwargs:
            raise ValueError(
                f"{cls} takes credentials from the environment only, not exp_kwargs['api_key']. "
                "To fix, export COMET_API_KEY and drop api_key."
            )
        if importlib.util.find_spec("comet_ml") is None:
            raise MissingExtraError(self.extra, cls)
        exp_kwargs = {
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
        client = CometClient(
            workspace=workspace,
            project_name=project_name,
            experiment_name=name,
            online=online,
            offline_directory=None
            if offline_directory is None
            else check_placeholders(os.fspath(offline_directory), f"{cls} offline_directory"),
            exp_kwargs=exp_kwargs,
        )
        super().__init__(client, rank_zero_only=rank_zero_only, **options)

    @property
    def offline_dir(self) -> Path | None:
        """Where the offline zip goes (known after ``init``; ``None`` online)."""
        return self.client.offline_dir
