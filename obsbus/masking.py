"""One masking function for every value that leaves the process.

Hyperparameters (for every destination), the environment snapshot the
trackers record, the command line a tracker records and error messages that
quote a URI all go through :func:`mask_secrets` (strings) or
:func:`mask_value` (nested values). What is masked, each replaced by
``***``:

- **URI credentials**: the whole user-info of ``scheme://user:password@host``
  and of ``scheme://token@host`` (a user-info with no password is often a token
  itself, as in a git remote).
- **Secret query values**: ``?sig=``, ``&X-Amz-Signature=``, ``token=``,
  ``key=``, ``secret=``, ``password=``, ``credential=``, ``sas=``.
- **Token-shaped values**, wherever they appear: the known prefixes of API keys
  (OpenAI/Anthropic ``sk-``, GitHub ``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``,
  Hugging Face ``hf_``, AWS ``AKIA``/``ASIA``, Slack ``xox?-``, GitLab ``glpat-``,
  Google ``AIza``, Stripe ``rk_live_``/``sk_live_``, JWTs ``eyJ...``) and any run
  of 32 or more letters, digits, ``_ - + =`` that mixes upper case, lower case
  and digits (random keys). Lower-case hex (git commits, hashes) and UUIDs
  survive, as do paths and run names.
- **Values of secret-named environment variables** (names containing TOKEN,
  SECRET, KEY, PASSWORD, CREDENTIAL, PASSPHRASE), wherever they appear.
- **Values named as secrets**: a hyperparameter whose key ends in ``key``,
  ``token``, ``secret``, ``password``, ``credential(s)`` or ``passphrase``
  (``api_key``, ``db.password``; not ``tokenizer``) and the value of such a
  command-line flag, ``--api-key=...`` or ``--api-key ...`` (:func:`mask_argv`).
- Patterns you add with :func:`add_secret_pattern`.

Example:
    >>> mask_secrets("postgresql://admin:PASSWORD@db.internal/runs")
    'postgresql://***@db.internal/runs'
    >>> mask_value({"db": {"url": "sqlite:///x.db"}, "key": "sk-abcdefghijklmnop1234"})
    {'db': {'url': 'sqlite:///x.db'}, 'key': '***'}
    >>> mask_argv(["train.py", "--api-key=abc123", "--lr", "0.1", "--token", "t0k3n"])
    ['train.py', '--api-key=***', '--lr', '0.1', '--token', '***']
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MASK",
    "SECRET_KEY",
    "SECRET_NAME",
    "add_secret_pattern",
    "env_secret_values",
    "mask_argv",
    "mask_secrets",
    "mask_value",
]

MASK = "***"

#: Environment variable names whose values are secrets (never recorded, masked everywhere).
SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|PASSPHRASE", re.I)
#: Hyperparameter keys and command-line flags whose values are secrets: the last word of
#: the name (``api_key``, ``db.password``, ``--hf-token``; not ``tokenizer`` or ``max_tokens``).
SECRET_KEY = re.compile(
    r"(?:^|[^A-Za-z0-9])(?:api[_-]?)?(?:key|token|secret|password|passwd|credentials?|passphrase)$",
    re.I,
)

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&][^=&\s]*(?:sig|signature|token|key|secret|password|credential|sas)"
    r"[^=&\s]*=)[^&\s#]+",
    re.I,
)
_TOKEN_PREFIXES = (
    r"sk-[A-Za-z0-9_-]{8,}",
    r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{16,}",
    r"github_pat_[A-Za-z0-9_]{16,}",
    r"hf_[A-Za-z0-9]{16,}",
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",
    r"xox[abposr]-[A-Za-z0-9-]{8,}",
    r"glpat-[A-Za-z0-9_-]{16,}",
    r"AIza[A-Za-z0-9_-]{30,}",
    r"(?:sk|rk)_live_[A-Za-z0-9]{16,}",
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+",
)
_KNOWN_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(_TOKEN_PREFIXES) + ")")
_LONG_RUN = re.compile(r"[A-Za-z0-9_\-+=]{32,}")
_MIN_ENV_SECRET = 6  # shorter values are too common to replace wherever they appear

_user_patterns: list[re.Pattern[str]] = []


def add_secret_pattern(pattern: str | re.Pattern[str]) -> None:
    """Mask every match of ``pattern`` too, from now on, everywhere obsbus masks.

    Example:
        >>> add_secret_pattern(r"corp-[0-9]{6}")
        >>> mask_secrets("id corp-123456")
        'id ***'
        >>> _user_patterns.clear()
    """
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    if not isinstance(compiled, re.Pattern):
        raise TypeError(f"add_secret_pattern takes a regex str or re.Pattern, got {pattern!r}.")
    _user_patterns.append(compiled)


def _random_looking(run: str) -> bool:
    return (
        any(c.isupper() for c in run)
        and any(c.islower() for c in run)
        and any(c.isdigit() for c in run)
    )


def env_secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the environment variables whose names look secret, longest first."""
    env = os.environ if environ is None else environ
    found = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= _MIN_ENV_SECRET}
    return sorted(found, key=len, reverse=True)


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret described in the module docstring, and each of
    ``secrets``, replaced by ``***``."""
    for secret in sorted({s for s in (*secrets, *env_secret_values()) if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: m["scheme"] + MASK + "@", text)
    text = _QUERY_SECRET.sub(lambda m: m["head"] + MASK, text)
    text = _KNOWN_TOKEN.sub(MASK, text)
    text = _LONG_RUN.sub(lambda m: MASK if _random_looking(m[0]) else m[0], text)
    for pattern in _user_patterns:
        text = pattern.sub(MASK, text)
    return text


def mask_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` with every string in it masked (mappings, lists and tuples are walked);
    the value of a key whose name looks secret (``api_key``, ``password``) is masked whole."""
    secrets = list(secrets)
    if isinstance(value, str):
        return mask_secrets(value, secrets)
    if isinstance(value, Mapping):
        return {
            k: MASK
            if isinstance(k, str) and SECRET_KEY.search(k) and isinstance(v, str) and v
            else mask_value(v, secrets)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(mask_value(v, secrets) for v in value)
    return value


def mask_argv(argv: Iterable[str]) -> list[str]:
    """A command line with secrets masked, and the value of every secret-named flag."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _ = arg.partition("=")
        if flag.startswith("-") and SECRET_KEY.search(flag):
            if eq:
                out.append(f"{flag}={MASK}")
                continue
            hide_next = True
        out.append(mask_secrets(arg))
    return out
