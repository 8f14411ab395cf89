"""What an alert says, and its two wire shapes: Slack Block Kit and plain JSON.

Built on the alert destinations' writer thread, never on the training thread.

JSON (``WebhookLogger(format="json")``), one object per alert::

    {"event": "run_finished", "run_name": "r", "rank": 0, "level": "info",
     "title": "Run finished", "text": "...", "step": 100,
     "metrics": {"loss/train/total": 0.25}, "file": null,
     "time": "2026-01-01T00:00:00+00:00"}

Slack (``SlackLogger``, ``WebhookLogger(format="slack")``): ``{"text": fallback,
"blocks": [header, section (the text), one section per metric, context]}``;
past ``max_logs_per_message`` metrics the rest go in further messages.
"""

from __future__ import annotations

import datetime
import json
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from obsbus.loggers.console_logger import format_value
from obsbus.masking import mask_value
from obsbus.values import to_host

__all__ = [
    "EVENTS",
    "LEVELS",
    "Alert",
    "describe_error",
    "json_message",
    "render",
    "slack_messages",
]

#: Every alert event: its label in reports and the emoji of its Slack header.
EVENTS: dict[str, tuple[str, str]] = {
    "run_started": ("run started", ":rocket:"),
    "run_finished": ("run finished", ":white_check_mark:"),
    "run_failed": ("run failed", ":x:"),
    "nan_found": ("NaN found", ":warning:"),
    "hang_detected": ("hang detected", ":hourglass:"),
    "loss_spike": ("loss spike", ":chart_with_upwards_trend:"),
    "upload_failed": ("upload failures", ":outbox_tray:"),
    "metrics_summary": ("metrics summary", ":bar_chart:"),
}
LEVELS = ("info", "warning", "error")
_HEADER_CHARS = 150  # Slack's limit for a header's text
_SECTION_CHARS = 3000  # and for a section's
_MAX_BLOCKS = 50  # blocks in one message
_FRAME = 3  # the header, text and context blocks around the metrics
_FILE_EXCERPT = 1500  # characters of a hang dump quoted in its alert
_TRACEBACK = 1500  # characters of a traceback quoted in a failure alert


@dataclass(frozen=True)
class Alert:
    """One alert, as the training thread hands it over (``metrics`` may hold tensors)."""

    event: str
    title: str
    text: str
    level: str
    run_name: str
    rank: int
    step: int | None
    time: float  # seconds since the epoch
    metrics: Mapping[str, Any] = field(default_factory=dict)
    file: str | None = None

    def iso_time(self) -> str:
        return datetime.datetime.fromtimestamp(self.time, datetime.UTC).isoformat(
            timespec="seconds"
        )


def json_message(alert: Alert, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object of ``alert`` (``metrics`` already numbers); the schema above."""
    return {
        "event": alert.event,
        "run_name": alert.run_name,
        "rank": alert.rank,
        "level": alert.level,
        "title": alert.title,
        "text": alert.text,
        "step": alert.step,
        "metrics": {k: _json_number(v) for k, v in metrics.items()},
        "file": alert.file,
        "time": alert.iso_time(),
    }


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"  # JSON has no NaN; a receiver's parser would reject the whole alert
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value


def _escape(text: str) -> str:
    """Slack mrkdwn treats ``& < >`` as markup (links, mentions): escape them."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_messages(
    alert: Alert,
    metrics: Mapping[str, Any],
    *,
    formatter_func: Callable[..., list[dict[str, Any]]] | None = None,
    max_logs_per_message: int = 50,
) -> list[dict[str, Any]]:
    """The Slack message(s) of ``alert``: one, or more when the metrics don't fit in one.

    ``formatter_func(data, header=title)`` makes the metric blocks when given
    (Composer's ``SlackLogger`` argument); else one ``*key:* value`` section
    per metric, as Composer's default formatter.
    """
    emoji = EVENTS.get(alert.event, ("alert", _LEVEL_EMOJI.get(alert.level, ":bell:")))[1]
    per_message = max(1, min(max_logs_per_message, _MAX_BLOCKS - _FRAME))
    items = list(metrics.items())
    chunks = [items[i : i + per_message] for i in range(0, len(items), per_message)] or [[]]
    where = f"run *{_escape(alert.run_name)}* · rank {alert.rank}"
    if alert.step is not None:
        where += f" · batch {alert.step}"
    context = {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": f"{where} · {alert.iso_time()}"}],
    }
    messages = []
    for n, chunk in enumerate(chunks, 1):
        title = alert.title if len(chunks) == 1 else f"{alert.title} ({n}/{len(chunks)})"
        blocks: list[dict[str, Any]] = [
            {
                "type": "header",
                "text": {
                    "type": "plain_text",
                    "text": _cut(f"{emoji} {title}", _HEADER_CHARS),
                    "emoji": True,
                },
            }
        ]
        if alert.text and n == 1:
            text = _cut(_escape(alert.text), _SECTION_CHARS)
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
        if chunk:
            data = dict(chunk)
            if formatter_func is not None:
                blocks.extend(formatter_func(data, header=title))
            else:
                blocks.extend(_metric_blocks(data))
        blocks.append(context)
        fallback = f"{title} ({alert.run_name}, rank {alert.rank})"
        messages.append({"text": fallback, "blocks": blocks[:_MAX_BLOCKS]})
    return messages


_LEVEL_EMOJI = {"info": ":information_source:", "warning": ":warning:", "error": ":rotating_light:"}


def _metric_blocks(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": _cut(f"*{_escape(k)}:* {_escape(format_value(v))}", _SECTION_CHARS),
            },
        }
        for k, v in data.items()
    ]


def encode(message: Mapping[str, Any]) -> bytes:
    """One request body: compact UTF-8 JSON (non-finite numbers are strings already)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def render(
    alert: Alert,
    text: str | Callable[[dict[str, Any]], str],
    *,
    format: str,
    formatter_func: Callable[..., list[dict[str, Any]]] | None,
    max_logs_per_message: int,
    secrets: tuple[str, ...],
) -> list[bytes]:
    """The request bodies of ``alert``, masked; on the writer thread only.

    Its metrics are read here (one transfer); ``text`` may be a function of
    them; a dump ``file`` is quoted from its start.
    """
    try:
        numbers = to_host(alert.metrics)
    except Exception:  # an odd value: shown as text rather than losing the alert
        numbers = {k: str(v) for k, v in alert.metrics.items()}
    body = text(numbers) if callable(text) else text
    if alert.file is not None:
        body = f"{body}\nDump: {alert.file}{_excerpt(alert.file)}"
    done = Alert(**{**alert.__dict__, "text": body, "metrics": {}})
    if format == "json":
        messages = [json_message(done, numbers)]
    else:
        messages = slack_messages(
            done, numbers, formatter_func=formatter_func, max_logs_per_message=max_logs_per_message
        )
    return [encode(mask_value(message, secrets)) for message in messages]


def describe_error(exc: BaseException) -> str:
    """The error and the end of its traceback, for a failure alert (masked by :func:`render`)."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return f"{type(exc).__name__}: {exc}\n```{''.join(lines)[-_TRACEBACK:]}```"


def _excerpt(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(_FILE_EXCERPT + 1)
    except OSError:
        return ""
    cut = head[:_FILE_EXCERPT] + ("\n..." if len(head) > _FILE_EXCERPT else "")
    return f"\n```{cut}```"
