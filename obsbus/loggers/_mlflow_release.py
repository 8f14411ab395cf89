"""Give back, when an MLflow run of obsbus's ends, what opening its SQL store created.

MLflow keeps, for the life of the process, one SQLAlchemy engine per database
URI (``SqlAlchemyStore._engine_map``) and one store object per URI in its store
registry (an ``lru_cache`` of 100). An engine holds its pooled connections (2
file descriptors open on SQLite's ``mlflow.db``) and a compiled-statement cache
(~7-9 MB once MLflow's queries have run), so each closed run of obsbus's default
store (``{run folder}/mlflow/mlflow.db``, a new URI a run) used to leave both
behind: in a notebook or a sweep of 30 runs, 60 descriptors on closed runs'
databases and ~270 MB.

:class:`StoreLease` tells the engines obsbus created from those it found:
an engine that was not in MLflow's map when obsbus's client was built was
created for obsbus's run, and is released when the last obsbus run using it
ends: its pool is disposed (the connections close) and its compiled-statement
cache is cleared. Both are caches: the engine stays in MLflow's map and in the
cached store, and opens a new connection the next time anyone uses the URI
(your own ``MlflowClient`` on the same database keeps working). An engine that
was there before (your own MLflow use of that URI) is never touched. The run's
entry in MLflow's artifact-repository cache goes too, and with
``synchronous=False`` the async-logging threads of a store obsbus created
are shut down (they are started per store, so per run for the default store).

Everything here runs on the destination's writer thread and imports
``mlflow`` only for a SQL store.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from typing import Any

__all__ = ["StoreLease"]

log = logging.getLogger("obsbus")

#: The URI schemes MLflow serves from a SQLAlchemy store (``mysql+pymysql:`` and the like too).
_SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
_lock = threading.Lock()
#: Engines obsbus's runs created (weakly: MLflow's map keeps them) -> obsbus runs using them.
_users: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _is_sql(uri: str) -> bool:
    return uri.split(":", 1)[0].split("+", 1)[0].lower() in _SQL_SCHEMES


def _engine_map() -> dict[str, Any]:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engines: dict[str, Any] = SqlAlchemyStore._engine_map
    return engines


class StoreLease:
    """What one obsbus run took from MLflow's process-wide caches, to give back at its end.

    Build the client inside ``with lease:``: what it created there is this
    run's to give back. Call :meth:`release` once the run has ended (it never
    raises).

    Example:
        >>> with StoreLease("http://127.0.0.1:5000") as lease:
        ...     pass  # MlflowClient(tracking_uri=lease.uri) here
        >>> lease.engine is None  # a server: no engine in this process
        True
        >>> lease.release("0a1b2c3d4e5f60718293a4b5c6d7e8f9")
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.engine: Any = None  # the engine obsbus created (or shares with another obsbus run)
        self.store: Any = None  # MLflow's store object for the URI, when the engine is ours
        self._before: Any = None

    def __enter__(self) -> StoreLease:
        if _is_sql(self.uri):
            # One obsbus client at a time is built on a SQL store, so two runs opening the
            # same new database both know the engine as obsbus's.
            _lock.acquire()
            self._before = _engine_map().get(self.uri)
        return self

    def __exit__(self, *exc: object) -> None:
        if not _is_sql(self.uri):
            return
        try:
            engine = _engine_map().get(self.uri)
            if engine is not None and (engine is not self._before or engine in _users):
                _users[engine] = _users.get(engine, 0) + 1
                self.engine = engine
                from mlflow.tracking._tracking_service import utils

                get_store: Any = utils._get_store  # untyped in mlflow
                self.store = get_store(self.uri)  # the cached store object the client uses
        finally:
            self._before = None
            _lock.release()

    def release(self, run_id: str | None) -> None:
        """Give back what this run took: the run's artifact repository, and the engine (and
        its store's async-logging threads) when no other obsbus run uses it."""
        try:
            self._release(run_id)
        except Exception as exc:  # a cache left full is not worth failing a run's end over
            log.warning("obsbus: MLFlowLogger could not release MLflow's caches: %r", exc)

    def _release(self, run_id: str | None) -> None:
        if run_id is not None:
            import sys

            utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
            repos = getattr(utils, "_artifact_repos_cache", None)
            if repos is not None:
                repos.pop(run_id, None)
        engine, store, self.engine, self.store = self.engine, self.store, None, None
        if engine is None:
            return
        with _lock:
            left = _users.get(engine, 1) - 1
            _users[engine] = left
        if left > 0:
            return
        queue = getattr(store, "_async_logging_queue", None)
        if queue is not None and not queue.is_idle():
            queue.shut_down_async_logging()  # drains what is queued, then joins its threads
        if queue is not None:
            atexit.unregister(queue._at_exit_callback)  # it holds the store (and the engine)
        engine.dispose()  # pooled connections close; the engine opens new ones when used
        compiled = getattr(engine, "_compiled_cache", None)
        if compiled is not None:
            compiled.clear()
