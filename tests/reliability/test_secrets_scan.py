"""Secrets planted everywhere a run reads from never land in anything it writes.

A subprocess (scripts/planted_secrets_run.py) runs every local destination
(FileLogger, ConsoleLogger and ProgressBarLogger to files, LoguruLogger with
``setup_logging`` writing into the run folder) and every offline tracker
(TensorBoard, W&B offline, MLflow on SQLite in the run folder, Comet's offline
zip, Neptune offline) in one small Run, with secrets planted in:

- the environment: a secret-named variable (``MY_API_TOKEN``), a token under an
  innocent name (``OPENAI_BASE=sk-...``), a database URL with a password, and a
  ``--password ...`` inside an innocent variable;
- the hyperparameters, nested: a URI password, an ``sk-`` token in a list, an
  ``api_key``, a Hugging Face token inside text, and a value only a pattern the
  run adds (``add_secret_pattern``) knows; a W&B ``config=`` too;
- the command line (``--api-key=...``, ``--token ...``, ``--hf-token ...``);
- a bucket URI with a password, given to the Profiler by mistake (its error is
  printed and logged), and the git remote of the working directory.

Then every byte it wrote is searched, under the whole temporary folder (run
folder, tracker homes and caches, working directory): raw bytes, each member of
every zip and gzip file, and every row of every SQLite table; and its stdout
and stderr. Each secret is random, made here, so no source file holds one.
Positive controls check that what was planted next to the secrets arrived.

Those controls once failed only on a loaded machine (load ~10 on 2 cores): the
four tracker clients (W&B, MLflow, Comet, Neptune) start on their writer
threads, which there took longer than the 30 s close deadline the run's end
shares, so close gave up and the values never reached the stores (reported:
"... did not finish in time ...; N write(s) were not delivered"). That is a
real loss, not a slow test: the run now gives every tracker ``CLOSE_TIMEOUT_S``
(close waits on the clients finishing, not on a clock: a quiet machine takes
seconds), and :func:`test_no_write_was_cut_off_at_close` says so by name, with
the error the run printed, when a deadline still cuts writes off.
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
import sqlite3
import string
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "planted_secrets_run.py"
#: Each tracker's close_timeout in the run: room for slow client starts on a loaded machine.
CLOSE_TIMEOUT_S = 600.0
_ALNUM = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _planted() -> dict[str, str]:
    lower = string.ascii_lowercase + string.digits  # no shape rule knows these: names must
    return {
        "env name": "envnamed" + _rand(12, lower),
        "env value": "sk-proj-" + _rand(32),
        "env uri": "envdbpw" + _rand(10, lower),
        "env flag": "envflagpw" + _rand(10, lower),
        "hparam uri": "hpdbpw" + _rand(10, lower),
        "hparam token": "sk-" + _rand(36),
        "hparam api_key": "hpapikey" + _rand(10, lower),
        "hparam hf": "hf_" + _rand(34),
        "hparam pattern": "CORP-" + _rand(8, string.digits),
        "wandb config": "sk-ant-" + _rand(30),
        "cli api-key": "cliapikey" + _rand(10, lower),
        "cli token": "clitoken" + _rand(10, lower),
        "cli hf": "hf_" + _rand(34),
        "profiler uri": "profpw" + _rand(10, lower),
        "git remote": "ghs_" + _rand(36),
    }


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c",
                    "init.defaultBranch=main", *args], cwd=cwd, check=True,
                   capture_output=True)  # fmt: skip


def _run(root: Path, planted: dict[str, str], visible: str) -> subprocess.CompletedProcess[bytes]:
    folder, home, checkout = root / "run", root / "home", root / "checkout"
    for path in (folder, home, checkout):
        path.mkdir()
    _git(checkout, "init", "-q")
    (checkout / "a.txt").write_text("x")
    _git(checkout, "add", "a.txt")
    _git(checkout, "commit", "-qm", "one")
    remote = f"https://x-access-token:{planted['git remote']}@github.com/o/r.git"
    _git(checkout, "remote", "add", "origin", remote)
    config = {
        "run_folder": str(folder),
        "close_timeout": CLOSE_TIMEOUT_S,
        "pattern": r"CORP-\d{8}",
        "profiler_uri": f"s3://admin:{planted['profiler uri']}@bucket/{{run_name}}/t.json",
        "wandb": {"init_key": planted["wandb config"], "init_visible": visible},
        "hparams": {
            "lr": 0.1,
            "marker": visible,
            "pad_token": "<pad>",
            "data": {"warehouse": f"postgresql://admin:{planted['hparam uri']}@db.internal/w",
                     "clients": ["plain", {"openai": planted["hparam token"]}]},
            "auth": {"api_key": planted["hparam api_key"]},
            "hub": {"note": f"use {planted['hparam hf']} here"},
            "ticket": planted["hparam pattern"],
        },
    }  # fmt: skip
    config_file = root / "config.json"  # skipped by the scan: it is what was planted
    config_file.write_text(json.dumps(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "COMET_",
                                                                     "NEPTUNE_", "MLFLOW_"))}  # fmt: skip
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                "WANDB_ARTIFACT_DIR", "MPLCONFIGDIR", "NEPTUNE_DATA_DIRECTORY",
                "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):  # fmt: skip
        env[var] = str(home / var.lower())
    env.update({
        "HOME": str(home), "COMET_CONFIG": str(home / ".comet.config"),
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true", "COMET_DISABLE_AUTO_LOGGING": "1",
        "COMET_ERROR_TRACKING_ENABLE": "false", "COMET_DISABLE_ANNOUNCEMENT": "1",
        "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "",
        "OBSBUS_SCAN_VISIBLE": visible,
        "MY_API_TOKEN": planted["env name"],
        "OPENAI_BASE": planted["env value"],
        "DATABASE_URL": f"postgresql://admin:{planted['env uri']}@db.internal/runs",
        "EXTRA_ARGS": f"--fast --password {planted['env flag']}",
    })  # fmt: skip
    argv = [sys.executable, str(SCRIPT), str(config_file),
            f"--api-key={planted['cli api-key']}", "--token", planted["cli token"],
            "--hf-token", planted["cli hf"], f"--visible={visible}", "--lr", "0.1"]  # fmt: skip
    return subprocess.run(argv, cwd=checkout, env=env, capture_output=True,
                          timeout=CLOSE_TIMEOUT_S + 300)  # fmt: skip


def _members(where: str, data: bytes) -> Iterator[tuple[str, bytes]]:
    """``data`` and what it holds: zip members and gzip contents, each scanned too."""
    yield where, data
    if data[:4] == b"PK\x03\x04":
        import io

        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                yield from _members(f"{where}!{member}", archive.read(member))
    elif data[:2] == b"\x1f\x8b":
        yield from _members(f"{where}!gunzip", gzip.decompress(data))


def _blobs(root: Path, skip: list[Path]) -> Iterator[tuple[str, bytes]]:
    """(where, bytes) for every file under root, its members, and every SQLite table's rows."""
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if any(path == s or s in path.parents for s in skip):
            continue
        data = path.read_bytes()
        yield from _members(str(path.relative_to(root)), data)
        if data.startswith(b"SQLite format 3\x00"):
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                tables = [r[0] for r in db.execute("select name from sqlite_master "
                                                   "where type='table'")]  # fmt: skip
                for table in tables:
                    rows = db.execute(f'select * from "{table}"').fetchall()
                    yield f"{path.relative_to(root)}:{table}", repr(rows).encode()


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    root = tmp_path_factory.mktemp("secrets")
    planted, visible = _planted(), "visible-" + _rand(10, string.ascii_lowercase)
    done = _run(root, planted, visible)
    assert done.returncode == 0 and b"done" in done.stdout, done.stderr.decode()[-4000:]
    skip = [root / "config.json", root / "checkout" / ".git"]
    blobs = [*_blobs(root, skip), ("stdout", done.stdout), ("stderr", done.stderr)]
    return {"planted": planted, "visible": visible, "blobs": blobs, "done": done,
            "undelivered": _undelivered(done.stdout.decode(errors="replace"))}  # fmt: skip


