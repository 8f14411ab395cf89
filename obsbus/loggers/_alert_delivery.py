"""Alert delivery: HTTP POSTs from one background thread, with retries, backoff and a bound.

Nothing here runs on the training thread except :meth:`AlertDelivery.send`,
which only queues (it never waits: a full queue drops the alert and counts
it). The writer thread builds each payload (numbers read from tensors, JSON
encoded, masked), posts it with :mod:`urllib.request` and retries what
failed for a transient reason (connection refused or reset, a timeout, HTTP
408, 429 and 5xx) with exponential backoff up to ``max_backoff``. Other HTTP
errors (400, 403, 404: a revoked or mistyped webhook) fail at once.

:meth:`AlertDelivery.close` waits at most ``timeout`` seconds; an alert in
backoff whose next attempt falls past that deadline gives up, and what is
still queued is dropped. Each ends up in :attr:`Tally.undelivered`, counted
by kind, which the destination reports. No message here ever holds the URL:
errors are described by their type and masked message only.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

from obsbus.masking import mask_secrets
from obsbus.writer import BackgroundWriter

__all__ = ["AlertDelivery", "Tally"]

#: HTTP statuses worth another attempt: timeout, rate limit, server errors.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class Tally:
    """What became of the alerts of one open/close cycle of an :class:`AlertDelivery`.

    A write abandoned at close may still finish later, on its thread: it
    updates the tally it started with, never the next cycle's.
    """

    __slots__ = ("deadline", "delivered", "pending", "undelivered", "wake")

    def __init__(self) -> None:
        self.pending: Counter[str] = Counter()  # queued or being sent, by kind
        self.undelivered: Counter[str] = Counter()  # given up, by kind
        self.delivered = 0
        self.deadline: float | None = None  # set at close: no attempt starts after it
        self.wake = threading.Event()  # cuts a backoff wait short at close

    def left(self) -> float | None:
        """Seconds to the close deadline (``None`` before close)."""
        return None if self.deadline is None else self.deadline - time.monotonic()


class AlertDelivery:
    """Posts payloads to one URL from a background thread (see the module docstring).

    Args:
        name: the destination's name, for messages and the thread's name.
        url: where to POST (never logged).
        headers: HTTP headers (a token's ``Authorization`` among them: never logged).
        secrets: strings masked in every message besides the usual ones.
        timeout: seconds one request may take.
        max_attempts: attempts per payload (1: no retry).
        retry_backoff: seconds before the first retry; doubled after each.
        max_backoff: the cap of one backoff wait.
        max_queue_size: alerts that may wait; more are dropped and counted.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        headers: dict[str, str],
        secrets: Iterable[str],
        timeout: float,
        max_attempts: int,
        retry_backoff: float,
        max_backoff: float,
        max_queue_size: int,
    ) -> None:
        self.name = name
        self._url = url
        self._headers = dict(headers)
        self._secrets = tuple(secrets)
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.max_backoff = max_backoff
        self._writer = BackgroundWriter(f"{name}-alerts", max_queue_size=max_queue_size)
        self._lock = threading.Lock()
        self.tally = Tally()
        #: Every POST attempted, on every cycle (the writer thread counts them).
        self.attempts = 0
        #: The last error seen, masked, described without the URL.
        self.last_error: str | None = None

    def mask(self, text: str) -> str:
        """``text`` with the URL, the token and every secret-looking value masked."""
        return mask_secrets(text, self._secrets)

    @property
    def pending(self) -> int:
        """Alerts queued or being sent."""
        with self._lock:
            return sum(self.tally.pending.values())

    def send(self, kind: str, build: Callable[[], list[bytes]]) -> bool:
        """Queue one alert: ``build()`` makes its request bodies, on the writer thread.

        Never blocks: with the queue full the alert is dropped, counted as
        undelivered, and ``False`` returned. Safe from any thread.
        """
        with self._lock:
            tally = self.tally
            tally.pending[kind] += 1
            queued = self._writer.try_submit(self._deliver, tally, kind, build, timeout=0)
            if not queued:
                tally.pending[kind] -= 1
                tally.undelivered[kind] += 1
                self.last_error = f"the queue was full ({self._writer.max_queue_size} alerts)"
        return queued

    def _deliver(self, tally: Tally, kind: str, build: Callable[[], list[bytes]]) -> None:
        ok = False
        try:
            ok = all(self._post(tally, body) for body in build())
        except Exception as exc:  # a payload that could not be built: counted, reported
            self.last_error = self._describe(exc)
        finally:
            with self._lock:
                tally.pending[kind] -= 1
                if ok:
                    tally.delivered += 1
                else:
                    tally.undelivered[kind] += 1

    def _post(self, tally: Tally, body: bytes) -> bool:
        import urllib.error  # here, not at import: urllib.request loads ssl and http.client
        import urllib.request

        headers = {"Content-Type": "application/json; charset=utf-8", **self._headers}
        for attempt in range(1, self.max_attempts + 1):
            left = tally.left()
            if left is not None and left <= 0:
                return False
            timeout = self.timeout if left is None else min(self.timeout, left)
            retry_after: float | None = None
            request = urllib.request.Request(self._url, data=body, headers=headers, method="POST")
            self.attempts += 1
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    response.read()
                return True
            except urllib.error.HTTPError as exc:
                self.last_error = f"HTTP {exc.code} {self.mask(str(exc.reason))}"
                if exc.code not in RETRY_STATUSES:
                    return False  # a revoked or wrong webhook: retrying won't help
                retry_after = _seconds(exc.headers.get("Retry-After") if exc.headers else None)
            except (OSError, ValueError) as exc:  # URLError, refused, reset, timeout
                self.last_error = self._describe(exc)
            if attempt == self.max_attempts:
                return False
            delay = min(self.retry_backoff * 2 ** (attempt - 1), self.max_backoff)
            if retry_after is not None:
                delay = min(max(delay, retry_after), self.max_backoff)
            if not _wait(tally, delay):
                return False
        return False

    def _describe(self, exc: BaseException) -> str:
        reason = getattr(exc, "reason", None)  # URLError wraps the socket error
        shown = reason if isinstance(reason, BaseException) else exc
        return self.mask(f"{type(shown).__name__}: {shown}")

    def flush(self, timeout: float) -> bool:
        """Wait at most ``timeout`` s for the alerts queued so far; ``False`` if some remain."""
        return self._writer.flush(timeout)

    def close(self, timeout: float) -> Tally:
        """Wait at most ``timeout`` s for the queued alerts; return this cycle's tally.

        Alerts still queued or in backoff past the deadline are given up and
        counted in the tally's ``undelivered`` (with those still pending). A
        later :meth:`send` starts a new cycle.
        """
        with self._lock:
            tally = self.tally
            tally.deadline = time.monotonic() + timeout
            self.tally = Tally()
        tally.wake.set()
        self._writer.close(timeout, report=False)
        with self._lock:
            for kind, count in tally.pending.items():
                if count > 0:  # queued behind a hung request, or the hung one itself
                    tally.undelivered[kind] += count
            tally.pending.clear()
        return tally


def _wait(tally: Tally, delay: float) -> bool:
    """Wait ``delay`` s before a retry; ``False`` when the close deadline comes first."""
    target = time.monotonic() + delay
    while True:
        now = time.monotonic()
        if tally.deadline is not None:
            if target > tally.deadline:
                return False
            time.sleep(max(target - now, 0.0))
            return True
        if now >= target or not tally.wake.wait(target - now):
            return True


def _seconds(text: str | None) -> float | None:
    try:
        return None if text is None else max(float(text), 0.0)
    except ValueError:
        return None  # an HTTP date: the backoff decides
