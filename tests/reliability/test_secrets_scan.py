"""Secrets planted everywhere a run reads from never land in anything it writes.

A subprocess (scripts/planted_secrets_run.py) runs every local destination
(FileLogger, ConsoleLogger, ProgressBarLogger, LoguruLogger with
``setup_logging``) and every offline tracker (TensorBoard, W&B offline,
MLflow on SQLite, Comet's offline zip, Neptune offline) with secrets planted
in: a secret-named environment variable, a token-shaped value under an
innocent name (``OPENAI_BASE=sk-...``), a database URL in the environment,
the hyperparameters (a URI password, an ``sk-`` token, a nested ``api_key``,
a Hugging Face token), the command line (``--api-key=...``, ``--token ...``)
and a bucket URI with a password given to the Profiler. Then every byte of
every file it wrote is searched: raw bytes, each member of every zip, and
every row of every SQLite table; and its stdout and stderr.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "planted_secrets_run.py"

SECRETS = {
    "env name": "envSecretValue-7d1f",
    "env value": "sk-proj-Zq8Xw2Lm4Nb6Vc1Rt9Yu",
    "env uri": "EnvDbPass-55x",
    "hparam uri": "HparamDbPass-93a",
    "hparam token": "sk-ant-Hj3Kd8Lp2Qw7Er5Ty1Ui",
    "hparam api_key": "plainApiValue-2048",
    "hparam hf": "hf_AbCdEfGhIjKlMnOpQrStUv",
    "cli api-key": "cliSecret-0xdeadbeef",
    "cli token": "cliToken-4242abc",
    "uri password": "UriPassw0rd-77",
}


def _run(tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    folder = tmp_path / "run"
    folder.mkdir()
    home = tmp_path / "home"
    env = dict(os.environ)
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                "WANDB_ARTIFACT_DIR", "MPLCONFIGDIR", "NEPTUNE_DATA_DIRECTORY"):  # fmt: skip
        env[var] = str(home / var.lower())
    for var in ("WANDB_PROJECT", "WANDB_ENTITY", "COMET_API_KEY", "MLFLOW_TRACKING_URI",
                "OBSBUS_RUN_FOLDER", "NEPTUNE_MODE", "NEPTUNE_PROJECT"):  # fmt: skip
        env.pop(var, None)
    env.update({
        "HOME": str(home), "COMET_CONFIG": str(home / ".comet.config"),
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true", "COMET_DISABLE_AUTO_LOGGING": "1", "TQDM_DISABLE": "",
        "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
        "MY_SERVICE_TOKEN": SECRETS["env name"],
        "OPENAI_BASE": SECRETS["env value"],
        "DATABASE_URL": f"postgresql://admin:{SECRETS['env uri']}@db.internal/runs",
        "SECRETS_URI": f"s3://ada:{SECRETS['uri password']}@bucket/{{run_name}}/t.json",
        "SECRETS_HPARAMS": json.dumps({
            "lr": 0.1,
            "db": {"url": f"postgresql://admin:{SECRETS['hparam uri']}@db/x"},
            "openai": SECRETS["hparam token"],
            "clients": [{"name": "a", "api_key": SECRETS["hparam api_key"]}],
            "hub": {"token_value": f"use {SECRETS['hparam hf']} here"},
        }),
    })  # fmt: skip
    argv = [sys.executable, str(SCRIPT), str(folder),
            f"--api-key={SECRETS['cli api-key']}", "--token", SECRETS["cli token"], "--lr", "0.1"]  # fmt: skip
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=300)


def _blobs(root: Path):
    """(where, bytes) for every file under root, every zip member and every SQLite row."""
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        yield str(path), data
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    yield f"{path}!{member}", archive.read(member)
        if data.startswith(b"SQLite format 3"):
            with sqlite3.connect(path) as db:
                tables = [
                    r[0] for r in db.execute("select name from sqlite_master where type='table'")
                ]
                for table in tables:
                    rows = db.execute(f'select * from "{table}"').fetchall()
                    yield f"{path}:{table}", repr(rows).encode()


def test_no_planted_secret_reaches_any_file_or_output(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0 and b"done" in done.stdout, done.stderr.decode()[-3000:]
    files = list(_blobs(tmp_path))
    assert any("mlflow.db" in where for where, _ in files)  # every tracker wrote its store
    assert any(where.endswith(".wandb") for where, _ in files)
    assert any(".zip!" in where for where, _ in files)
    assert any("tfevents" in where for where, _ in files)
    assert b"profiler refused" in done.stderr  # the masked error was printed
    found = [
        f"{what} in {where}"
        for where, data in [*files, ("stdout", done.stdout), ("stderr", done.stderr)]
        for what, secret in SECRETS.items()
        if secret.encode() in data
    ]
    assert not found, "\n".join(found[:40])
