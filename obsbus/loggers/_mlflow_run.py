"""One MLflow run as MLFlowLogger's writer thread drives it: explicit run id, batched metrics.

Everything here runs on the destination's background thread and imports
``mlflow`` only when called.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from obsbus.loggers._mlflow_names import KeyNames, metric_value, mlflow_key, param_value

__all__ = ["MlflowRun", "open_run"]

log = logging.getLogger("obsbus")

#: MLflow's per-request metric limit; one batch beyond it is sent at once.
MAX_METRICS_PER_CALL = 1000
# MLflow shows these on the run page; obsbus's own git tags keep their names too.
_GIT_SOURCE_TAGS = {
    "git.commit": "mlflow.source.git.commit",
    "git.branch": "mlflow.source.git.branch",
}


def _experiment_id(client: Any, name: str, artifact_location: str | None) -> str:
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return str(client.create_experiment(name, artifact_location=artifact_location))
        except MlflowException:  # another rank or process created it first
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if found.lifecycle_stage != "active":
        raise ValueError(
            f"MLflow experiment {name!r} is deleted. To fix, restore it "
            "(MlflowClient().restore_experiment) or choose another experiment_name."
        )
    return str(found.experiment_id)


def _latest_run(client: Any, experiment_id: str, name: str) -> Any:
    quote = "'" if "'" not in name else '"'
    if quote in name:  # MLflow's filter strings can't quote both
        return None
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"attributes.run_name = {quote}{name}{quote}",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def open_run(
    client: Any,
    *,
    experiment_name: str,
    run_name: str,
    tags: dict[str, str],
    run_id: str | None,
    resume: bool,
    artifact_location: str | None,
) -> tuple[Any, bool]:
    """The run to log to and whether it existed: ``run_id``'s, the latest of that name, or new."""
    if run_id is not None:
        return client.get_run(run_id), True
    experiment_id = _experiment_id(client, experiment_name, artifact_location)
    run = _latest_run(client, experiment_id, run_name) if resume else None
    if run is not None:
        return run, True
    return client.create_run(experiment_id, run_name=run_name, tags=tags), False


