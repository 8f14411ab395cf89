"""Log to MLflow, from a background thread, with explicit run ids."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Unpack

from typing_extensions import override

from obsbus._check import check_bool, check_number
from obsbus.errors import MissingExtraError
from obsbus.logger import Logger
from obsbus.loggers._mlflow_client import MLFlowClient
from obsbus.loggers._mlflow_names import (
    check_tracking_uri,
    is_log_file,
    is_trace_file,
    resolve_tracking_uri,
    uri_scheme,
)
from obsbus.loggers._run_metadata import mask_credentials
from obsbus.loggers._shared_options import TrackerOptions, shares_options
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers._tracker_client import ClientAttribute
from obsbus.masking import mask_value
from obsbus.state import State

__all__ = ["MLFlowLogger"]

_RUN_ID = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")
_MAX_EXPERIMENT_NAME = 500


def _check_name(cls: str, what: str, value: object, max_len: int = 500) -> None:
    if value is not None and (not isinstance(value, str) or not value or len(value) > max_len):
        raise ValueError(
            f"{cls} {what} must be None or a non-empty str of at most {max_len} characters, "
            f"got {value!r}."
        )


class MLFlowLogger(TrackerDestination):
    """Logs metrics, hyperparameters, tags and files to an MLflow run.

    ``mlflow`` is imported (seconds) and used on a background thread only,
    through an ``MlflowClient`` with an explicit run id: the fluent API's
    global "active run" is never touched, so two destinations, or your own
    ``mlflow.start_run``, don't fight over it. What goes where:

    - metrics: ``log_batch`` at the obsbus step (the batch count unless given).
      Values are held (tensors stay tensors), collected on the writer thread
      and sent in one ``log_batch`` at most every ``flush_interval`` seconds
      (and at ``fit_end``, ``exception`` and close; a stalled run still sends
      what it logged once the interval has passed), so a store's per-call cost
      (5-50 ms for SQLite or a server) is paid per interval, not per step.
      Values that are not one number are skipped (counted in
      :attr:`skipped_values`). With ``upload_performance_metrics=False``, keys
      starting ``throughput/``, ``time/``, ``memory/``, ``system/`` or
      ``utilization/`` (the monitors' performance set) are not sent.
    - ``log_images``: MLflow images (``images/{name}+step+{step}+...``) at the
      step; ``log_table``: rows appended to the artifact ``tables/{name}.json``
      with a ``step`` column. Both need the full ``mlflow`` (Pillow, pandas).
      ``log_traces`` is not sent (MLflow's "traces" are GenAI spans).
    - hyperparameters (flattened with ``/``) and the environment
      (``env__NAME``, secrets dropped): run params. MLflow params can't
      change, so a value that differs from the one already in the run (a
      resumed run, a second ``log_hyperparameters``) is kept out with one warning.
    - git: tags ``git.commit``, ``git.branch``, ``git.dirty`` plus MLflow's
      own ``mlflow.source.git.commit``/``branch`` (shown in the UI), and the
      ``system/git_metadata.json`` artifact. Also ``mlflow.user``,
      ``mlflow.source.name`` and your ``tags``.
    - ``upload_file``: an artifact at the remote file name. Trace files (see
      :func:`~obsbus.loggers._mlflow_names.is_trace_file`: ``traces/``,
      ``torch_traces/``, ``*trace*.json[.gz]``) only with ``upload_traces``;
      log files (:func:`~obsbus.loggers._mlflow_names.is_log_file`:
      ``logs/``, ``logs-rank*.txt``, ``metrics-rank*.jsonl``, ``*.log``,
      ``*.jsonl``) only with ``upload_logs``; anything else always. These
      are Primus's ``mlflow_upload_traces``/``mlflow_upload_logs`` (off by
      default there too: FileLogger re-uploads its growing files at every
      flush). ``mlflow_upload_performance_metrics`` is on here because the
      monitors that log those keys are attached on purpose.
    - the run ends ``FINISHED``, ``FAILED`` when the run ended with an
      exception, ``KILLED`` on SIGTERM (:class:`~obsbus.errors.TrainingTerminated`)
      or Ctrl-C.

    **Where.** ``tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else a SQLite
    store in the run folder: ``{run folder}/mlflow/mlflow.db``, artifacts in
    ``{run folder}/mlflow/artifacts`` (per rank ``mlflow-rank{rank}.db`` when
    every rank logs). Look at it with
    ``mlflow ui --backend-store-uri sqlite:///{run folder}/mlflow/mlflow.db``.
    Why SQLite: MLflow 3 keeps the file store (``./mlruns``) in maintenance
    mode and refuses to open it unless ``MLFLOW_ALLOW_FILE_STORE=true``, an
    environment switch obsbus won't flip for the whole process; SQLite is
    MLflow's own default. It needs the full ``mlflow`` package (SQLAlchemy,
    Alembic), which is what ``obsbus[mlflow]`` installs: ``mlflow-skinny`` can
    only talk to a server (``http(s)://``, ``databricks``) or a file store.
    The first open of a new SQLite store migrates its schema (seconds, on
    the writer thread, never the training step). A ``file:`` store or path
    is accepted when ``MLFLOW_ALLOW_FILE_STORE=true`` is set.
    With a SQL store given as ``tracking_uri`` or ``$MLFLOW_TRACKING_URI``
    (``sqlite:``, ``postgresql:``, ...), an experiment obsbus creates keeps
    its artifacts in ``{run folder}/mlflow/artifacts`` too, where MLflow
    would put them in ``./mlruns`` of the working directory; an experiment
    that exists keeps its own location (runs of a shared store then put
    theirs under the run folder that created it: pass ``artifact_location``
    to choose one place). A server keeps artifacts where it is configured to.

    Credentials come from the environment only (``MLFLOW_TRACKING_USERNAME``/
    ``PASSWORD``/``TOKEN``, ``DATABRICKS_HOST``/``DATABRICKS_TOKEN``); a
    ``databricks`` URI without ``DATABRICKS_HOST`` is warned about at start.
    The URI is masked in obsbus's messages.

    Args:
        experiment_name: the MLflow experiment (Primus ``mlflow_experiment_name``); default
            ``$MLFLOW_EXPERIMENT_NAME``, else ``{work_group}_{user_name}``. Created if missing.
        run_name: the run name (Primus ``mlflow_run_name``); default the obsbus run
            name; per rank ``{run_name}-rank{rank}``. (Primus defaults the *run* name to
            ``{work_group}_{user_name}``; obsbus uses that for the experiment, so a
            team's runs gather in one experiment, each named after its obsbus run.)
        tags: more run tags; their values are masked as hyperparameters are.
        tracking_uri: where runs are stored; see above.
        rank_zero_only: only ``logging_rank`` logs (default the last rank, as Megatron and
            Primus do); ``False``: one run per rank, tagged ``run_group``.
        flush_interval: seconds between ``log_batch`` calls (Composer's 10); ``0``: at
            every hand-over (``log_interval`` and ``write_period``).
        synchronous: ``False`` hands batches to MLflow's own async queue; errors then
            surface at the next flush. obsbus already keeps the training thread
            free, so ``True`` (errors are reported with the batch that failed).
        run_group: the ``run_group`` tag of per-rank runs; default the obsbus run name.
        resume: continue the latest run of the experiment with the same run name, if any.
        run_id: continue this run (metrics append at their steps; the run's
            experiment is used). Only with one logging rank.
        artifact_location: where a new experiment keeps artifacts (default: the
            server's, or ``{run folder}/mlflow/artifacts`` for a SQL store, see above).
        upload_traces: upload trace files (Primus ``mlflow_upload_traces``).
        upload_logs: upload log files (Primus ``mlflow_upload_logs``).
        upload_performance_metrics: send the performance metric keys
            (Primus ``mlflow_upload_performance_metrics``).
        log_interval, logging_rank, log_env, log_git, write_period, close_timeout,
            max_queue_size:
            see :class:`~obsbus.loggers._tracker.TrackerDestination`.

    Example:
        >>> mlf = MLFlowLogger(experiment_name="demo", upload_logs=True)
        >>> mlf.resolved_tracking_uri("/runs/lm-1")
        'sqlite:////runs/lm-1/mlflow/mlflow.db'
        >>> mlf.uploads("lm-1/metrics-rank0.jsonl"), mlf.uploads("lm-1/traces/ep0-ba4-rank0.json")
        (True, False)

    A run then logs to the SQLite store in its run folder::

        with Trainer(model, data, "1ep", loggers=[MLFlowLogger()]) as trainer:
            trainer.fit()
    """

    extra = "mlflow"
    client: MLFlowClient
    experiment_name = ClientAttribute()
    run_name = ClientAttribute()
    tags = ClientAttribute()
    tracking_uri = ClientAttribute()
    flush_interval = ClientAttribute()
    synchronous = ClientAttribute()
    run_group = ClientAttribute()
    resume = ClientAttribute()
    artifact_location = ClientAttribute()
    upload_performance_metrics = ClientAttribute()
    #: The run logged to: ``run_id`` until a run starts, then that run's id.
    run_id = ClientAttribute()

    @shares_options(TrackerDestination.__init__, TrackerOptions, logging_rank="last")
    def __init__(
        self,
        experiment_name: str | None = None,
        run_name: str | None = None,
        tags: Mapping[str, Any] | None = None,
        tracking_uri: str | os.PathLike[str] | None = None,
        rank_zero_only: bool = True,
        flush_interval: float = 10.0,
        synchronous: bool = True,
        run_group: str | None = None,
        resume: bool = False,
        *,
        run_id: str | None = None,
        artifact_location: str | None = None,
        upload_traces: bool = False,
        upload_logs: bool = False,
        upload_performance_metrics: bool = True,
        **options: Unpack[TrackerOptions],
    ) -> None:
        cls = type(self).__name__
        if importlib.util.find_spec("mlflow") is None:
            raise MissingExtraError(self.extra, cls)
        _check_name(cls, "experiment_name", experiment_name, _MAX_EXPERIMENT_NAME)
        _check_name(cls, "run_name", run_name)
        _check_name(cls, "run_group", run_group)
        _check_name(cls, "artifact_location", artifact_location, 4096)
        if tags is not None and not isinstance(tags, Mapping):
            raise TypeError(f"{cls} tags must be a dict of str to values, got {tags!r}.")
        for key in tags or {}:
            if not isinstance(key, str) or not key:
                raise ValueError(f"{cls} tag names must be non-empty str, got {key!r}.")
        # nan would make a timer that is never due; 0 sends a batch at every hand-over.
        check_number(cls, "flush_interval", flush_interval, minimum=0, unit=" of seconds")
        switches = {"synchronous": synchronous, "resume": resume, "upload_traces": upload_traces,
                    "upload_logs": upload_logs,
                    "upload_performance_metrics": upload_performance_metrics}  # fmt: skip
        for what, value in switches.items():
            check_bool(cls, what, value)
        if run_id is not None and (not isinstance(run_id, str) or not _RUN_ID.match(run_id)):
            raise ValueError(
                f"{cls} run_id must be an MLflow run id (letters, digits, '_' and '-'), "
                f"got {run_id!r}."
            )
        # MLflow's pattern admits any word, but every store names a run by uuid4().hex: any
        # other id (a run name, say) is only found missing when the run starts, at fit.
        if run_id is not None and not re.fullmatch(r"[0-9a-f]{32}", run_id):
            raise ValueError(
                f"{cls} run_id must be an MLflow run id, 32 lowercase hex characters such as "
                f"'0a1b2c3d4e5f60718293a4b5c6d7e8f9', got {run_id!r}. To fix, copy the id from "
                "the run's page (or run.info.run_id); to continue a run by its name, pass "
                "run_name=... with resume=True instead."
            )
        if run_id is not None and not rank_zero_only:
            raise ValueError(
                f"{cls} run_id={run_id!r} needs rank_zero_only=True: one run can't hold every "
                "rank's metrics. To fix, resume one rank's run, or use resume=True to continue "
                "each rank's run by its name."
            )
        tracking_uri = check_tracking_uri(cls, tracking_uri)
        # An unknown scheme fails only when the client starts, at fit. The schemes MLflow
        # registers, and its plugins' (read from entry points: no client starts).
        from importlib.metadata import entry_points

        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
        schemes = {"", "file", "databricks", "databricks-uc", "uc", "http", "https", "sqlite",
                   "postgresql", "mysql", "mssql"}  # fmt: skip
        schemes |= {ep.name for ep in entry_points(group="mlflow.tracking_store")}
        if uri_scheme(uri) not in schemes:
            origin = "" if tracking_uri else " (from $MLFLOW_TRACKING_URI)"
            raise ValueError(
                f"{cls} tracking_uri {mask_credentials(uri)!r}{origin} has a scheme MLflow has "
                f"no store for; accepted: {', '.join(sorted(s + ':' for s in schemes if s))} "
                "or a local path. To fix, use e.g. 'http://127.0.0.1:5000' or "
                "'sqlite:///path/to/mlflow.db'."
            )
        client = MLFlowClient(
            experiment_name=experiment_name,
            run_name=run_name,
            tags=mask_value({key: str(value) for key, value in (tags or {}).items()}),
            tracking_uri=tracking_uri,
            flush_interval=float(flush_interval),
            synchronous=synchronous,
            run_group=run_group,
            resume=resume,
            run_id=run_id,
            artifact_location=artifact_location,
            upload_performance_metrics=upload_performance_metrics,
        )
        super().__init__(client, rank_zero_only=rank_zero_only, **options)
        self.upload_traces = upload_traces
        self.upload_logs = upload_logs

    @property
    def undelivered_metrics(self) -> int:
        """Metric values of the latest run in batches MLflow did not take (server down, ...)."""
        return self.client.undelivered_metrics

    @property
    def skipped_values(self) -> int:
        """Metric values of the latest run skipped as not one number (lists, strings, None)."""
        return self.client.skipped_values

    def resolved_tracking_uri(self, run_folder: str | os.PathLike[str], rank: int = 0) -> str:
        """The tracking URI a run in ``run_folder`` logs to (see the class docstring)."""
        uri, _ = resolve_tracking_uri(
            self.tracking_uri, Path(run_folder), rank, not self.rank_zero_only
        )
        return uri

    def uploads(self, remote_file_name: str) -> bool:
        """Whether ``upload_file`` stores a file of this name, given the upload switches."""
        if is_trace_file(remote_file_name):
            return self.upload_traces
        return self.upload_logs or not is_log_file(remote_file_name)

    @override
    def upload_file(
        self, state: State, remote_file_name: str, file_path: Path, *, overwrite: bool = False
    ) -> None:
        if self.uploads(remote_file_name):
            super().upload_file(state, remote_file_name, file_path, overwrite=overwrite)

    @override
    def close(self, state: State, logger: Logger) -> None:
        super().close(state, logger)
        self.client.stop_timer()  # also when the client did not finish in time