def _undelivered(stdout: str) -> dict[str, int]:
    """Each tracker's ``undelivered_writes``, from the script's ``undelivered {...}`` line."""
    lines = [line for line in stdout.splitlines() if line.startswith("undelivered ")]
    assert lines, f"the script printed no 'undelivered' line:\n{stdout[-2000:]}"
    counts: dict[str, int] = json.loads(lines[-1].removeprefix("undelivered "))
    return counts


def _told(scanned) -> list[str]:
    """The run's error lines about writes it did not deliver."""
    stderr = scanned["done"].stderr.decode(errors="replace")
    return [line for line in stderr.splitlines()
            if "not delivered" in line or ("dropped" in line and "write(s)" in line)]  # fmt: skip


def _loss_told(scanned) -> str:
    """Each tracker's undelivered writes and what the run said about them, for messages."""
    return f"undelivered_writes: {scanned['undelivered']}; reported: {_told(scanned) or 'nothing'}"


def test_no_planted_secret_reaches_any_file_or_output(scanned):
    found = sorted(
        f"{what} in {where}"
        for where, data in scanned["blobs"]
        for what, secret in scanned["planted"].items()
        if secret.encode() in data
    )
    assert not found, f"{len(found)} hit(s):\n" + "\n".join(found[:60])


@pytest.mark.parametrize(
    ("store", "needle"),
    [(".wandb", "visible"), (".zip!", "visible"), ("mlflow.db:", "visible"),
     ("tfevents", "visible"), ("neptune", "visible"), ("console.txt", "visible"),
     ("logs/train/rank-0/info.log", "visible"), ("logs-rank0.txt", "visible"),
     (".wandb", "OBSBUS_SCAN_VISIBLE"), (".zip!", "OBSBUS_SCAN_VISIBLE"),
     ("mlflow.db:", "OBSBUS_SCAN_VISIBLE"), ("tfevents", "OBSBUS_SCAN_VISIBLE"),
     ("neptune", "OBSBUS_SCAN_VISIBLE"), (".wandb", "--api-key=***"),
     (".wandb", "--visible="), (".wandb", "init_visible"),
     ("git_metadata.json", "github.com/o/r.git"), ("stderr", "profiler refused")],
    ids=lambda v: v.replace("/", "_"),
)  # fmt: skip
def test_what_was_planted_next_to_the_secrets_arrived(scanned, store, needle):
    """Each store holds the visible values logged with the secrets (hyperparameters, the
    environment, the command line, the git remote): the scan looked where they went."""
    text = (scanned["visible"] if needle == "visible" else needle).encode()
    assert any(store in where and text in data for where, data in scanned["blobs"]), (
        _loss_told(scanned),
        sorted({where for where, _ in scanned["blobs"]}),
    )


def test_no_write_was_cut_off_at_close(scanned):
    """Every tracker delivered every write: close waited for the clients, however slowly
    they started. A loss here is real (the stores lack it); it must also have been told."""
    lost = {name: n for name, n in scanned["undelivered"].items() if n}
    assert set(scanned["undelivered"]) == {"TensorboardLogger", "WandBLogger", "MLFlowLogger",
                                           "CometMLLogger", "NeptuneLogger"}  # fmt: skip
    told = _told(scanned)
    silent = [name for name in lost if not any(f"obsbus: {name}" in line for line in told)]
    assert not silent, f"writes lost without a word: {silent}; {_loss_told(scanned)}"
    assert not lost, (
        f"the close deadline ({CLOSE_TIMEOUT_S:.0f} s) cut writes off, as reported: "
        + _loss_told(scanned)
    )


def test_masked_values_are_readable(scanned):
    """The masks keep what is not secret: the user, host and database of a URI, the key."""
    everything = b"\n".join(data for _, data in scanned["blobs"])
    for kept in (b"postgresql://***@db.internal/w", b"<pad>", b"--api-key=***"):
        assert kept in everything
