"""What MLFlowLogger sends where: names MLflow accepts, and which files and keys its switches cover.

Kept apart from :mod:`obsbus.loggers.mlflow_logger` so the rules are plain
functions with examples, importable without MLflow.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import numbers
import os
import posixpath
import re
from pathlib import Path
from typing import Any

from obsbus.errors import MissingExtraError
from obsbus.loggers._run_metadata import mask_credentials

log = logging.getLogger("obsbus")

__all__ = [
    "PERFORMANCE_PREFIXES",
    "KeyNames",
    "SQL_SCHEMES",
    "check_tracking_uri",
    "is_log_file",
    "is_performance_metric",
    "is_trace_file",
    "metric_value",
    "mlflow_key",
    "param_value",
    "resolve_tracking_uri",
    "uri_scheme",
]

#: Metric key prefixes that ``upload_performance_metrics=False`` keeps out of MLflow: what
#: SpeedMonitor, MemoryMonitor, SystemMetricsMonitor, RocmSmiMonitor and RuntimeEstimator log.
PERFORMANCE_PREFIXES = ("throughput/", "time/", "memory/", "system/", "utilization/")

# MLflow's rule for metric, param and tag names (mlflow.utils.validation, POSIX).
_BAD_KEY_CHARS = re.compile(r"[^/\w.\- :]")
_MAX_KEY_LEN = 250
_MAX_PARAM_LEN = 6000
_TRACE_DIRS = frozenset({"traces", "torch_traces", "torch_memory_traces"})
_TRACE_NAME = re.compile(r"trace.*\.(json|json\.gz|html)$")
_LOG_NAME = re.compile(r"^(logs|metrics)-rank[^/]*\.(txt|jsonl)$|\.(log|jsonl)$")
# Schemes of the stores MLflow opens through SQLAlchemy (the full ``mlflow`` package only).
SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def mlflow_key(name: str) -> str:
    """``name`` as a metric, param or tag key MLflow accepts.

    Characters other than letters, digits, ``_ - . / :`` and space become ``_``;
    empty, ``.`` and ``..`` path parts are dropped (MLflow refuses names that
    resolve to another path); at most 250 characters.

    Example:
        >>> mlflow_key("loss/train/total"), mlflow_key("env__BASH_FUNC_x%%"), mlflow_key("/a//b/")
        ('loss/train/total', 'env__BASH_FUNC_x__', 'a/b')
    """
    parts = [p for p in _BAD_KEY_CHARS.sub("_", name).split("/") if p not in ("", ".", "..")]
    key = "/".join(parts)[:_MAX_KEY_LEN].rstrip("/") or "_"
    return key if posixpath.normpath(key) == key else "_"


class KeyNames:
    """The MLflow names of one run's metric, param or tag keys, each found once.

    A key MLflow can't take as it is (see :func:`mlflow_key`) is warned
    about once, with its old and new name. Two keys that would become one
    name are kept apart: the first keeps it, a later one gets the name plus
    ``_`` and 8 hex digits of its key's hash (the same key always gets the
    same suffix), also with a warning, so no two series are merged.

    Example:
        >>> names = KeyNames("metric")
        >>> names("loss/train"), names("/loss/train") != names("loss/train")
        ('loss/train', True)
    """

    __slots__ = ("_kind", "_names", "_owners", "renamed")

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._names: dict[str, str] = {}  # key -> MLflow name
        self._owners: dict[str, str] = {}  # MLflow name -> the key that has it
        #: Each key logged under another name -> that name (recorded in the run folder).
        self.renamed: dict[str, str] = {}

    def __call__(self, key: str) -> str:
        """The MLflow name of ``key``."""
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = self._name(key)
        return name

    def _name(self, key: str) -> str:
        name = mlflow_key(key)
        owner = self._owners.get(name)
        if owner is None:
            if name != key:
                log.warning(
                    "obsbus: MLFlowLogger logs %s %r as %r: MLflow names take letters, digits, "
                    "'_', '-', '.', ' ', ':' and '/' (no empty, '.' or '..' parts), at most %d "
                    "characters (said once per key).",
                    self._kind,
                    key,
                    name,
                    _MAX_KEY_LEN,
                )
        else:
            taken, name = name, _apart(name, key, self._owners)
            log.warning(
                "obsbus: MLFlowLogger logs %s %r as %r: %r has the MLflow name %r already.",
                self._kind,
                key,
                name,
                owner,
                taken,
            )
        self._owners[name] = key
        if name != key:
            self.renamed[key] = name
        return name


def _apart(name: str, key: str, taken: dict[str, str]) -> str:
    """``name`` with a suffix from ``key``'s hash that no other key has."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    candidate, count = mlflow_key(f"{name[: _MAX_KEY_LEN - 9]}_{digest}"), 1
    while candidate in taken:  # two keys' 32-bit hashes met: count on
        count += 1
        candidate = mlflow_key(f"{name[: _MAX_KEY_LEN - 20]}_{digest}_{count}")
    return candidate


