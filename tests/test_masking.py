"""obsbus.masking: what is masked, what survives, and patterns users add."""

from __future__ import annotations

import pytest

from obsbus import masking
from obsbus.masking import add_secret_pattern, mask_argv, mask_secrets, mask_value


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://admin:PASSWORD@host/db", "postgresql://***@host/db"),
        ("https://ghp_abcdefghijklmnop1234@github.com/x.git", "https://***@github.com/x.git"),
        (
            "GET https://b.s3.amazonaws.com/k?X-Amz-Signature=abc123&x=1",
            "GET https://b.s3.amazonaws.com/k?X-Amz-Signature=***&x=1",
        ),
        ("key sk-proj-abcdefgh12345678 used", "key *** used"),
        ("ghp_0123456789abcdefABCDEF", "***"),
        ("hf_AbCdEfGhIjKlMnOpQrSt", "***"),
        ("AKIAABCDEFGHIJKLMNOP", "***"),
        ("xoxb-1234-5678-abcdefgh", "***"),
        ("glpat-abcdefghij0123456789", "***"),
        ("random Zq8Xw2Lm4Nb6Vc1Rt9YuPp3Oo5Ii7Uu0 key", "random *** key"),
    ],
    ids=[
        "uri-password",
        "uri-token",
        "query-signature",
        "sk",
        "github",
        "hf",
        "aws",
        "slack",
        "gitlab",
        "entropy",
    ],
)
def test_secrets_are_masked(text, masked):
    assert mask_secrets(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "0123456789abcdef0123456789abcdef01234567",  # a git commit
        "6bf28879-d8a8-4102-8a12-c976bc6d4775",  # a UUID
        "/home/ada/runs/default/ada/ada-20261202-110000-a1b2c3/metrics-rank0.jsonl",
        "s3://bucket/prefix/run",
        "sqlite:///runs/mlflow.db",
        "tokenizer=gpt2 max_tokens=512",
    ],
)
def test_ordinary_values_survive(text):
    assert mask_secrets(text) == text


def test_secret_named_environment_values_are_masked_anywhere(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "plain-value-99")
    assert mask_secrets("connect with plain-value-99 now") == "connect with *** now"


def test_values_under_secret_names_and_nested_strings():
    params = {"api_key": "abc", "tokenizer": "gpt2", "max_tokens": 5,
              "db": [{"password": "pw1234"}, "mysql://u:p@h/d"]}  # fmt: skip
    assert mask_value(params) == {"api_key": "***", "tokenizer": "gpt2", "max_tokens": 5,
                                  "db": [{"password": "***"}, "mysql://***@h/d"]}  # fmt: skip


def test_command_lines():
    argv = [
        "train.py",
        "--api-key=abc123",
        "--hf-token",
        "t0k3n",
        "--tokenizer",
        "gpt2",
        "--lr",
        "0.1",
    ]
    assert mask_argv(argv) == [
        "train.py",
        "--api-key=***",
        "--hf-token",
        "***",
        "--tokenizer",
        "gpt2",
        "--lr",
        "0.1",
    ]


def test_user_patterns(monkeypatch):
    monkeypatch.setattr(masking, "_user_patterns", [])
    add_secret_pattern(r"corp-\d{6}")
    assert mask_secrets("badge corp-123456") == "badge ***"
    with pytest.raises(TypeError, match="got 5"):
        add_secret_pattern(5)  # type: ignore[arg-type]
