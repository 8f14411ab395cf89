"""A small run whose hyperparameters are objects holding secrets, through every local destination.

Usage: object_secrets_run.py CONFIG.json

The parent (tests/reliability/test_object_secrets.py) writes CONFIG.json
(outside the folders it scans) with the secrets and each tracker's
``close_timeout``; this script holds no secret. It
builds the objects users pass as hyperparameters -- a dataclass, an
``argparse.Namespace``, a ``types.SimpleNamespace``, pydantic v2 and v1 models,
an attrs class, a plain object with ``__dict__``, one with ``__slots__``, an
OmegaConf ``DictConfig`` when omegaconf is importable -- nested in dicts, lists
and tuples, and logs them through FileLogger, ConsoleLogger, LoguruLogger (with
``setup_logging`` into the run folder), TensorBoard, MLflow (SQLite in the run
folder) and W&B offline. It prints a plain object and the webhook URLs too,
through loguru, so the log sinks' masking is scanned as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
from pathlib import Path
from typing import Any

import attrs
import pydantic
import pydantic.v1
import torch

from obsbus import Run
from obsbus.log import reset_logging, setup_logging
from obsbus.loggers import (
    ConsoleLogger,
    FileLogger,
    LoguruLogger,
    MLFlowLogger,
    TensorboardLogger,
    WandBLogger,
)

config = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
s: dict[str, str] = config["secrets"]
visible: str = config["visible"]
folder = Path(config["run_folder"])


@dataclasses.dataclass
class Storage:
    warehouse: str
    aws_access_key_id: str
    aws_secret_access_key: str


@dataclasses.dataclass
class TrainConfig:
    lr: float
    marker: str
    hub_note: str
    storage: Storage
    alerts_url: str
    layers: list[Any]


class HubSettings(pydantic.BaseModel):
    repo: str
    hf_token: str
    session_jwt: str


class LegacySettings(pydantic.v1.BaseModel):
    name: str
    client_secret: str


@attrs.define
class Notify:
    channel: str
    url: str


class PlainObject:  # no repr of its own: prints as <...PlainObject object at 0x...>
    def __init__(self) -> None:
        self.github = s["plain github"]
        self.db_password = s["plain password"]


class Slotted:
    __slots__ = ("auth_token", "depth")

    def __init__(self) -> None:
        self.auth_token = s["slots token"]
        self.depth = 2


cfg = TrainConfig(
    lr=0.1,
    marker=visible,
    hub_note=f"pull with {s['dataclass hf']} please",
    storage=Storage(
        warehouse=f"postgresql://admin:{s['dataclass db']}@db.internal/w",
        aws_access_key_id=s["dataclass aws id"],
        aws_secret_access_key=s["dataclass aws secret"],
    ),
    alerts_url=f"https://hooks.slack.com/services/{s['slack webhook']}",
    layers=[{"width": 8}, Slotted()],
)
args = argparse.Namespace(
    seed=1,
    api_key=s["namespace api_key"],
    github=s["namespace github"],
    notify=f"https://discord.com/api/webhooks/{s['discord webhook']}",
    nested=types.SimpleNamespace(password=s["simplenamespace password"], marker=visible),
)
hparams: dict[str, Any] = {
    "cfg": cfg,
    "args": args,
    "hub": HubSettings(repo="org/model", hf_token=s["pydantic hf_token"], session_jwt=s["jwt"]),
    "legacy": LegacySettings(name="old", client_secret=s["pydantic v1 secret"]),
    "notify": [Notify(channel="#runs", url=f"https://example.com/webhook/{s['generic webhook']}")],
    "pair": (PlainObject(), 3),
}
try:
    from omegaconf import OmegaConf
except ImportError:
    print("omegaconf: not importable")
else:
    hparams["omega"] = OmegaConf.create(
        {"db": {"password": s["omegaconf password"], "url": "sqlite:///x.db"}, "lr": 0.1}
    )

log = setup_logging(folder, module="train")
wait = float(config["close_timeout"])  # room for slow client starts on a loaded machine
with open(folder / "console.txt", "w", encoding="utf-8") as console:
    loggers = [
        FileLogger(),
        ConsoleLogger(stream=console),
        LoguruLogger(),
        TensorboardLogger(close_timeout=wait),
        WandBLogger(project="objects", mode="offline", close_timeout=wait),
        MLFlowLogger(close_timeout=wait),
    ]
    with Run(max_duration="3ba", run_folder=folder, hparams=hparams, loggers=loggers,
             run_name="objects") as run:  # fmt: skip
        for i, _ in enumerate(run.train([[0]] * 3)):
            run.state.loss = torch.tensor(float(i))
# The log sinks mask text: a webhook URL in a message is a secret wherever it appears.
log.warning("alerts go to {}", cfg.alerts_url)
log.warning("and to {}", args.notify)
reset_logging()
print("done")
