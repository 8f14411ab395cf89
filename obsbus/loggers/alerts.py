"""Alerts to Slack and to any webhook: the run started, finished, failed, or is in trouble.

:class:`SlackLogger` posts Block Kit messages to a Slack incoming webhook;
:class:`WebhookLogger` posts JSON (or Slack-shaped) alerts to any URL. Both
are :class:`AlertDestination` s: the events, switches, rank rule, delivery
and secrecy are described there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Unpack

from obsbus.loggers._alert_destination import AlertDestination
from obsbus.loggers._alert_secrets import refuse_secret_argument
from obsbus.loggers._shared_options import AlertOptions, shares_options
from obsbus.time import TimeLike

__all__ = ["AlertDestination", "SlackLogger", "WebhookLogger"]


class SlackLogger(AlertDestination):
    """Alerts to a Slack channel through an incoming webhook, in Block Kit messages.

    Composer's ``SlackLogger`` arguments are taken where they mean the same:
    ``include_keys`` (regular expressions, matched at the start of a key:
    the metrics the finish alert and the summaries show; all without any),
    ``formatter_func`` (``formatter_func(data, header=title)`` returns the
    metric blocks), ``log_interval`` (a metrics summary every ``"100ba"`` or
    ``"1ep"``; a bare int counts epochs; off by default here: Composer posts
    every batch) and ``max_logs_per_message`` (metrics per message, at most
    47 next to the header, text and context blocks; the rest go in further
    messages). Composer posts with a bot token and a channel id; obsbus
    posts to an incoming webhook, bound to its channel, whose URL is read
    from ``$SLACK_WEBHOOK_URL`` (``webhook_url_env``): ``slack_logging_api_key``,
    ``channel_id`` and ``webhook_url`` are refused, the value never shown.

    Args:
        webhook_url_env: the environment variable holding the webhook's URL.
        on_start, on_finish, on_failure, on_nan, on_hang, on_loss_spike,
            on_upload_failure: switch each alert (see :class:`AlertDestination`).
        summary_interval: minutes between metrics summaries; ``None``: none.
        rank_zero_only: alert from rank 0 only (failures and hangs: every rank).
        timeout: seconds one request may take.
        max_attempts, retry_backoff, max_backoff: retries of a transient error:
            the first after ``retry_backoff`` s, doubling, each wait at most
            ``max_backoff`` s.
        close_timeout: seconds close waits for the alerts still queued.
        max_queue_size: alerts that may wait; more are dropped and counted.

    Example:
        >>> import os
        >>> os.environ["SLACK_WEBHOOK_URL"] = "https://hooks.slack.com/services/T01/B01/abc"
        >>> slack = SlackLogger(include_keys=["loss/"], on_start=False)
        >>> slack
        SlackLogger(url_env='SLACK_WEBHOOK_URL', format='slack')
        >>> slack.post_close()  # the end of a run (the engine calls it)
        >>> SlackLogger(slack_logging_api_key="xoxb-1234")
        Traceback (most recent call last):
        ...
        ValueError: SlackLogger does not take slack_logging_api_key: a URL or token passed ...
        >>> del os.environ["SLACK_WEBHOOK_URL"]
    """

    @shares_options(AlertDestination.__init__, AlertOptions)
    def __init__(
        self,
        include_keys: Sequence[str] = (),
        formatter_func: Callable[..., list[dict[str, Any]]] | None = None,
        log_interval: TimeLike | None = None,
        max_logs_per_message: int = 50,
        slack_logging_api_key: str | None = None,
        channel_id: str | None = None,
        *,
        webhook_url_env: str = "SLACK_WEBHOOK_URL",
        webhook_url: str | None = None,
        **options: Unpack[AlertOptions],
    ) -> None:
        for name, value in (
            ("slack_logging_api_key", slack_logging_api_key),
            ("webhook_url", webhook_url),
        ):
            refuse_secret_argument("SlackLogger", name, value, "webhook_url_env")
        if channel_id is not None:
            raise ValueError(
                "SlackLogger does not take channel_id: it posts to an incoming webhook, which "
                "is bound to one channel. To fix, create the webhook for that channel and "
                "export its URL as SLACK_WEBHOOK_URL (or the variable webhook_url_env names)."
            )
        super().__init__(
            webhook_url_env,
            format="slack",
            include_keys=include_keys,
            formatter_func=formatter_func,
            log_interval=log_interval,
            max_logs_per_message=max_logs_per_message,
            **options,
        )


class WebhookLogger(AlertDestination):
    """Alerts as JSON (or Slack-shaped) POSTs to any webhook: a pager, a chat bot, your service.

    ``format="json"`` posts one object per alert (the schema in
    :mod:`obsbus.loggers._alert_payloads`): ``event``, ``run_name``, ``rank``,
    ``level``, ``title``, ``text``, ``step``, ``metrics``, ``file``, ``time``.
    ``format="slack"`` posts Slack's Block Kit messages (for Slack-compatible
    receivers such as Mattermost). The URL is read from ``$url_env``; a token,
    when the receiver wants one, from ``$token_env``, sent as ``Authorization:
    Bearer``. ``url`` and ``token`` are refused, their values never shown.

    Args:
        url_env: the environment variable holding the URL.
        format: ``"json"`` or ``"slack"``.
        token_env: the environment variable holding a bearer token, or ``None``.
        include_keys, log_interval, max_logs_per_message, formatter_func: as
            :class:`SlackLogger` (the last two shape Slack messages only).
        on_start, ..., max_queue_size: as :class:`SlackLogger`.

    Example:
        >>> import os
        >>> os.environ["ALERT_URL"] = "https://alerts.example.com/hook"
        >>> hook = WebhookLogger("ALERT_URL", on_start=False)
        >>> hook
        WebhookLogger(url_env='ALERT_URL', format='json')
        >>> hook.post_close()  # the end of a run (the engine calls it)
        >>> WebhookLogger("https://alerts.example.com/hook")
        Traceback (most recent call last):
        ...
        ValueError: WebhookLogger url_env must be the name of an environment variable ...
        >>> del os.environ["ALERT_URL"]
    """

    @shares_options(AlertDestination.__init__, AlertOptions)
    def __init__(
        self,
        url_env: str = "OBSBUS_WEBHOOK_URL",
        format: str = "json",
        *,
        token_env: str | None = None,
        url: str | None = None,
        token: str | None = None,
        log_interval: TimeLike | None = None,
        include_keys: Sequence[str] = (),
        formatter_func: Callable[..., list[dict[str, Any]]] | None = None,
        max_logs_per_message: int = 50,
        **options: Unpack[AlertOptions],
    ) -> None:
        refuse_secret_argument("WebhookLogger", "url", url, "url_env")
        refuse_secret_argument("WebhookLogger", "token", token, "token_env")
        super().__init__(
            url_env,
            format=format,
            token_env=token_env,
            include_keys=include_keys,
            formatter_func=formatter_func,
            log_interval=log_interval,
            max_logs_per_message=max_logs_per_message,
            **options,
        )
