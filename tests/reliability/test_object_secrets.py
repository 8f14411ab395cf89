"""Secrets held in hyperparameter objects never land in anything a run writes (issue 34, part 3).

A subprocess (scripts/object_secrets_run.py) logs hyperparameters that are
objects -- a dataclass (with a nested dataclass and a ``__slots__`` object in a
list), an ``argparse.Namespace`` holding a ``SimpleNamespace``, pydantic v2 and
v1 models, an attrs class in a list, a plain object with ``__dict__`` in a
tuple, and an OmegaConf ``DictConfig`` when omegaconf is importable -- through
FileLogger, ConsoleLogger, LoguruLogger with ``setup_logging``, TensorBoard,
MLflow (SQLite) and W&B offline. The objects hold a Hugging Face token, an AWS
key pair, GitHub tokens, a JWT, a database URI with a password, secret-named
fields of random lower-case text (which only their names betray) and Slack,
Discord and generic webhook URLs.

Every file under the temporary folder (run folder, tracker homes), each zip
and gzip member and each SQLite row, and the run's stdout and stderr, are
searched for each secret (the helpers of test_secrets_scan.py). Positive
controls check that the visible values next to the secrets arrived, and that
an object reached the trackers as a dict of its fields (``cfg/lr``).
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.test_secrets_scan import _blobs, _rand

SCRIPT = Path(__file__).parent / "scripts" / "object_secrets_run.py"
#: Each tracker's close_timeout in the run: room for slow client starts on a loaded machine
#: (a tracker that gives up at close drops what it holds, and the controls below would fail).
CLOSE_TIMEOUT_S = 240


def _planted() -> dict[str, str]:
    lower = string.ascii_lowercase + string.digits  # no shape rule knows these: names must
    upper = string.ascii_uppercase + string.digits
    jwt = "eyJ" + _rand(20) + ".eyJ" + _rand(30) + "." + _rand(43)
    return {
        "dataclass hf": "hf_" + _rand(34),
        "dataclass db": "dcdbpw" + _rand(12, lower),
        "dataclass aws id": "AKIA" + _rand(16, upper),
        "dataclass aws secret": _rand(20) + "/" + _rand(19) + "+",
        "slack webhook": f"T{_rand(8, upper)}/B{_rand(10, upper)}/{_rand(24, lower)}",
        "namespace api_key": "nsapikey" + _rand(12, lower),
        "namespace github": "ghp_" + _rand(36),
        "discord webhook": f"{_rand(18, string.digits)}/{_rand(40, lower)}",
        "simplenamespace password": "snspw" + _rand(12, lower),
        "pydantic hf_token": "hf_" + _rand(34),
        "jwt": jwt,
        "pydantic v1 secret": "v1secret" + _rand(12, lower),
        "generic webhook": _rand(32, lower),
        "plain github": "github_pat_" + _rand(40),
        "plain password": "plainpw" + _rand(12, lower),
        "slots token": "slotstok" + _rand(12, lower),
        "omegaconf password": "omegapw" + _rand(12, lower),
    }


def _run(root: Path, planted: dict[str, str], visible: str) -> subprocess.CompletedProcess[bytes]:
    folder, home, work = root / "run", root / "home", root / "work"
    for path in (folder, home, work):
        path.mkdir()
    config_file = root / "config.json"  # skipped by the scan: it is what was planted
    config = {"run_folder": str(folder), "secrets": planted, "visible": visible,
              "close_timeout": CLOSE_TIMEOUT_S}  # fmt: skip
    config_file.write_text(json.dumps(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                "WANDB_ARTIFACT_DIR", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):  # fmt: skip
        env[var] = str(home / var.lower())
    env.update({
        "HOME": str(home), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
        "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "",
    })  # fmt: skip
    argv = [sys.executable, str(SCRIPT), str(config_file)]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True,
                          timeout=3 * CLOSE_TIMEOUT_S + 120)  # fmt: skip


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    root = tmp_path_factory.mktemp("object-secrets")
    planted, visible = _planted(), "visible-" + _rand(10, string.ascii_lowercase)
    done = _run(root, planted, visible)
    assert done.returncode == 0 and b"done" in done.stdout, done.stderr.decode()[-4000:]
    if b"omegaconf: not importable" in done.stdout:
        planted.pop("omegaconf password")
    blobs = [*_blobs(root, [root / "config.json"]), ("stdout", done.stdout),
             ("stderr", done.stderr)]  # fmt: skip
    return {"planted": planted, "visible": visible, "blobs": blobs,
            "stderr": done.stderr.decode(errors="replace")}  # fmt: skip


def test_no_secret_held_in_an_object_reaches_any_file_or_output(scanned):
    found = sorted(
        f"{what} in {where}"
        for where, data in scanned["blobs"]
        for what, secret in scanned["planted"].items()
        if secret.encode() in data
    )
    assert not found, f"{len(found)} hit(s):\n" + "\n".join(found[:80])


@pytest.mark.parametrize(
    ("store", "needle"),
    [("logs-rank0.txt", "visible"), ("console.txt", "visible"),
     ("logs/train/rank-0/info.log", "visible"), ("tfevents", "visible"),
     (".wandb", "visible"), ("mlflow.db:", "visible"),
     ("mlflow.db:params", "cfg/lr"), ("mlflow.db:params", "args/nested/marker"),
     ("mlflow.db:params", "hub/repo"), ("mlflow.db:params", "cfg/storage/warehouse"),
     (".wandb", "cfg/storage/warehouse"), ("tfevents", "cfg/lr"),
     ("mlflow.db:params", "hooks.slack.com/"), ("mlflow.db:params", "discord.com/")],
    ids=lambda v: v.replace("/", "_"),
)  # fmt: skip
def test_what_was_logged_next_to_the_secrets_arrived(scanned, store, needle):
    """Each store holds the visible values of the objects, and their fields as flat names:
    an object reaches a tracker as a dict of its fields, flattened like one."""
    text = (scanned["visible"] if needle == "visible" else needle).encode()
    where = sorted({where for where, _ in scanned["blobs"]})
    found = any(store in w and text in data for w, data in scanned["blobs"])
    assert found, f"not in {store}; files: {where}\nstderr: {scanned['stderr'][-3000:]}"


def test_masked_object_values_stay_readable(scanned):
    everything = b"\n".join(data for _, data in scanned["blobs"])
    for kept in (b"postgresql://***@db.internal/w", b"org/model", b"#runs"):
        assert kept in everything, kept


def test_the_error_that_refuses_an_object_as_hparams_masks_its_secrets():
    """``Run(hparams=Namespace(...))`` is refused (hparams is a dict); the error quotes the
    object, masked."""
    import argparse

    from obsbus import Run

    token = "hf_" + "Zq7" * 12
    with pytest.raises(TypeError, match=r"hparams must be a dict") as info:
        Run(max_duration="1ba", hparams=argparse.Namespace(api_key="lowercasevalue1", note=token))
    assert token not in str(info.value) and "lowercasevalue1" not in str(info.value)


def test_hparams_json_masks_a_secret_that_a_long_repr_would_cut(tmp_path):
    """json_safe cuts long text at 2,000 characters: masking after the cut let half a secret out."""
    import argparse
    import json

    from obsbus import Run

    hparams = {"args": argparse.Namespace(note="y" * 1960, db_password="lowerpwsecretvalue99")}
    with Run(max_duration="1ba", run_folder=tmp_path, run_name="r", hparams=hparams) as run:
        for _ in run.train([[1]]):
            run.state.loss = 0.5
    text = (tmp_path / "config" / "hparams.json").read_text()
    assert "lowerpw" not in text, text[-300:]
    assert json.loads(text)["args"]["db_password"] == "***"
