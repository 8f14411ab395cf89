"""What trackers record about a run besides metrics: flat parameters, environment, git.

Shared by every experiment-tracker destination, so they flatten, filter and
mask the same way (DESIGN principle 7: secrets stay secret).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from obsbus.masking import SECRET_NAME, env_secret_values, mask_secrets, mask_value

__all__ = [
    "SECRET_NAME",
    "environment_snapshot",
    "flatten_hyperparameters",
    "git_metadata",
    "mask_credentials",
    "record_git",
    "redact",
    "secret_values",
]

_MAX_VALUE_LEN = 500


def mask_credentials(text: str) -> str:
    """``text`` masked by :func:`obsbus.masking.mask_secrets` (kept for its callers).

    Example:
        >>> mask_credentials("https://ada:hunter2@mlflow.example.com/api?sig=abc")
        'https://***@mlflow.example.com/api?sig=***'
    """
    return mask_secrets(text)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment variables whose names look secret, longest first."""
    return env_secret_values(environ)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value replaced by ``***``, and all else
    :func:`~obsbus.masking.mask_secrets` masks."""
    return mask_secrets(text, secrets)


def flatten_hyperparameters(params: Mapping[str, Any], sep: str = "/") -> dict[str, Any]:
    """Nested mappings flattened to ``{"optim/lr": 0.1}``; sequences are kept as values.

    Example:
        >>> flatten_hyperparameters({"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "seed": 1})
        {'optim/lr': 0.1, 'optim/betas': [0.9, 0.99], 'seed': 1}
    """
    flat: dict[str, Any] = {}

    def visit(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for key, inner in value.items():
                visit(f"{prefix}{sep}{key}" if prefix else str(key), inner)
        else:
            flat[prefix] = value

    for key, value in params.items():
        visit(str(key), value)
    return flat


def environment_snapshot(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{"env__NAME": value}`` for the environment, without anything secret.

    Names matching TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|PASSPHRASE are
    dropped, and every value is masked by :func:`obsbus.masking.mask_value`:
    the values of those variables wherever else they appear, URI credentials,
    token-shaped values under innocent names (``OPENAI_BASE=sk-...``) and
    ``--password ...`` in a value. Long values are cut to 500 characters.

    Example:
        >>> environment_snapshot({"WORLD_SIZE": "8", "WANDB_API_KEY": "abcdef123",
        ...                       "URL": "s3://id:abcdef123@host/b", "BASE": "sk-proj1234abcd5678"})
        {'env__BASE': '***', 'env__URL': 's3://***@host/b', 'env__WORLD_SIZE': '8'}
    """
    env = dict(os.environ if environ is None else environ)
    kept = {name: env[name] for name in sorted(env) if not SECRET_NAME.search(name)}
    masked: dict[str, str] = mask_value(kept, secret_values(env))  # the secrets found once
    snapshot = {}
    for name, value in masked.items():
        if len(value) > _MAX_VALUE_LEN:
            value = value[: _MAX_VALUE_LEN - 3] + "..."
        snapshot[f"env__{name}"] = value
    return snapshot


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_metadata(cwd: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """Commit, branch, dirtiness and remote of the git checkout at ``cwd``; ``None`` outside one.

    The remote URL has its credentials masked. Each ``git`` call has a 5 s
    timeout, so a slow network file system can't stall the start of a run.
    """
    where = Path.cwd() if cwd is None else Path(cwd)
    commit = _git(["rev-parse", "HEAD"], where)
    if commit is None:
        return None
    status = _git(["status", "--porcelain", "--untracked-files=no"], where)
    remote = _git(["config", "--get", "remote.origin.url"], where)
    return {
        "commit": commit,
        "branch": _git(["rev-parse", "--abbrev-ref", "HEAD"], where) or "",
        "dirty": bool(status),
        "remote": mask_credentials(remote) if remote else "",
        "root": _git(["rev-parse", "--show-toplevel"], where) or "",
    }


def record_git(
    run_folder: Path,
    set_tags: Callable[[dict[str, str]], None],
    upload: Callable[[str, Path], None] | None,
) -> None:
    """Give a tracker the git metadata: tags ``git.commit``, ``git.branch``, ``git.dirty``,
    and, where it stores files (``upload``), ``system/git_metadata.json`` in ``run_folder``.

    Nothing outside a git checkout.
    """
    meta = git_metadata()
    if meta is None:
        return
    set_tags(
        {f"git.{k}": str(v) for k, v in meta.items() if k in ("commit", "branch")}
        | {"git.dirty": str(meta["dirty"]).lower()}
    )
    if upload is not None:
        # In the run folder (no temp files left behind); written atomically, as every rank
        # that logs writes the same content.
        path = run_folder / "system" / "git_metadata.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".git_metadata.json.{os.getpid()}")
        partial.write_text(json.dumps(meta, indent=2), encoding="utf-8")
        os.replace(partial, path)
        upload("system/git_metadata.json", path)
