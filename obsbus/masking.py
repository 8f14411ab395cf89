"""One masking function for every value that leaves the process.

Hyperparameters (for every destination), the environment the trackers
record, the command line a tracker records, git remotes, error messages
that quote a URI and the warnings and errors of :func:`obsbus.log.setup_logging`'s
sinks all go through :func:`mask_secrets` (text) or :func:`mask_value`
(nested values). Each secret becomes ``***``:

- **URI credentials**: the user-info of ``scheme://user:password@host``, whole
  (a user name next to a password is often a key id). A user alone stays
  (``sftp://ada@host``) unless it looks like a token (``https://<token>@github.com``).
- **Secret query values**: ``?sig=``, ``&X-Amz-Signature=``, ``X-Amz-Credential=``,
  and any query name holding ``token``, ``key``, ``secret``, ``passw``, ``pwd``,
  ``credential`` or ``sas``.
- **Known token shapes**, wherever they appear: OpenAI/Anthropic ``sk-``, Stripe
  ``sk_live_``, GitHub ``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``, Hugging Face
  ``hf_``, AWS key ids ``AKIA``/``ASIA``/..., Slack ``xox?-``, GitLab ``glpat-``,
  Google ``AIza``/``ya29.``, npm, PyPI, JWTs and base64 JSON (``eyJ...``), the
  token after ``Bearer``, and PEM private keys.
- **Webhook URLs**, wherever they appear (whoever has one can post with it): the
  path of ``hooks.slack.com/...`` (Slack, Zapier) and ``<tenant>.webhook.office.com/...``
  (Teams), what follows ``/webhook/``, ``/webhooks/`` or ``/webhookb2/`` in any
  ``http(s)`` URL (Discord's ``/api/webhooks/<id>/<token>``), and what follows
  ``/hooks/`` before an id of 16+ letters and digits (Mattermost).
- **Random-looking strings**: a run of 28 or more letters and digits (with
  ``_ - +``; ``/`` and ``.`` end a run) that mixes upper case, lower case and
  digits and changes between them at 45% or more of its neighbours, as
  generated keys do (:func:`obsbus._secret_shapes.looks_random`). Hex (git
  commits, digests, MLflow and Comet ids), UUIDs, paths, dotted names and run
  names such as ``gpt2-125M-lr3e-4-bs512`` survive. Shorter random keys, and
  keys of one case, are not recognised by their shape: the rules below or
  :func:`add_secret_pattern` catch them.
- **Values of secret-named environment variables** (names containing TOKEN,
  SECRET, KEY, PASSWORD, PASSWD, CREDENTIAL, PASSPHRASE or WEBHOOK) of 6 characters or
  more, wherever they appear. The environment snapshot drops those variables.
- **Values named as secrets**: the string value of a hyperparameter (or of an
  object's field), and the value in ``name=value``, ``name='value'`` (an object's
  repr), ``--name value`` and ``'name': 'value'`` text, whose name ends in
  ``password``, ``passwd``, ``passphrase``, ``secret``, ``credential(s)``, or in
  ``key``/``token`` after a word such as ``api``, ``access``, ``auth``, ``hf``,
  ``wandb`` (``api_key``, ``db.password``, ``--hf-token``, ``apiKey``), or is
  ``token`` alone. ``pad_token``, ``sort_key``, ``max_tokens`` and ``tokenizer``
  are not secret names.
- Every pattern you add with :func:`add_secret_pattern`.

Objects in a value (a dataclass, an ``argparse.Namespace``, a pydantic model, an
OmegaConf config...) are walked field by field, as dicts are (:func:`mask_value`).
Masking runs where values leave the process, never in the training step.

Example:
    >>> mask_secrets("postgresql://admin:PASSWORD@db.internal/runs")
    'postgresql://***@db.internal/runs'
    >>> mask_secrets("export OPENAI_BASE=sk-proj-AbCd1234EfGh5678 --password hunter2")
    'export OPENAI_BASE=*** --password ***'
    >>> mask_value({"db": {"url": "sqlite:///x.db", "password": "pw"}, "pad_token": "<pad>"})
    {'db': {'url': 'sqlite:///x.db', 'password': '***'}, 'pad_token': '<pad>'}
    >>> mask_argv(["train.py", "--api-key=abc123", "--lr", "0.1", "--token", "t0k3n"])
    ['train.py', '--api-key=***', '--lr', '0.1', '--token', '***']
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from obsbus import _secret_shapes as shapes
from obsbus._mask_errors import mask_error, masks_errors
from obsbus._mask_walk import walk

__all__ = [
    "MASK",
    "SECRET_NAME",
    "add_secret_pattern",
    "env_secret_values",
    "is_secret_name",
    "mask_argv",
    "mask_error",
    "mask_secrets",
    "mask_value",
    "masked_sys_argv",
    "masks_errors",
    "remove_secret_pattern",
    "secret_patterns",
]

MASK = shapes.MASK
#: Environment variable names whose values are secrets (never recorded, masked everywhere).
SECRET_NAME = shapes.SECRET_ENV_NAME
is_secret_name = shapes.is_secret_name
_MIN_ENV_SECRET = 6  # shorter values are too common to replace wherever they appear

# Replaced whole, never changed in place: the writer threads read it while a user adds one.
_user_patterns: tuple[re.Pattern[str], ...] = ()


def add_secret_pattern(pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    """Mask every match of ``pattern`` too, from now on, everywhere obsbus masks.

    With a group named ``secret``, only that group is masked. Returns the
    compiled pattern, for :func:`remove_secret_pattern`.

    Raises:
        TypeError: ``pattern`` is neither a str nor a compiled ``re.Pattern`` of str.
        ValueError: not a valid regular expression, or it matches the empty string.

    Example:
        >>> corp = add_secret_pattern(r"corp-[0-9]{6}")
        >>> ticket = add_secret_pattern(r"ticket=(?P<secret>\\w+)")
        >>> mask_secrets("badge corp-123456, ticket=T42")
        'badge ***, ticket=***'
        >>> remove_secret_pattern(corp); remove_secret_pattern(ticket)
    """
    global _user_patterns
    if isinstance(pattern, re.Pattern) and isinstance(pattern.pattern, str):
        compiled = pattern
    elif isinstance(pattern, str):
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(
                f"add_secret_pattern: {pattern!r} is not a valid regular expression ({exc}). "
                "To fix, pass a Python re pattern, e.g. r'corp-[0-9]{6}'."
            ) from None
    else:
        raise TypeError(
            "add_secret_pattern takes a regex str or a compiled re.Pattern of str, "
            f"got {pattern!r}."
        )
    if compiled.search("") is not None:
        raise ValueError(
            f"add_secret_pattern: {compiled.pattern!r} matches the empty string, so it would "
            "mask between every character. To fix, make it match at least one character."
        )
    _user_patterns = (*_user_patterns, compiled)
    return compiled


def remove_secret_pattern(pattern: str | re.Pattern[str]) -> None:
    """Stop masking ``pattern`` (the str or the pattern :func:`add_secret_pattern` returned)."""
    global _user_patterns
    text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    _user_patterns = tuple(p for p in _user_patterns if p is not pattern and p.pattern != text)


def secret_patterns() -> tuple[re.Pattern[str], ...]:
    """The patterns added with :func:`add_secret_pattern`, oldest first."""
    return _user_patterns


def env_secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the environment variables whose names look secret, longest first."""
    env = os.environ if environ is None else environ
    found = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= _MIN_ENV_SECRET}
    return sorted(found, key=len, reverse=True)


