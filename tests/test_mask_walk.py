"""mask_value walks objects: each record shape becomes a dict of its fields, masked as a dict is."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import enum
import functools
import types
from pathlib import Path

import pytest

from obsbus import Logger, State, masking
from obsbus._mask_walk import MAX_DEPTH, record_fields
from obsbus.loggers import InMemoryLogger
from obsbus.loggers._run_metadata import flatten_hyperparameters
from obsbus.masking import mask_value
from obsbus.time import Timestamp

HF = "hf_AbCdEfGhIjKlMnOpQrStUv"
DB = "postgresql://admin:lowerpw99@db.internal/w"
PLAIN = "plainlowercasesecret"  # only its name betrays it


@pytest.fixture(autouse=True)
def _no_user_patterns(monkeypatch):
    monkeypatch.setattr(masking, "_user_patterns", ())


@dataclasses.dataclass
class Storage:
    url: str
    aws_secret_access_key: str


@dataclasses.dataclass(frozen=True)
class Frozen:
    name: str
    api_key: str


class Plain:  # object's repr: a record of its public attributes
    def __init__(self) -> None:
        self.note = f"use {HF}"
        self.password = PLAIN
        self._private = PLAIN  # not shown


class Slotted:
    __slots__ = ("_hidden", "auth_token", "unset", "width")

    def __init__(self) -> None:
        self.auth_token = PLAIN
        self.width = 8
        self._hidden = PLAIN


class Shown:  # a repr of its own: a value, shown as its text (masked)
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Shown({self.text})"


def _shapes() -> list[tuple[str, object]]:
    import attrs
    import pydantic
    import pydantic.v1

    @attrs.define
    class Attrs:
        url: str
        client_secret: str

    class V2(pydantic.BaseModel, extra="allow"):
        url: str
        hf_token: str

    class V1(pydantic.v1.BaseModel):
        url: str
        db_password: str

    return [
        ("dataclass", Storage(url=DB, aws_secret_access_key=PLAIN)),
        ("attrs", Attrs(url=DB, client_secret=PLAIN)),
        ("pydantic-v2", V2(url=DB, hf_token=PLAIN)),
        ("pydantic-v1", V1(url=DB, db_password=PLAIN)),
        ("namespace", argparse.Namespace(url=DB, api_key=PLAIN)),
        ("simplenamespace", types.SimpleNamespace(url=DB, password=PLAIN)),
    ]


@pytest.mark.parametrize("index", range(6), ids=[n for n, _ in _shapes()])
def test_each_record_shape_becomes_a_dict_of_its_fields_masked_as_a_dict(index):
    name, record = _shapes()[index]
    masked = mask_value({"cfg": record, "nested": [{"deep": (record, 1)}]})
    fields = masked["cfg"]
    assert type(fields) is dict and fields["url"] == "postgresql://***@db.internal/w"
    secret_field = next(k for k in fields if k != "url")
    assert fields[secret_field] == "***", name
    assert masked["nested"] == [{"deep": (fields, 1)}]
    assert PLAIN not in repr(masked) and "lowerpw99" not in repr(masked)


def test_the_dict_is_what_every_destination_gets_and_trackers_flatten_it():
    a, b = InMemoryLogger(), InMemoryLogger()
    args = argparse.Namespace(lr=0.1, hf_token=PLAIN, storage=Storage(DB, PLAIN))
    Logger(State(run_name="r"), [a, b]).log_hyperparameters({"args": args})
    want = {"args": {"lr": 0.1, "hf_token": "***", "storage": {
        "url": "postgresql://***@db.internal/w", "aws_secret_access_key": "***"}}}  # fmt: skip
    assert a.hyperparameters == want and b.hyperparameters == want
    assert flatten_hyperparameters(a.hyperparameters) == {
        "args/lr": 0.1, "args/hf_token": "***", "args/storage/url": "postgresql://***@db.internal/w",
        "args/storage/aws_secret_access_key": "***"}  # fmt: skip
    assert args.hf_token == PLAIN and args.storage.url == DB  # the caller's objects are unchanged


def test_plain_objects_and_slots_show_their_public_attributes():
    assert mask_value({"p": Plain(), "s": Slotted()}) == {
        "p": {"note": "use ***", "password": "***"}, "s": {"auth_token": "***", "width": 8}}  # fmt: skip


def test_a_set_of_frozen_records_becomes_a_list_of_dicts():
    masked = mask_value({"keys": frozenset({Frozen("a", PLAIN)})})
    assert masked == {"keys": [{"name": "a", "api_key": "***"}]}


def test_values_with_a_repr_of_their_own_stay_unless_their_text_shows_a_secret():
    ts, when, path = Timestamp(batch=3), enum.Enum("When", "NOW").NOW, Path("/data/x")
    partial = functools.partial(print, sep="-")
    kept = {"ts": ts, "when": when, "path": path, "fn": partial, "shown": Shown("ok"),
            "range": range(3), "bytes": b"abc"}  # fmt: skip
    masked = mask_value(kept)
    assert all(masked[k] is v for k, v in kept.items())
    leaky = {"shown": Shown(HF), "call": functools.partial(print, api_key=PLAIN),
             "raw": HF.encode()}  # fmt: skip
    masked = mask_value(leaky)
    assert masked["shown"] == "Shown(***)" and PLAIN not in masked["call"]
    assert masked["call"].startswith("functools.partial(<built-in function print>")
    assert masked["raw"] == "b'***'"


def test_pydantic_secret_types_stay_hidden():
    import pydantic

    class Model(pydantic.BaseModel):
        url: str
        key: pydantic.SecretStr

    masked = mask_value({"m": Model(url="x", key=pydantic.SecretStr(PLAIN))})
    assert masked["m"]["url"] == "x" and PLAIN not in repr(masked) and PLAIN not in str(masked)


def test_everything_under_a_secret_name_is_masked_but_numbers_and_flags():
    params = {"credentials": ["abc", {"user": "ada", "password": "pw"}, ("x", 3)],
              "api_key": Shown("k"), "hf_token": None, "use_auth_token": True, "pin_password": 0,
              "client_secret": b"raw", "pad_token": ["<pad>"]}  # fmt: skip
    assert mask_value(params) == {
        "credentials": ["***", {"user": "ada", "password": "***"}, ("***", 3)],
        "api_key": "***", "hf_token": None, "use_auth_token": True, "pin_password": 0,
        "client_secret": "***", "pad_token": ["<pad>"]}  # fmt: skip


def test_mapping_and_sequence_shapes_like_omegaconf_containers():
    """OmegaConf's DictConfig is a MutableMapping and ListConfig a MutableSequence: the
    walk takes any such shape (omegaconf itself is tested below where it is importable)."""
    user_dict = collections.UserDict({"password": "pw", "url": DB})
    shapes = {"d": user_dict, "ro": types.MappingProxyType({"api_key": "k"}),
              "l": collections.UserList([HF]), "q": collections.deque([DB])}  # fmt: skip
    assert mask_value(shapes) == {"d": {"password": "***", "url": "postgresql://***@db.internal/w"},
                                  "ro": {"api_key": "***"}, "l": ["***"],
                                  "q": ["postgresql://***@db.internal/w"]}  # fmt: skip


def test_omegaconf_configs_are_walked_resolved_where_they_resolve():
    from omegaconf import OmegaConf  # in the test extra

    cfg = OmegaConf.create({"db": {"password": PLAIN, "url": DB}, "lr": 0.1, "lr2": "${lr}",
                            "todo": "???", "tags": ["x", HF]})  # fmt: skip
    assert mask_value({"cfg": cfg, "tags": cfg.tags}) == {
        "cfg": {"db": {"password": "***", "url": "postgresql://***@db.internal/w"}, "lr": 0.1,
                "lr2": 0.1, "todo": "???", "tags": ["x", "***"]},
        "tags": ["x", "***"]}  # fmt: skip
    broken = OmegaConf.create({"a": "${nope}", "api_key": PLAIN})
    assert mask_value({"c": broken}) == {"c": {"a": "${nope}", "api_key": "***"}}


def test_cycles_and_depth_are_bounded():
    loop: dict[str, object] = {"name": "x"}
    loop["self"] = loop
    ns = argparse.Namespace(api_key=PLAIN)
    ns.me = ns
    assert mask_value({"loop": loop, "ns": ns}) == {
        "loop": {"name": "x", "self": "<cycle>"}, "ns": {"api_key": "***", "me": "<cycle>"}}  # fmt: skip
    deep: list[object] = [PLAIN]
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    masked = repr(mask_value({"deep": deep}))
    assert PLAIN not in masked and "<list nested too deep>" in masked
    shared = Storage(DB, PLAIN)  # the same object twice is no cycle
    assert mask_value([shared, shared]) == [mask_value(shared)] * 2


def test_an_object_whose_attributes_raise_is_kept_as_it_is():
    class Odd:
        def __getattr__(self, name):
            raise KeyError(name)

    value = Odd()
    assert mask_value({"odd": value})["odd"] is value


def test_record_fields_is_none_for_values():
    import torch

    for value in (1, "s", None, Timestamp(), Path("x"), torch.ones(1), torch.nn.Linear(1, 1),
                  Storage, Shown("x"), object()):  # fmt: skip
        assert record_fields(value) is None, value
