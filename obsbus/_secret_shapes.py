"""What a secret looks like: the rules :mod:`obsbus.masking` applies. Not API.

Each rule is a compiled pattern and, where a pattern can't decide alone, a
predicate on what it matched. The module imports only :mod:`re`, so
``import obsbus`` stays light.
"""

from __future__ import annotations

import itertools
import re

__all__ = [
    "FLAG_PAIR",
    "KNOWN_TOKEN",
    "MASK",
    "PRIVATE_KEY",
    "QUERY_SECRET",
    "QUOTED_KWARG",
    "QUOTED_PAIR",
    "RANDOM_RUN",
    "SECRET_ENV_NAME",
    "TEXT_PAIR",
    "URI_USERINFO",
    "WEBHOOK_URLS",
    "has_hook",
    "is_secret_name",
    "looks_random",
    "masked_userinfo",
]

MASK = "***"

#: Environment variable names whose values are secrets (DESIGN principle 7), as a substring.
SECRET_ENV_NAME = re.compile(
    r"TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|PASSPHRASE|WEBHOOK", re.I
)

#: ``scheme://user:password@`` or ``scheme://user@``; the password may hold an unescaped ``@``.
URI_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*)(?P<password>:[^/\s]*)?@"
)
QUERY_SECRET = re.compile(
    r"(?P<head>[?&;][^=&;\s#]*(?:sig|signature|token|key|secret|passw|pwd|credential|sas)"
    r"[^=&;\s#]*=)[^&;\s#]+",
    re.I,
)
# Known API-key shapes. Each needs enough characters after its prefix that words like
# "sk-learn" or "hf_hub" survive, and no letter or digit just before it ("disk-", "task-").
_TOKEN_PREFIXES = (
    r"sk-[A-Za-z0-9_-]{16,}",  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
    r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
    r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"(?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA)[A-Z0-9]{16}",  # AWS key ids
    r"xox[abposr]-[A-Za-z0-9-]{8,}",  # Slack
    r"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_-]{16,}",  # GitLab
    r"AIza[A-Za-z0-9_-]{30,}",  # Google API keys
    r"ya29\.[A-Za-z0-9_-]{20,}",  # Google OAuth access tokens
    r"npm_[A-Za-z0-9]{30,}",
    r"pypi-[A-Za-z0-9_-]{40,}",
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",  # JWTs
    r"eyJ[A-Za-z0-9+/_-]{30,}={0,2}",  # base64 JSON (Neptune's API tokens)
    r"(?<=[Bb]earer )[A-Za-z0-9._~+/-]{16,}=*",  # an Authorization header
)
KNOWN_TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(_TOKEN_PREFIXES) + ")")
#: Webhook URLs, whose path is a bearer secret (whoever has it can post): each pattern's
#: ``head`` is kept and the rest of the path masked, up to ``?``, ``#``, a quote or a space.
#: Hosts that serve only webhooks lose the whole path, with or without a scheme:
#: ``hooks.slack.com`` (and ``hooks.zapier.com``), Teams' ``<tenant>.webhook.office.com``.
#: Elsewhere, what follows a ``/webhook/``, ``/webhooks/`` or ``/webhookb2/`` segment
#: (Discord's ``/api/webhooks/<id>/<token>``, Teams connectors, n8n, most services), and
#: what follows ``/hooks/`` when the next segment is an id of 16+ letters and digits
#: (Mattermost's ``/hooks/<26 characters>``; a ``src/hooks/`` folder in a URL is no secret).
_URL_END = r"[^\s?#'\"<>()\[\]{},;|\\]"
WEBHOOK_URLS = tuple(
    re.compile(head + _URL_END + "+", re.I)
    for head in (
        r"(?P<head>(?<![\w.-])(?:https?://(?:[^\s/@]*@)?)?(?:hooks\.[a-z0-9-]+\.[a-z]{2,}"
        r"|[a-z0-9-]+\.webhook\.office\.com)/)",
        r"(?P<head>\bhttps?://" + _URL_END + r"+?/(?:webhooks?|webhookb2)/)",
        r"(?P<head>\bhttps?://" + _URL_END + r"+?/hooks/)(?=[A-Za-z0-9]{16})",
    )
)
has_hook = re.compile("hook", re.I).search  # cheap: the patterns run only where this finds

PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S
)

#: Runs judged by :func:`looks_random`: letters, digits, ``_ - +`` and base64 padding.
#: ``/`` and ``.`` end a run, so a path or a dotted name is judged part by part.
RANDOM_RUN = re.compile(r"(?<![A-Za-z0-9_+-])[A-Za-z0-9_+-]{28,}={0,2}")
_HEX = re.compile(r"(?:0[xX])?[0-9a-fA-F_-]+=*")
_MIN_RANDOM = 28  # letters and digits
_MIN_SWITCHES = 0.45
_WORDLIKE = re.compile(r"[A-Z]?[a-z]{3,}")
_MAX_WORDLIKE = 0.5  # of the letters and digits


def _kind(char: str) -> int:
    return 0 if char.isupper() else 1 if char.islower() else 2


