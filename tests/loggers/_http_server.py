"""A local HTTP server on 127.0.0.1 that stands in for Slack and for a webhook.

Modes: ``ok`` records every request and answers 200; ``flaky`` answers 503
to the first ``failures`` requests, then 200; ``error`` answers 500 always;
``slow`` holds each request up to ``delay`` s (released at once by
:meth:`stop`) before answering 200; ``down`` is a port nothing listens on.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookServer:
    def __init__(self, mode: str = "ok", *, delay: float = 10.0, failures: int = 2) -> None:
        self.mode = mode
        self.delay = delay
        self.failures = failures
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"}
        self.in_flight = 0
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def payloads(self) -> list[Any]:
        """The JSON bodies received (answered or not), in order."""
        with self._lock:
            return [json.loads(r["body"]) for r in self.requests]

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> WebhookServer:
        if self.mode == "down":
            with socket.socket() as s:  # a port that was free: nothing listens there now
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            return self
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length).decode("utf-8")
                with owner._lock:
                    owner.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    n = len(owner.requests)
                    owner.in_flight += 1
                try:
                    status = 200
                    if owner.mode == "slow":
                        owner._release.wait(owner.delay)
                    elif owner.mode == "error" or (owner.mode == "flaky" and n <= owner.failures):
                        status = 500 if owner.mode == "error" else 503
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the client gave up on a held request
                finally:
                    with owner._lock:
                        owner.in_flight -= 1

            def log_message(self, *args: Any) -> None:
                pass  # keep the test output clean

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(
            target=server.serve_forever, args=(0.05,), name="webhook-server", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
