"""The webhook URL and token of an alert destination: read from the environment, kept secret.

They are read once, when the destination is built, from the variables it
names; a value passed in code would end up in configs, ``plugins.json`` and
shell history, so no argument takes one. Each secret part (the URL, its
token-like path segments and query values, the token) is registered with
:func:`obsbus.masking.add_secret_pattern`, so every place obsbus masks
(log lines, errors, ``env.json``, hyperparameters) hides it too. Known
webhook shapes (Slack's, Discord's, Teams', ``.../webhook/<token>``) are
masked everywhere anyway, and a variable named ``*WEBHOOK*`` is dropped from
the environment snapshot; the registration covers a URL of any other shape
under any other name (``ALERT_URL=https://alerts.example.com/p/<token>``).
The pattern is held while a destination uses it: from construction
(``config/env.json`` is written before ``init``) to its ``post_close``, and
again from its next ``init``; destinations with the same URL share one
registration.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.parse

from obsbus.masking import add_secret_pattern, remove_secret_pattern

__all__ = ["WebhookSecrets", "check_env_name", "refuse_secret_argument"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MIN_PART = 8  # shorter URL parts are too common to mask wherever they appear
_holders: dict[str, int] = {}  # pattern -> how many destinations hold it
_holders_lock = threading.Lock()


def check_env_name(owner: str, name: str, value: object) -> str:
    """``value`` if it can name an environment variable; the error never shows a str."""
    if not isinstance(value, str):  # not a str, so not a pasted URL or token
        raise TypeError(
            f"{owner} {name} must be the name of an environment variable (a str), "
            f"got {value!r}. To fix, pass e.g. {name}='SLACK_WEBHOOK_URL'."
        )
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{owner} {name} must be the name of an environment variable (letters, digits "
            f"and _), not its value; got a str of {len(value)} characters (not shown: it may "
            f"be a secret). To fix, export the value, e.g. SLACK_WEBHOOK_URL=..., and pass "
            f"{name}='SLACK_WEBHOOK_URL'."
        )
    return value


def refuse_secret_argument(owner: str, name: str, value: object, env_arg: str) -> None:
    """Raise if ``value`` (an argument that would carry a URL or token) was given."""
    if value is not None:
        raise ValueError(
            f"{owner} does not take {name}: a URL or token passed in code ends up in configs, "
            f"plugins.json and logs (the value is not shown). To fix, export it in an "
            f"environment variable and pass its name as {env_arg}=..."
        )


class WebhookSecrets:
    """The URL (from ``url_env``) and the optional token (from ``token_env``).

    Raises:
        ValueError: a variable is unset or empty, or the URL is not ``http(s)://host/...``.
    """

    __slots__ = ("_held", "pattern", "token", "url", "values")

    def __init__(self, owner: str, url_env: str, token_env: str | None) -> None:
        check_env_name(owner, "url_env" if owner != "SlackLogger" else "webhook_url_env", url_env)
        if token_env is not None:
            check_env_name(owner, "token_env", token_env)
        url = os.environ.get(url_env, "").strip()
        if not url:
            raise ValueError(
                f"{owner}: the environment variable {url_env} is not set. To fix, export "
                f"{url_env}=<the webhook URL> (an incoming webhook's URL for Slack) before "
                "the run starts."
            )
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{owner}: the value of {url_env} is not an http(s) URL with a host (the value "
                "is not shown). To fix, set it to the webhook's URL, https://..."
            )
        token = None
        if token_env is not None:
            token = os.environ.get(token_env, "").strip() or None
            if token is None:
                raise ValueError(
                    f"{owner}: the environment variable {token_env} (token_env) is not set. "
                    f"To fix, export {token_env}=<the token>, or pass token_env=None."
                )
        self.url = url
        self.token = token
        self.values = _secret_parts(url, parts, token)
        # One pattern, longest first: at the URL's start the whole URL matches, not a part.
        self.pattern = "|".join(re.escape(v) for v in self.values)
        self._held = False
        self.hold()

    def hold(self) -> None:
        """Mask these secrets everywhere obsbus masks (until :meth:`release`)."""
        with _holders_lock:
            if self._held:
                return
            self._held = True
            if _holders.get(self.pattern, 0) == 0:
                add_secret_pattern(self.pattern)
            _holders[self.pattern] = _holders.get(self.pattern, 0) + 1

    def release(self) -> None:
        """Stop masking them, unless another destination still holds the same ones."""
        with _holders_lock:
            if not self._held:
                return
            self._held = False
            left = _holders.get(self.pattern, 1) - 1
            if left > 0:
                _holders[self.pattern] = left
            else:
                _holders.pop(self.pattern, None)
                remove_secret_pattern(self.pattern)

    def headers(self) -> dict[str, str]:
        """The request headers the token goes in (none without one)."""
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}


def _secret_parts(url: str, parts: urllib.parse.SplitResult, token: str | None) -> tuple[str, ...]:
    found = {url, url.rstrip("/")}
    if token is not None:
        found.add(token)
    if parts.password:
        found.add(parts.password)
    for segment in parts.path.split("/"):
        segment = urllib.parse.unquote(segment)
        # Slack's /services/T.../B.../<token>: the ids and the token; not words like "services"
        if len(segment) >= _MIN_PART and not (segment.isalpha() and segment.islower()):
            found.add(segment)
    for _, value in urllib.parse.parse_qsl(parts.query):
        if len(value) >= 6:
            found.add(value)
    return tuple(sorted(found, key=len, reverse=True))