def looks_random(run: str) -> bool:
    """Whether ``run`` looks generated: 28+ letters and digits mixing upper case, lower case
    and digits, which change kind at 45% or more of neighbouring characters, less than
    half of them in word-like chunks (``Name``, ``name``: three or more lower-case
    letters), and not hex.

    Random base62 changes kind at about 62% of neighbours; words and run names such
    as ``Llama-3_1-Nemotron-Ultra-253B-v1`` at 10-37%; CamelCase names that change
    more often are made of words. Measured on 110,000 strings of 24+ characters from
    installed packages' sources: the ones this takes for random are base64 and ids;
    of random base62 and URL-safe keys it finds 65% at 28 characters, 96% at 32+.

    Example:
        >>> looks_random("Zq8Xw2Lm4Nb6Vc1Rt9YuPp3Oo5Ii7Uu0"), looks_random("a" * 40)
        (True, False)
    """
    chars = [c for c in run if c.isalnum()]
    if len(chars) < _MIN_RANDOM or _HEX.fullmatch(run):
        return False
    kinds = [_kind(c) for c in chars]
    if len(set(kinds)) < 3:
        return False
    switches = sum(a != b for a, b in itertools.pairwise(kinds))
    if switches < _MIN_SWITCHES * (len(kinds) - 1):
        return False
    # CamelCase names switch often too ("ThisIsAVeryLongName2"), but are mostly words.
    return sum(map(len, _WORDLIKE.findall(run))) < _MAX_WORDLIKE * len(chars)


def masked_userinfo(match: re.Match[str]) -> str:
    """The replacement for a :data:`URI_USERINFO` match.

    With a password, the whole user-info goes (a user name next to a password
    is often a key id). A user alone stays (``sftp://ada@host``,
    ``abfs://container@account...``) unless it looks like a token, as in a git
    remote ``https://<token>@github.com``: a known prefix, random-looking, or
    20 or more hex digits (classic GitHub tokens).
    """
    user = match["user"]
    token_like = (
        KNOWN_TOKEN.fullmatch(user) is not None
        or looks_random(user)
        or (len(user) >= 20 and _HEX.fullmatch(user) is not None)
    )
    if match["password"] is not None or token_like:
        return f"{match['scheme']}{MASK}@"
    return match[0]


# Words of a name: "apiKey" -> api, key; "HF_TOKEN" -> hf, token; "db.password" -> db, password.
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_SECRET_WORDS = frozenset(
    {"password", "passwd", "pwd", "passphrase", "secret", "credential", "credentials",
     "apikey", "accesskey", "secretkey", "privatekey", "authtoken", "accesstoken"}
)  # fmt: skip
# "key" and "token" alone name many ordinary settings (pad_token, sort_key, max_tokens):
# they are secret after one of these words, and "token" on its own.
_QUALIFIERS = frozenset(
    {"api", "access", "secret", "private", "auth", "session", "refresh", "bearer", "client",
     "oauth", "personal", "deploy", "service", "account", "storage", "master", "signing",
     "encryption", "hf", "hub", "github", "gh", "gitlab", "wandb", "comet", "neptune", "openai",
     "anthropic", "slack", "aws", "sas", "id", "app", "user", "bot"}
)  # fmt: skip


def is_secret_name(name: str) -> bool:
    """Whether a hyperparameter key or command-line flag names a secret, by its last word.

    Example:
        >>> [is_secret_name(n) for n in ("api_key", "--hf-token", "db.password", "token")]
        [True, True, True, True]
        >>> [is_secret_name(n) for n in ("pad_token", "max_tokens", "key_dim", "tokenizer")]
        [False, False, False, False]
    """
    words = [w.lower() for w in _WORDS.findall(name)]
    while words and words[-1].isdigit():  # api_key_2
        words.pop()
    if not words:
        return False
    last = words[-1]
    if last in _SECRET_WORDS:
        return True
    if last in ("key", "token"):
        return (len(words) > 1 and words[-2] in _QUALIFIERS) or words == ["token"]
    return False


#: ``name=value`` in free text (an environment value, a message, a command line).
TEXT_PAIR = re.compile(r"(?<![\w.-])(?P<name>-{0,2}[A-Za-z][\w.-]*)=(?P<value>[^\s'\",;&)\]}]+)")
#: ``--name value`` in free text.
FLAG_PAIR = re.compile(
    r"(?<![\w.-])(?P<name>--?[A-Za-z][\w.-]*)\s+(?P<value>[^\s'\"-][^\s'\",;&)\]}]*)"
)
#: ``name='value'`` and ``name="value"`` (an object's repr: ``Namespace(api_key='...')``,
#: a dataclass's, a call's keyword arguments; a quoted shell flag ``--token="..."``).
QUOTED_KWARG = re.compile(
    r"(?<![\w.-])(?P<name>-{0,2}[A-Za-z_][\w.-]*)=(?P<q>['\"])(?P<value>[^\n]*?)(?P=q)"
)
#: ``'name': 'value'`` and ``"name": "value"`` (a dict's repr, JSON).
QUOTED_PAIR = re.compile(
    r"(?P<q>['\"])(?P<name>[A-Za-z][\w.-]*)(?P=q)\s*:\s*(?P<q2>['\"])(?P<value>[^'\"]*)(?P=q2)"
)
