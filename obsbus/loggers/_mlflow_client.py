"""The MLflow client of :class:`~obsbus.loggers.mlflow_logger.MLFlowLogger` (writer thread)."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus.errors import TrainingTerminated
from obsbus.loggers._mlflow_names import (
    KeyNames,
    is_performance_metric,
    metric_value,
    resolve_tracking_uri,
    uri_scheme,
)
from obsbus.loggers._mlflow_release import StoreLease
from obsbus.loggers._mlflow_run import MlflowRun, open_run
from obsbus.loggers._run_metadata import mask_credentials
from obsbus.loggers._tracker_client import RunInfo, TrackerClient
from obsbus.run_folder import os_user

__all__ = ["MLFlowClient"]

log = logging.getLogger("obsbus")


class MLFlowClient(TrackerClient):
    """One MLflow run, through mlflow's own ``MlflowClient`` with an explicit run id."""

    def __init__(
        self,
        *,
        experiment_name: str | None,
        run_name: str | None,
        tags: dict[str, str],
        tracking_uri: str | None,
        flush_interval: float,
        synchronous: bool,
        run_group: str | None,
        resume: bool,
        run_id: str | None,
        artifact_location: str | None,
        upload_performance_metrics: bool,
    ) -> None:
        self.experiment_name, self.run_name, self.tags = experiment_name, run_name, tags
        self.tracking_uri, self.flush_interval = tracking_uri, flush_interval
        self.synchronous, self.run_group, self.resume = synchronous, run_group, resume
        self.artifact_location = artifact_location
        self.upload_performance_metrics = upload_performance_metrics
        #: The run logged to: ``run_id`` until a run starts, then that run's id.
        self.run_id: str | None = run_id
        self._resume_id = run_id
        self._run: MlflowRun | None = None  # the live run (writer thread)
        self._names_file: Path | None = None  # mlflow-key-names.json, known at start
        self._names_recorded = 0
        self._last_run: MlflowRun | None = None  # the latest, for its counts
        self._timer: threading.Timer | None = None  # sends a batch when training stalls
        self._lease: StoreLease | None = None  # what the run took from MLflow's caches
        self._report: Callable[[str, BaseException], None] = lambda what, exc: None

    @property
    def undelivered_metrics(self) -> int:
        """Metric values of the latest run in batches MLflow did not take (server down, ...)."""
        run = self._last_run
        return 0 if run is None else run.undelivered

    @property
    def skipped_values(self) -> int:
        """Metric values of the latest run skipped as not one number (lists, strings, None)."""
        run = self._last_run
        return 0 if run is None else run.skipped

    @override
    def can_upload_files(self) -> bool:
        return True

    @override
    def check_credentials(self) -> None:
        if self.tracking_uri and mask_credentials(self.tracking_uri) != self.tracking_uri:
            log.warning(
                "obsbus: MLFlowLogger was given credentials inside tracking_uri %r; keep them "
                "out of code and configs: set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in the environment.",
                mask_credentials(self.tracking_uri),
            )
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
        if uri_scheme(uri).startswith("databricks") and not os.environ.get("DATABRICKS_HOST"):
            log.warning(
                "obsbus: MLFlowLogger logs to %r but DATABRICKS_HOST is not set; MLflow then "
                "looks for a ~/.databrickscfg profile and fails to start without one. To fix, "
                "set DATABRICKS_HOST (and DATABRICKS_TOKEN) in the environment.",
                mask_credentials(uri),
            )

    @override
    def start(self, info: RunInfo) -> None:
        from mlflow import MlflowClient

        self._report = info.report
        suffix = f"-rank{info.rank}" if info.every_rank else ""
        self._names_file = info.run_folder / f"mlflow-key-names{suffix}.json"
        self._names_recorded = 0
        uri, artifacts = resolve_tracking_uri(
            self.tracking_uri, info.run_folder, info.rank, info.every_rank
        )
        if artifacts is not None:
            artifacts.mkdir(parents=True, exist_ok=True)
        self._lease = StoreLease(uri)
        try:
            with self._lease:
                client = MlflowClient(tracking_uri=uri)
            self._open(client, info, uri, artifacts)
        except BaseException:
            self._release()  # a run that never started gives back what it opened too
            raise

    def _open(self, client: Any, info: RunInfo, uri: str, artifacts: Path | None) -> None:
        name = self.run_name or info.run_name
        source = Path(sys.argv[0] if sys.argv else "python").name
        tags = {"mlflow.user": os_user(), "mlflow.source.name": source,
                "mlflow.source.type": "LOCAL", **self.tags}  # fmt: skip
        if info.every_rank:
            name = f"{name}-rank{info.rank}"
            tags |= {"run_group": self.run_group or info.run_name, "obsbus.rank": str(info.rank)}
        experiment = (
            self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or info.project
        )
        location = self.artifact_location or (artifacts.as_uri() if artifacts else None)
        tag_names = KeyNames("tag")  # the names the run's tags get, at creation and later
        run, resumed = open_run(client, experiment_name=experiment, run_name=name,
                                tags={tag_names(k): v for k, v in tags.items()},
                                run_id=self._resume_id, resume=self.resume,
                                artifact_location=location)  # fmt: skip
        self.run_id = run.info.run_id
        self._run = self._last_run = MlflowRun(
            client, run.info.run_id, {}, self.synchronous, tag_names
        )
        if resumed:
            self._run.params = dict(run.data.params)
            client.update_run(run.info.run_id, status="RUNNING")
            self._run.set_tags(tags)
        log.info(
            "obsbus: MLFlowLogger logs to run %s (%r) of experiment %s at %s",
            run.info.run_id,
            run.info.run_name,
            run.info.experiment_id,
            mask_credentials(uri),
        )

    def _live(self) -> MlflowRun:
        if self._run is None:
            raise RuntimeError("MLFlowLogger: the MLflow run is not started")
        return self._run

    @override
    def log_metrics(self, values: dict[str, Any], step: int) -> None:
        if not self.upload_performance_metrics:
            values = {k: v for k, v in values.items() if not is_performance_metric(k)}
        for key, value in values.items():
            if metric_value(value) is None:
                kind = type(value).__name__
                self.skip(key, f"MLflow metrics are numbers, and this value is a {kind}")
        run = self._live()
        run.add_metrics(values, step)
        self._record_names(run)

    def _record_names(self, run: MlflowRun) -> None:
        """Write every renamed key (see :class:`KeyNames`) to ``mlflow-key-names.json`` in the
        run folder when a new one came, so a reader finds the original key of a name."""
        names = {"metric": run.metric_names, "param": run.param_names, "tag": run.tag_names}
        count = sum(len(n.renamed) for n in names.values())
        if count == self._names_recorded or self._names_file is None:
            return
        self._names_recorded = count
        text = json.dumps({kind: n.renamed for kind, n in names.items()}, indent=2)
        tmp = self._names_file.with_suffix(".json.tmp")
        try:
            tmp.write_text(text + "\n", encoding="utf-8")
            os.replace(tmp, self._names_file)
        except OSError as exc:  # a full disk: the metrics themselves still go to MLflow
            self._report("write mlflow-key-names.json", exc)

    @override
    def metrics_done(self) -> None:
        run = self._live()
        run.send(self.flush_interval)
        if run.pending and (self._timer is None or not self._timer.is_alive()):
            # If training stalls (a hang, a long eval), what was logged last still goes.
            wait = self.flush_interval - (time.monotonic() - run.last_send)
            self._timer = threading.Timer(max(wait, 0.0) + 0.01, self._on_timer)
            self._timer.daemon = True
            self._timer.start()

    def _on_timer(self) -> None:
        run = self._run
        if run is None:
            return
        try:
            run.send(self.flush_interval)
        except Exception as exc:  # reported like the writer's own failures
            self._report("send", exc)

    @override
    def flush(self) -> None:
        self._live().flush()

    @override
    def log_params(self, params: dict[str, Any]) -> None:
        run = self._live()
        run.log_params(params)
        self._record_names(run)

    @override
    def set_tags(self, tags: dict[str, str]) -> None:
        run = self._live()
        run.set_tags(tags)
        self._record_names(run)

    @override
    def upload_file(self, remote_file_name: str, file_path: Path) -> None:
        self._live().upload(remote_file_name, file_path)

    @override
    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        self._live().log_table(columns, rows, name, step)

    @override
    def log_images(self, images: list[Any], name: str, step: int) -> None:
        self._live().log_images(images, name, step)

    def stop_timer(self) -> None:
        """No batch goes after close (a client that did not finish in time)."""
        if self._timer is not None:
            self._timer.cancel()

    def _release(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release(self.run_id)

    @override
    def finish(self, failed: bool, exception: BaseException | None) -> None:
        run, self._run = self._run, None
        self.stop_timer()
        if run is None:
            self._release()
            return
        killed = isinstance(exception, (TrainingTerminated, KeyboardInterrupt))
        try:
            run.finish("KILLED" if failed and killed else "FAILED" if failed else "FINISHED")
        finally:
            self._release()  # the store's engine and caches, once the run has ended
            if run.undelivered:
                log.warning(
                    "obsbus: MLFlowLogger: %d metric value(s) were not delivered to run %s "
                    "(see the first MLFlowLogger error above).",
                    run.undelivered,
                    run.run_id,
                )
            if run.skipped:
                log.warning(
                    "obsbus: MLFlowLogger skipped %d metric value(s) that were not one number.",
                    run.skipped,
                )