def param_value(value: Any) -> str:
    """A parameter value as MLflow stores it: ``str``, cut to MLflow's 6000 characters."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_PARAM_LEN else text[: _MAX_PARAM_LEN - 3] + "..."


def metric_value(value: Any) -> float | None:
    """``value`` as the float MLflow stores, or ``None`` when it is not one real number.

    Example:
        >>> metric_value(3), metric_value(True), metric_value([1.0]), metric_value("x")
        (3.0, 1.0, None, None)
    """
    return float(value) if isinstance(value, numbers.Real) else None


def is_performance_metric(key: str) -> bool:
    """Whether ``upload_performance_metrics`` covers ``key`` (see :data:`PERFORMANCE_PREFIXES`).

    Example:
        >>> is_performance_metric("throughput/samples_per_sec"), is_performance_metric("loss/train")
        (True, False)
    """
    return key.startswith(PERFORMANCE_PREFIXES)


def _parts(remote_file_name: str) -> list[str]:
    return [p for p in remote_file_name.replace("\\", "/").split("/") if p not in ("", ".")]


def is_trace_file(remote_file_name: str) -> bool:
    """Whether ``upload_traces`` covers a file: profiler output.

    A file in a ``traces/``, ``torch_traces/`` or ``torch_memory_traces/``
    folder (JSONTraceHandler, TorchProfiler), or one whose name has ``trace``
    and ends ``.json``, ``.json.gz`` or ``.html`` (``rank0.7.pt.trace.json.gz``,
    ``merged_trace.json``).

    Example:
        >>> is_trace_file("r/traces/ep0-ba4-rank0.json"), is_trace_file("r/merged_trace.json")
        (True, True)
        >>> is_trace_file("r/config.json")
        False
    """
    parts = _parts(remote_file_name)
    return bool(parts) and (
        any(p in _TRACE_DIRS for p in parts[:-1]) or bool(_TRACE_NAME.search(parts[-1]))
    )


def is_log_file(remote_file_name: str) -> bool:
    """Whether ``upload_logs`` covers a file: training logs.

    A file in a ``logs/`` folder (the run folder's loguru logs), FileLogger's
    default ``logs-rank*.txt`` and ``metrics-rank*.jsonl``, or any ``.log`` or
    ``.jsonl`` file. Trace files are never log files.

    Example:
        >>> is_log_file("r/logs-rank0.txt"), is_log_file("r/metrics-rank3.jsonl")
        (True, True)
        >>> is_log_file("r/logs/train/rank-0/info.txt"), is_log_file("r/notes.txt")
        (True, False)
    """
    parts = _parts(remote_file_name)
    if not parts or is_trace_file(remote_file_name):
        return False
    return "logs" in parts[:-1] or bool(_LOG_NAME.search(parts[-1]))


def uri_scheme(uri: str) -> str:
    """The scheme of a tracking URI (``""`` for a plain path).

    Example:
        >>> uri_scheme("sqlite:///x.db"), uri_scheme("databricks"), uri_scheme("./mlruns")
        ('sqlite', 'databricks', '')
    """
    if uri in ("databricks", "databricks-uc", "uc"):
        return uri
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", uri)
    if match is None or (os.name == "nt" and len(match[1]) == 1):  # C:\ on Windows
        return ""
    return match[1].split("+")[0].lower()  # postgresql+psycopg2 -> postgresql


def resolve_tracking_uri(
    tracking_uri: str | None, run_folder: Path, rank: int, per_rank: bool
) -> tuple[str, Path | None]:
    """The URI the client opens, and the artifact folder of the experiments it creates.

    ``tracking_uri`` if given, else ``$MLFLOW_TRACKING_URI``, else a SQLite
    store inside the run folder: ``{run_folder}/mlflow/mlflow.db`` with
    artifacts in ``{run_folder}/mlflow/artifacts`` (``mlflow-rank{rank}.db``
    when every rank logs, as SQLite is not for concurrent writers).

    The artifact folder is ``{run_folder}/mlflow/artifacts`` for every SQL
    store the client opens itself (:data:`SQL_SCHEMES`), given or default:
    MLflow would put those artifacts in ``./mlruns`` of the working
    directory. A server chooses its own, and a file store keeps them inside
    itself, so those give ``None``.

    Example:
        >>> uri, artifacts = resolve_tracking_uri(None, Path("/runs/r1"), 0, False)
        >>> uri, str(artifacts)
        ('sqlite:////runs/r1/mlflow/mlflow.db', '/runs/r1/mlflow/artifacts')
        >>> resolve_tracking_uri("http://127.0.0.1:5000", Path("/runs/r1"), 0, False)
        ('http://127.0.0.1:5000', None)
    """
    folder = Path(run_folder).absolute() / "mlflow"
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri, folder / "artifacts" if uri_scheme(uri) in SQL_SCHEMES else None
    db = folder / (f"mlflow-rank{rank}.db" if per_rank else "mlflow.db")
    return f"sqlite:///{db.as_posix()}", folder / "artifacts"


def check_tracking_uri(owner: str, uri: str | os.PathLike[str] | None) -> str | None:
    """``uri`` as a str (a path becomes a ``file:`` URI); refuses stores that can't open.

    A file store (a path, ``file:``) needs ``MLFLOW_ALLOW_FILE_STORE=true``
    (MLflow 3 refuses it otherwise); a SQL store (the default included) needs
    SQLAlchemy and Alembic, which ``mlflow-skinny`` lacks.

    Example:
        >>> check_tracking_uri("MLFlowLogger", "http://127.0.0.1:5000")
        'http://127.0.0.1:5000'
    """
    if uri is None:
        env = os.environ.get("MLFLOW_TRACKING_URI")
        value, scheme = (env, uri_scheme(env)) if env else ("(default)", "sqlite")
    elif isinstance(uri, os.PathLike):
        value, scheme = Path(uri).absolute().as_uri(), "file"
    elif isinstance(uri, str) and uri:
        value, scheme = uri, uri_scheme(uri)
    else:
        raise TypeError(
            f"{owner} tracking_uri must be a non-empty str, a path or None, got {uri!r}."
        )
    if scheme in ("", "file") and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in (
        "true",
        "1",
    ):
        raise ValueError(
            f"{owner} tracking_uri {mask_credentials(value)!r} is an MLflow file store, "
            "which MLflow 3 keeps in maintenance mode and refuses to open. To fix, use "
            "'sqlite:///path/to/mlflow.db' (or leave tracking_uri unset for a SQLite store "
            "in the run folder), or set MLFLOW_ALLOW_FILE_STORE=true to keep the file store."
        )
    if scheme in SQL_SCHEMES and not all(
        importlib.util.find_spec(name) for name in ("sqlalchemy", "alembic")
    ):
        raise MissingExtraError("mlflow", f"{owner} with a {scheme} store (not mlflow-skinny)")
    return None if uri is None else value
