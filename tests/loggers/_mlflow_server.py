"""A real ``mlflow server`` on 127.0.0.1 for the MLFlowLogger tests: start, wait, kill, stop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

#: What keeps an MLflow process offline and quiet in tests.
OFFLINE_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",  # mlflow reads it as "true", not "1"
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """``mlflow server`` with a SQLite backend and proxied artifacts under ``root``.

    :meth:`start` returns at once (the server takes many seconds to import and
    migrate its database), so a test module can do other work meanwhile;
    :meth:`ensure_running` waits for ``/health`` and starts a fresh server
    (same database) if an earlier test killed this one.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / "mlflow.db"
        self.artifacts = root / "artifacts"
        self.log_path = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.startup_seconds: float | None = None
        self._started_at = 0.0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = {**os.environ, **OFFLINE_ENV}
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
               "--port", str(self.port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{self.db}",
               "--artifacts-destination", str(self.artifacts)]  # fmt: skip
        self._started_at = time.monotonic()
        with self.log_path.open("ab") as out:
            # Its own session, so kill() takes the CLI and its uvicorn worker together.
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure_running(self, timeout: float = 180.0) -> str:
        """Wait until ``/health`` answers (starting the server if needed); the URI."""
        if not self.alive():
            self.start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if not self.alive():
                raise RuntimeError(f"mlflow server exited:\n{self.log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"mlflow server not up in {timeout}s:\n{self.log_tail()}")
            time.sleep(0.2)
        if self.startup_seconds is None:
            self.startup_seconds = time.monotonic() - self._started_at
        return self.uri

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        """SIGKILL the server (a crash, not a shutdown) and wait for it to be gone."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        else:  # the CLI is gone; make sure no worker outlives it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
