"""The base of the alert destinations: which events alert, from which rank, and how.

:class:`AlertDestination` is exported by :mod:`obsbus.loggers.alerts`, with
:class:`~obsbus.loggers.alerts.SlackLogger` and
:class:`~obsbus.loggers.alerts.WebhookLogger`.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from obsbus._check import (
    check_bool,
    check_callable,
    check_int,
    check_optional_number,
    check_seconds,
)
from obsbus._failures import plugin_name
from obsbus.interval import LogInterval
from obsbus.logger import Logger, LoggerDestination
from obsbus.loggers._alert_delivery import AlertDelivery
from obsbus.loggers._alert_payloads import EVENTS, LEVELS, Alert, describe_error, render
from obsbus.loggers._alert_secrets import WebhookSecrets
from obsbus.time import TimeLike, TimeUnit

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = ["AlertDestination"]

log = logging.getLogger("obsbus")
NAN_KEY = "nan/first_bad_batch"  # what NaNMonitor logs when it finds a bad batch
SPIKE_PREFIX = "loss_spike/"
FORMATS = ("json", "slack")
_EVERY_RANK = frozenset({"run_failed", "hang_detected"})  # a rank may fail or hang alone
_MAX_LISTED = 10  # failed uploads named in one alert
_now = time.monotonic  # the summary clock (a test may replace it)


class AlertDestination(LoggerDestination):
    """Sends alerts about the run to a webhook, off the training thread.

    Use :class:`SlackLogger` or :class:`WebhookLogger`; this base holds what
    they share. Each event is switched by its flag:

    =====================  ====================  ===========================================
    flag                   ``event``             when
    =====================  ====================  ===========================================
    ``on_start``           ``run_started``       ``fit_start``
    ``on_finish``          ``run_finished``      ``fit_end``, with the latest metrics
    ``on_failure``         ``run_failed``        ``exception``, with the (masked) error
    ``on_nan``             ``nan_found``         ``nan/first_bad_batch`` is logged (NaNMonitor)
    ``on_hang``            ``hang_detected``     :meth:`alert` is called (HangWatchdog)
    ``on_loss_spike``      ``loss_spike``        a ``loss_spike/...`` key is logged (once a step)
    ``on_upload_failure``  ``upload_failed``     at close, files a store gave up on
    ``summary_interval``   ``metrics_summary``   every N minutes (off by default)
    =====================  ====================  ===========================================

    With ``rank_zero_only`` (the default) only rank 0 alerts, except for
    ``run_failed`` and ``hang_detected``, which every rank sends: a rank
    may fail or hang on its own, and its alert names it.

    On the training thread an alert is only queued (never waited for: a full
    queue drops and counts it); logged metrics are only held, the latest
    value per key, as they came (tensors unread). The writer thread turns
    them into numbers, builds and masks the payload and POSTs it, retrying
    transient errors with exponential backoff. At close it waits at most
    ``close_timeout`` seconds, then reports by count and kind what was not
    delivered (:attr:`undelivered`). The URL and token are read from the
    environment only, registered with :func:`obsbus.masking.add_secret_pattern`
    and never shown in a message, an error or a file.

    Example:
        >>> import os
        >>> from obsbus.loggers.alerts import WebhookLogger
        >>> os.environ["PAGER_URL"] = "https://pager.example.com/hook"
        >>> pager = WebhookLogger("PAGER_URL", on_start=False, on_finish=False)
        >>> sorted(event for event, on in pager.switches.items() if on)
        ['hang_detected', 'loss_spike', 'nan_found', 'run_failed', 'upload_failed']
        >>> pager.post_close()  # the end of a run: what was queued is sent, secrets released
        >>> del os.environ["PAGER_URL"]
    """

    def __init__(
        self,
        url_env: str,
        *,
        format: str,
        token_env: str | None = None,
        on_start: bool = True,
        on_finish: bool = True,
        on_failure: bool = True,
        on_nan: bool = True,
        on_hang: bool = True,
        on_loss_spike: bool = True,
        on_upload_failure: bool = True,
        summary_interval: float | None = None,
        log_interval: TimeLike | None = None,
        include_keys: Sequence[str] = (),
        formatter_func: Callable[..., list[dict[str, Any]]] | None = None,
        max_logs_per_message: int = 50,
        rank_zero_only: bool = True,
        timeout: float = 10.0,
        max_attempts: int = 5,
        retry_backoff: float = 1.0,
        max_backoff: float = 30.0,
        close_timeout: float = 10.0,
        max_queue_size: int = 256,
    ) -> None:
        cls = type(self).__name__
        if format not in FORMATS:
            raise ValueError(f"{cls} format must be 'json' or 'slack', got {format!r}.")
        self.format = format
        self.url_env, self.token_env = url_env, token_env
        self._secrets = WebhookSecrets(cls, url_env, token_env)
        switches = {
            "run_started": on_start,
            "run_finished": on_finish,
            "run_failed": on_failure,
            "nan_found": on_nan,
            "hang_detected": on_hang,
            "loss_spike": on_loss_spike,
            "upload_failed": on_upload_failure,
        }
        for event, flag in switches.items():
            check_bool(cls, f"on_{_FLAG[event]}", flag)
        self.switches = switches
        minutes = check_optional_number(
            cls, "summary_interval", summary_interval, minimum=0, above=True, unit=" of minutes"
        )
        self.summary_interval = None if minutes is None else float(minutes)
        self.log_interval = (
            None
            if log_interval is None
            else LogInterval(log_interval, f"{cls} log_interval", TimeUnit.EPOCH)
        )
        if (
            isinstance(include_keys, str)
            or not isinstance(include_keys, (list, tuple))
            or not all(isinstance(k, str) for k in include_keys)
        ):
            raise TypeError(
                f"{cls} include_keys must be a list of key patterns (str), got "
                f"{include_keys!r}. To fix, pass e.g. include_keys=['loss/', 'metrics/eval/']."
            )
        self.include_keys = tuple(include_keys)
        try:  # Composer's rule: a key is shown when one pattern matches at its start
            self._include = (
                re.compile("|".join(f"(?:{k})" for k in include_keys)) if include_keys else None
            )
        except re.error as exc:
            raise ValueError(
                f"{cls} include_keys must be regular expressions, got {list(include_keys)!r} "
                f"({exc}). To fix, escape special characters, e.g. 'loss/train/total'."
            ) from None
        self.formatter_func = check_callable(cls, "formatter_func", formatter_func)
        self.max_logs_per_message = check_int(
            cls, "max_logs_per_message", max_logs_per_message, minimum=1
        )
        self.rank_zero_only = check_bool(cls, "rank_zero_only", rank_zero_only)
        self.timeout = check_seconds(cls, "timeout", timeout)
        self.max_attempts = check_int(cls, "max_attempts", max_attempts, minimum=1)
        self.retry_backoff = check_seconds(cls, "retry_backoff", retry_backoff, allow_zero=True)
        self.max_backoff = check_seconds(cls, "max_backoff", max_backoff, allow_zero=True)
        self.close_timeout = check_seconds(cls, "close_timeout", close_timeout, allow_zero=True)
        self.max_queue_size = check_int(cls, "max_queue_size", max_queue_size, minimum=1)
        #: After each close: the alerts that could not be delivered, by event.
        self.undelivered: dict[str, int] = {}
        self._delivery = self._make_delivery()
        self._state: State | None = None
        self._logger: Logger | None = None
        self._latest: dict[str, Any] = {}
        self._spike_step = -1
        self._next_summary = math.inf
        self._uploads_reported: dict[int, int] = {}
        self._skip_idle_hooks()

    def _make_delivery(self) -> AlertDelivery:
        return AlertDelivery(
            plugin_name(self),
            self._secrets.url,
            headers=self._secrets.headers(),
            secrets=self._secrets.values,
            timeout=self.timeout,
            max_attempts=self.max_attempts,
            retry_backoff=self.retry_backoff,
            max_backoff=self.max_backoff,
            max_queue_size=self.max_queue_size,
        )

    def _skip_idle_hooks(self) -> None:
        """Without a summary, ``batch_end``/``epoch_end`` are not dispatched at all."""
        every = self.log_interval
        if self.summary_interval is None and (every is None or every.batches == 0):
            self.batch_end = super().batch_end  # type: ignore[method-assign]
        if every is None or every.epochs == 0:
            self.epoch_end = super().epoch_end  # type: ignore[method-assign]

    def __getstate__(self) -> dict[str, Any]:
        # Neither the URL nor the token is pickled: they are read from the environment again.
        state = dict(self.__dict__)
        for name in ("batch_end", "epoch_end", "_delivery", "_secrets", "_state", "_logger"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._secrets = WebhookSecrets(type(self).__name__, self.url_env, self.token_env)
        self._delivery = self._make_delivery()
        self._state = self._logger = None
        self._skip_idle_hooks()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url_env={self.url_env!r}, format={self.format!r})"

    @property
    def pending(self) -> int:
        """Alerts queued or being sent now."""
        return self._delivery.pending

    @property
    def attempts(self) -> int:
        """POST requests attempted so far (retries included)."""
        return self._delivery.attempts

    # ----------------------------------------------------------------- sending
    def _active(self, event: str) -> bool:
        if not self.switches.get(event, True):
            return False
        state = self._state
        rank = 0 if state is None else state.rank
        return not self.rank_zero_only or rank == 0 or event in _EVERY_RANK

    def _send(
        self,
        event: str,
        title: str,
        text: str | Callable[[dict[str, Any]], str],
        *,
        level: str = "info",
        metrics: Mapping[str, Any] | None = None,
        file: Path | None = None,
        step: int | None = None,
    ) -> bool:
        """Queue an alert; everything costly happens in ``build``, on the writer thread."""
        state = self._state
        alert = Alert(
            event=event,
            title=title,
            text="",
            level=level,
            run_name="" if state is None else state.run_name,
            rank=0 if state is None else state.rank,
            step=step if step is not None or state is None else state.timestamp._batch,
            time=time.time(),
            metrics=dict(metrics or {}),
            file=None if file is None else str(file),
        )
        return self._delivery.send(event, lambda: self._build(alert, text))

    def _build(self, alert: Alert, text: str | Callable[[dict[str, Any]], str]) -> list[bytes]:
        return render(
            alert,
            text,
            format=self.format,
            formatter_func=self.formatter_func,
            max_logs_per_message=self.max_logs_per_message,
            secrets=self._secrets.values,
        )

    def _selected(self) -> dict[str, Any]:
        """The latest metrics that ``include_keys`` selects (all without it), still unread."""
        pattern = self._include
        if pattern is None:
            return dict(self._latest)
        return {k: v for k, v in self._latest.items() if pattern.match(k)}

    def alert(
        self,
        title: str,
        text: str,
        *,
        level: str = "error",
        file: Path | None = None,
        event: str = "hang_detected",
    ) -> bool:
        """Send an alert now, from any thread, without waiting; ``False`` if it was not queued.

        This is how a watchdog hands over a hang (the default ``event``,
        switched by ``on_hang``, sent from every rank); ``file`` is its dump,
        named in the alert with its first lines quoted (masked). Other callers
        pass their own ``event`` (a name of their choosing, always on).
        """
        if level not in LEVELS:
            raise ValueError(
                f"{type(self).__name__}.alert level must be one of {LEVELS}, got {level!r}."
            )
        if not self._active(event):
            return False
        return self._send(event, str(title), str(text), level=level, file=file)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait at most ``timeout`` s for the alerts queued so far; ``False`` if some remain.

        For a caller about to end the process (a watchdog's ``dump_and_exit``),
        so its alert goes out first. Never called on the training thread here.
        """
        return self._delivery.flush(check_seconds(type(self).__name__, "timeout", timeout))

    # ------------------------------------------------------------------- hooks
    @override
    def init(self, state: State, logger: Logger) -> None:
        self._state, self._logger = state, logger
        self._secrets.hold()  # again, after a post_close: the destination is reused

    @override
    def fit_start(self, state: State, logger: Logger) -> None:
        self._state, self._logger = state, logger
        self._latest = {}
        self._spike_step = -1
        if self.summary_interval is not None:
            self._next_summary = _now() + self.summary_interval * 60
        if self._active("run_started"):
            until = f" for {state.max_duration}" if state.max_duration is not None else ""
            self._send(
                "run_started",
                f"Run started: {state.run_name}",
                f"Training{until} on {state.world_size} rank(s), "
                f"from batch {state.timestamp._batch}.",
            )

    @override
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self._latest.update(metrics)  # held as given: read on the writer thread, if ever
        if NAN_KEY in metrics and self._active("nan_found"):
            self._send(
                "nan_found",
                "NaN found" + self._of_run(),
                lambda n: f"The loss or a gradient is NaN or Inf, first at batch {n.get(NAN_KEY)}.",
                level="error",
                metrics={NAN_KEY: metrics[NAN_KEY]},
                step=step,
            )
        if self.switches["loss_spike"] and step != self._spike_step:
            for key in metrics:  # no dict built on the usual call, which has no such key
                if key.startswith(SPIKE_PREFIX):
                    self._loss_spike(metrics, step)
                    break

    def _loss_spike(self, metrics: Mapping[str, Any], step: int | None) -> None:
        if not self._active("loss_spike"):
            return
        self._spike_step = -1 if step is None else step  # one alert a step
        self._send(
            "loss_spike",
            "Loss spike" + self._of_run(),
            f"The loss jumped and stayed up, at batch {step}.",
            level="warning",
            metrics={k: v for k, v in metrics.items() if k.startswith(SPIKE_PREFIX)},
            step=step,
        )

    def _of_run(self) -> str:
        return "" if self._state is None else f": {self._state.run_name}"

    def _summary(self, state: State) -> None:
        if self.rank_zero_only and state.rank != 0:
            return
        self._send(
            "metrics_summary",
            "Metrics" + self._of_run(),
            f"At batch {state.timestamp._batch}, epoch {state.timestamp._epoch}.",
            metrics=self._selected(),
        )

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        every = self.log_interval
        if every is not None and every.at_batch_end(state):
            self._summary(state)
        elif self.summary_interval is not None and _now() >= self._next_summary:
            self._next_summary = _now() + self.summary_interval * 60
            self._summary(state)

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        every = self.log_interval
        if every is not None and every.at_epoch_end(state):
            self._summary(state)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        if self._active("run_finished"):
            ts = state.timestamp
            self._send(
                "run_finished",
                f"Run finished: {state.run_name}",
                f"Finished at batch {ts._batch}, epoch {ts._epoch}, "
                f"after {_duration(ts.total_wct.total_seconds())}.",
                metrics=self._selected(),
            )

    @override
    def exception(self, state: State, logger: Logger) -> None:
        exc = state.exception
        if exc is None or not self._active("run_failed"):
            return
        self._send(
            "run_failed",
            f"Run failed: {state.run_name} ({type(exc).__name__})",
            lambda _: describe_error(exc),
            level="error",
            metrics=self._selected(),
        )

    @override
    def post_close(self) -> None:
        # After every plug-in closed: the stores have drained their uploads by now.
        self._alert_failed_uploads()
        tally = self._delivery.close(self.close_timeout)
        self.undelivered = {k: v for k, v in tally.undelivered.items() if v > 0}
        self._report_undelivered()
        self._secrets.release()  # the run is over: what it wrote and logged was masked

    def _report_undelivered(self) -> None:
        if self.undelivered:
            listed = ", ".join(
                f"{n} {EVENTS.get(k, (k,))[0]}" for k, n in sorted(self.undelivered.items())
            )
            log.error(
                "obsbus: %s: %d alert(s) were not delivered (%s); last error: %s. The endpoint "
                "is the URL in $%s (not shown).",
                plugin_name(self),
                sum(self.undelivered.values()),
                listed,
                self._delivery.last_error or "none recorded",
                self.url_env,
            )

    def _alert_failed_uploads(self) -> None:
        logger = self._logger
        if logger is None or not self._active("upload_failed"):
            return
        new: list[str] = []
        for dest in logger.destinations:
            try:
                failed = getattr(dest, "failed_uploads", None)
            except Exception:  # a property of someone else's destination
                continue
            if not isinstance(failed, list):
                continue
            seen = self._uploads_reported.get(id(dest), 0)
            new.extend(f"{plugin_name(dest)}: {item}" for item in failed[seen:])
            self._uploads_reported[id(dest)] = len(failed)
        if new:
            shown = "\n".join(f"- {line}" for line in new[:_MAX_LISTED])
            more = f"\n... and {len(new) - _MAX_LISTED} more" if len(new) > _MAX_LISTED else ""
            self._send(
                "upload_failed",
                "Upload failures" + self._of_run(),
                f"{len(new)} file(s) did not reach the store; their staged copies are "
                f"kept:\n{shown}{more}",
                level="error",
            )


_FLAG = {
    "run_started": "start",
    "run_finished": "finish",
    "run_failed": "failure",
    "nan_found": "nan",
    "hang_detected": "hang",
    "loss_spike": "loss_spike",
    "upload_failed": "upload_failure",
}


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