def _exact(secrets: Iterable[str]) -> list[str]:
    given = {s for s in secrets if isinstance(s, str) and s}
    return sorted(given.union(env_secret_values()), key=len, reverse=True)


def _user_sub(pattern: re.Pattern[str], text: str) -> str:
    if "secret" not in pattern.groupindex:
        return pattern.sub(MASK, text)

    def sub(m: re.Match[str]) -> str:
        if m["secret"] is None:
            return m[0]
        start, end = m.start("secret") - m.start(), m.end("secret") - m.start()
        return m[0][:start] + MASK + m[0][end:]

    return pattern.sub(sub, text)


def _named_value(m: re.Match[str]) -> str:
    if m["value"] == MASK or not is_secret_name(m["name"]):
        return m[0]
    start, end = m.start("value") - m.start(), m.end("value") - m.start()
    return m[0][:start] + MASK + m[0][end:]


def _mask(text: str, exact: list[str]) -> str:
    for secret in exact:
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern in _user_patterns:
        text = _user_sub(pattern, text)
    if "-----BEGIN" in text:
        text = shapes.PRIVATE_KEY.sub(MASK, text)
    if "://" in text:
        text = shapes.URI_USERINFO.sub(shapes.masked_userinfo, text)
    if shapes.has_hook(text):
        for webhook in shapes.WEBHOOK_URLS:
            text = webhook.sub(lambda m: m["head"] + MASK, text)
    if "=" in text:
        text = shapes.QUERY_SECRET.sub(lambda m: m["head"] + MASK, text)
        text = shapes.TEXT_PAIR.sub(_named_value, text)
        text = shapes.QUOTED_KWARG.sub(_named_value, text)
    if "-" in text:
        text = shapes.FLAG_PAIR.sub(_named_value, text)
    if ":" in text:
        text = shapes.QUOTED_PAIR.sub(_named_value, text)
    text = shapes.KNOWN_TOKEN.sub(MASK, text)
    return shapes.RANDOM_RUN.sub(lambda m: MASK if shapes.looks_random(m[0]) else m[0], text)


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret the module docstring lists, and each of ``secrets``, masked.

    Raises:
        TypeError: ``text`` is not a str (use :func:`mask_value` for other values).
    """
    if not isinstance(text, str):
        raise TypeError(
            f"mask_secrets takes a str, got a {type(text).__name__}. "
            "To fix, use mask_value for other values."
        )
    return _mask(text, _exact(secrets))


def mask_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` with every string in it masked, and each of ``secrets``.

    Mappings (to ``dict``), lists, tuples and sets are walked, and so are
    objects that hold settings: a dataclass, an attrs class, a pydantic v2 or
    v1 model, an ``argparse.Namespace``, a ``types.SimpleNamespace``, an
    OmegaConf ``DictConfig``/``ListConfig``, and any object whose class keeps
    ``object``'s ``repr`` (its public attributes, from ``__dict__`` and
    ``__slots__``). **Such an object becomes a ``dict`` of its fields**, walked
    as a dict is, so every destination gets the dict, and trackers flatten it
    like one (``{"cfg": TrainConfig(lr=0.1)}`` is logged as ``cfg/lr``). Its
    fields are read, never its ``repr``.

    The str value of a key named as a secret (:func:`is_secret_name`) is masked
    whole, and so is every str in a list or tuple under one, and any other
    object under one (numbers, booleans and ``None`` stay). A path with a
    secret in it becomes its masked ``str``. Other objects (tensors, dates,
    enums, a ``Timestamp``, objects with a ``repr`` of their own) are passed as
    they are, unless their ``str`` or ``repr`` shows a secret: then they become
    that ``str``, masked. A tensor or an array is never read or printed here. A
    cycle becomes ``"<cycle>"``, and anything nested more than 32 deep
    ``"<... nested too deep>"``. The caller's values are never changed.

    Example:
        >>> mask_value({"clients": [{"openai": "sk-AbCdEfGh0123456789xyz"}], "lr": 0.1})
        {'clients': [{'openai': '***'}], 'lr': 0.1}
        >>> import argparse
        >>> mask_value({"args": argparse.Namespace(lr=0.1, hf_token="abc", db=None)})
        {'args': {'lr': 0.1, 'hf_token': '***', 'db': None}}
    """
    exact = _exact(secrets)
    return walk(value, lambda text: _mask(text, exact))


def mask_argv(argv: Iterable[str]) -> list[str]:
    """A command line with secrets masked, and the value of every secret-named flag
    (``--api-key=...``, ``--api-key ...``)."""
    exact = _exact(())
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        hide_next = flag.startswith("-") and not eq and is_secret_name(flag)
        out.append(f"{flag}={MASK}" if eq and flag.startswith("-") and is_secret_name(flag)
                   else _mask(arg, exact))  # fmt: skip
    return out


@contextmanager
def masked_sys_argv() -> Iterator[None]:
    """``sys.argv`` masked (:func:`mask_argv`) for the duration, for a tracker that records it.

    W&B reads ``sys.argv`` into its run metadata in ``wandb.init``, and Comet into
    its environment details when the experiment starts; neither takes the command
    line as an argument. ``sys.argv`` is swapped only when masking changes it, and
    put back only if nobody replaced it meanwhile.
    """
    original = sys.argv
    masked = mask_argv(original)
    if masked == original:
        yield
        return
    sys.argv = masked
    try:
        yield
    finally:
        if sys.argv is masked:
            sys.argv = original