class MlflowRun:
    """Collects metrics and sends them in ``log_batch`` calls; params, tags, artifacts, end.

    The destination's writer thread drives it; a timer thread may also
    :meth:`send` (a stalled run's last values), so collecting and sending
    hold :attr:`lock`.
    """

    def __init__(
        self,
        client: Any,
        run_id: str,
        params: dict[str, str],
        synchronous: bool,
        tag_names: KeyNames | None = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.synchronous = synchronous
        self.params = params
        self.lock = threading.RLock()
        self.pending: list[tuple[str, float, int, int]] = []
        self.ops: list[tuple[Any, int]] = []
        self.last_send = time.monotonic()
        self.skipped = 0
        self.undelivered = 0
        # MLflow's three name spaces; each renamed key is warned about once per run.
        self.metric_names = KeyNames("metric")
        self.param_names = KeyNames("param")
        self.tag_names = tag_names or KeyNames("tag")

    def add_metrics(self, values: dict[str, Any], step: int) -> None:
        """Collect ``values`` at ``step``; a value that is not one number is skipped and counted."""
        now = int(time.time() * 1000)
        entries = []
        for key, value in values.items():
            number = metric_value(value)
            if number is None:  # the client counted it by key (TrackerClient.skip)
                self.skipped += 1
                continue
            entries.append((self.metric_names(key), number, now, int(step)))
        with self.lock:
            self.pending.extend(entries)

    def send(self, interval: float | None = None) -> None:
        """One ``log_batch`` with everything collected; a failed batch is counted and raised.

        With ``interval``, only if that many seconds passed since the last
        batch, or a full batch (1000 values) is waiting.
        """
        from mlflow.entities import Metric

        with self.lock:
            if interval is not None and not (
                len(self.pending) >= MAX_METRICS_PER_CALL
                or time.monotonic() - self.last_send >= interval
            ):
                return
            batch, self.pending = self.pending, []
            self.last_send = time.monotonic()
            if not batch:
                return
            metrics = [Metric(key, value, ts, step) for key, value, ts, step in batch]
            try:
                ops = self.client.log_batch(
                    self.run_id, metrics=metrics, synchronous=self.synchronous
                )
            except Exception:
                self.undelivered += len(batch)
                raise
            if ops is not None:
                self.ops.append((ops, len(batch)))

    def flush(self) -> None:
        """Send what is collected and wait for MLflow's async queue, if used."""
        with self.lock:
            self.send()
            ops, self.ops = self.ops, []
        failed: Exception | None = None
        for op, count in ops:
            try:
                op.wait()
            except Exception as exc:
                self.undelivered += count
                failed = failed or exc
        if failed is not None:
            raise failed

    def log_params(self, params: dict[str, Any]) -> None:
        """Log new params; values that differ from the run's are kept out, with one warning."""
        from mlflow.entities import Param

        new: dict[str, str] = {}
        changed: list[str] = []
        for name, value in params.items():
            key, text = self.param_names(name), param_value(value)
            old = self.params.get(key, new.get(key))
            if old is None:
                new[key] = text
            elif old != text:
                changed.append(key)
        if changed:
            log.warning(
                "obsbus: MLFlowLogger keeps %d param(s) out of run %s: MLflow params can't "
                "change, and the run has other values for %s",
                len(changed),
                self.run_id,
                ", ".join(changed[:10]) + (" ..." if len(changed) > 10 else ""),
            )
        if new:
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in new.items()])
            self.params.update(new)

    def set_tags(self, tags: dict[str, str]) -> None:
        """Set run tags; ``git.commit``/``git.branch`` also as MLflow's source tags."""
        from mlflow.entities import RunTag

        extra = {_GIT_SOURCE_TAGS[k]: v for k, v in tags.items() if k in _GIT_SOURCE_TAGS}
        merged = {self.tag_names(k): str(v) for k, v in {**tags, **extra}.items()}
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in merged.items()])

    def upload(self, remote_file_name: str, file_path: Path) -> None:
        """Store a snapshot of ``file_path`` as the artifact ``remote_file_name``."""
        parts = [
            p for p in remote_file_name.replace("\\", "/").split("/") if p not in ("", ".", "..")
        ]
        name = parts[-1] if parts else file_path.name
        # A snapshot: the file may still grow (FileLogger appends while it is uploaded),
        # and log_artifact names the artifact after the local file.
        staging = Path(tempfile.mkdtemp(prefix="obsbus-mlflow-"))
        try:
            copy = staging / name
            shutil.copyfile(file_path, copy)
            folder = "/".join(parts[:-1]) or None
            self.client.log_artifact(self.run_id, str(copy), artifact_path=folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def log_images(self, arrays: list[Any], key: str, step: int) -> None:
        """Each HW/HWC array as an MLflow image at ``step`` (MLflow scales floats beyond [0, 1])."""
        key = re.sub(r"[^A-Za-z0-9_\-./ ]", "_", mlflow_key(key))
        for array in arrays:
            self.client.log_image(self.run_id, array, key=key, step=step)

    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        """Rows appended to ``tables/{name}.json`` with a ``step`` column (MLflow appends)."""
        data: dict[str, list[Any]] = {} if "step" in columns else {"step": [step] * len(rows)}
        for i, column in enumerate(columns):
            data[str(column)] = [row[i] for row in rows]
        self.client.log_table(
            self.run_id, data=data, artifact_file=f"tables/{mlflow_key(name)}.json"
        )

    def finish(self, status: str) -> None:
        """Send what is left, then end the run with ``status`` (even if sending failed)."""
        try:
            self.flush()
        finally:
            self.client.set_terminated(self.run_id, status=status)
