"""obsbus.masking: each rule, what must survive, user patterns, and the places that mask."""

from __future__ import annotations

import logging
import re
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from obsbus import Logger, State, masking
from obsbus.loggers import InMemoryLogger
from obsbus.loggers._run_metadata import environment_snapshot
from obsbus.masking import (
    add_secret_pattern,
    mask_argv,
    mask_error,
    mask_secrets,
    mask_value,
    masked_sys_argv,
    remove_secret_pattern,
)

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1b2\n-----END RSA PRIVATE KEY-----"


@pytest.fixture(autouse=True)
def _no_user_patterns(monkeypatch):
    monkeypatch.setattr(masking, "_user_patterns", ())


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://admin:PASSWORD@host/db", "postgresql://***@host/db"),
        ("mysql://u:p@ss@h/d then ok", "mysql://***@h/d then ok"),
        ("https://ghp_abcdefghijklmnop12345678@github.com/x.git", "https://***@github.com/x.git"),
        ("https://0123456789abcdef0123456789abcdef01234567@github.com/o/r",
         "https://***@github.com/o/r"),
        ("GET https://b.s3.amazonaws.com/k?X-Amz-Signature=abc123&x=1",
         "GET https://b.s3.amazonaws.com/k?X-Amz-Signature=***&x=1"),
        ("https://a.blob.core.windows.net/c?sv=2024&sig=abc%2Bdef",
         "https://a.blob.core.windows.net/c?sv=2024&sig=***"),
        ("key sk-proj-abcdefgh12345678 used", "key *** used"),
        ("sk-ant-api03-AbCdEfGhIjKlMnOp", "***"),
        ("sk_live_AbCdEfGhIjKlMnOp1234", "***"),
        ("ghp_0123456789abcdefABCDEF0123", "***"),
        ("github_pat_11ABCDEFG0123456789_abcdefghij", "***"),
        ("hf_AbCdEfGhIjKlMnOpQrStUv", "***"),
        ("AKIAABCDEFGHIJKLMNOP and ASIAABCDEFGHIJKLMNOP", "*** and ***"),
        ("xoxb-1234-5678-abcdefgh", "***"),
        ("glpat-abcdefghij0123456789", "***"),
        ("AIzaSyA1234567890abcdefghijklmnopqrstu", "***"),
        (JWT, "***"),
        ("Authorization: Bearer abc.def-ghi_jkl.mno1234", "Authorization: Bearer ***"),
        (f"key:\n{PEM}\nend", "key:\n***\nend"),
        ("random Zq8Xw2Lm4Nb6Vc1Rt9YuPp3Oo5Ii7Uu0 key", "random *** key"),
        ("aws wJalrXUtnFEMIK7MDENGbPxRfiCY3kL9mQ2vR7tY5w", "aws ***"),
        ("--api-key=hunter2 --lr=0.1", "--api-key=*** --lr=0.1"),
        ("run.py --password hunter2 --epochs 3", "run.py --password *** --epochs 3"),
        ("DB_PASSWORD=hunter2 make", "DB_PASSWORD=*** make"),
        ("{'api_key': 'hunter2', 'lr': '0.1'}", "{'api_key': '***', 'lr': '0.1'}"),
        ('{"hf_token": "abc", "model": "gpt2"}', '{"hf_token": "***", "model": "gpt2"}'),
        ("Namespace(api_key='abc', lr=0.1, db_password=\"it's\")",
         "Namespace(api_key='***', lr=0.1, db_password=\"***\")"),
        ('run --hf-token="abc def" --lr=0.1', 'run --hf-token="***" --lr=0.1'),
        ("post to https://hooks.slack.com/services/T0/B1/abcdefghijkl now",
         "post to https://hooks.slack.com/*** now"),
        ("hooks.slack.com/workflows/abc/def", "hooks.slack.com/***"),
        ("'https://hooks.zapier.com/hooks/catch/123/abc/'", "'https://hooks.zapier.com/***'"),
        ("https://discord.com/api/webhooks/123456789/abcdefghij?wait=true",
         "https://discord.com/api/webhooks/***?wait=true"),
        ("https://acme.webhook.office.com/webhookb2/abc@def/IncomingWebhook/x/y",
         "https://acme.webhook.office.com/***"),
        ("https://n8n.example.org/webhook/6f1c2a", "https://n8n.example.org/webhook/***"),
        ("url=https://chat.example.com/hooks/xqz8a1b2c3d4e5f6g7h8i9j0kl,",
         "url=https://chat.example.com/hooks/***,"),
        ("https://ci.example.com/generic-webhook-trigger/invoke?token=abc",
         "https://ci.example.com/generic-webhook-trigger/invoke?token=***"),
    ],
    ids=["uri-password", "uri-password-with-at", "uri-user-token", "uri-user-hex-token",
         "query-signature", "query-sas", "sk", "anthropic", "stripe", "github", "github-pat",
         "hf", "aws-ids", "slack", "gitlab", "google", "jwt", "bearer", "pem", "random",
         "random-aws-secret", "name=value", "--name value", "ENV_NAME=value", "repr-pair",
         "json-pair", "repr-kwargs", "quoted-flag", "slack-webhook", "slack-no-scheme",
         "zapier", "discord", "teams", "n8n", "mattermost", "jenkins-query"],
)  # fmt: skip
def test_each_rule_masks(text, masked):
    assert mask_secrets(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "0123456789abcdef0123456789abcdef01234567",  # a git commit
        "sha256:" + "ab" * 32,
        "6bf28879-d8a8-4102-8a12-c976bc6d4775",  # a UUID
        "6BF28879-D8A8-4102-8A12-C976BC6D4775",
        "/home/ada/runs/default/ada/ada-20261202-110000-a1b2c3/metrics-rank0.jsonl",
        "/tmp/run/wandb/offline-run-20240501_120000-abc123de/run-abc123de.wandb",
        "events.out.tfevents.1714567890.host-12.12345.0",
        "s3://bucket/prefix/run",
        "sftp://ada@host:22/runs",
        "abfs://container@account.dfs.core.windows.net/prefix",
        "http://127.0.0.1:5000/b@c",
        "sqlite:///runs/mlflow.db",
        "tokenizer=gpt2 max_tokens=512 pad_token=<pad> sort_key=loss",
        "gpt2-125M-lr3e-4-bs512-warmup2000",
        "llama3-8B-lr3e4-bs1M-wd0p1-2024a",
        "nvidia/Llama-3_1-Nemotron-Ultra-253B-v1",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts",
        "ThisIsAVeryLongClassNameForTesting2",
        "sk-learn disk-io task-1 hf_hub_download",
        "2026-12-02T13:02:09+00:00",
        "loss/train/total=0.5 lr=0.001 --epochs 3",
        "Namespace(tokenizer='gpt2', pad_token='<pad>', lr=0.1)",
        "https://github.com/org/repo/tree/main/src/hooks/use_thing.ts",
        "https://docs.example.com/guide/webhooks/",
        "torch.utils.hooks.RemovableHandle",
        "see https://api.slack.com/messaging/webhooks for setup",
    ],
)
def test_ordinary_values_survive(text):
    assert mask_secrets(text) == text


def test_secret_named_environment_values_are_masked_anywhere(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "plain-value-99")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # under 6 characters: not replaced
    assert mask_secrets("connect with plain-value-99, false") == "connect with ***, false"
    assert mask_secrets("x", secrets=["x"]) == "***"


def test_values_under_secret_names_and_nested_strings():
    Point = namedtuple("Point", "url note")
    params = {"api_key": "abc", "tokenizer": "gpt2", "max_tokens": 5, "pad_token": "<pad>",
              "db": [{"password": "pw1234"}, "mysql://u:p@h/d"], "apiKey": "k",
              "pair": ("sk-AbCdEfGh0123456789xyz", 2), "at": Point("s3://a:b@c/d", "n"),
              "tags": {"hf_AbCdEfGhIjKlMnOpQrStUv"}, "lr": 0.1, "on": True, "none": None,
              "path": Path("/data/sk-AbCdEfGh0123456789xyz/x"), "plain_path": Path("/data/x")}  # fmt: skip
    original = repr(params)
    assert mask_value(params) == {
        "api_key": "***", "tokenizer": "gpt2", "max_tokens": 5, "pad_token": "<pad>",
        "db": [{"password": "***"}, "mysql://***@h/d"], "apiKey": "***",
        "pair": ("***", 2), "at": Point("s3://***@c/d", "n"), "tags": {"***"}, "lr": 0.1,
        "on": True, "none": None, "path": "/data/***/x", "plain_path": Path("/data/x")}  # fmt: skip
    assert repr(params) == original  # the caller's values are not changed


def test_tensors_are_passed_as_they_are_and_never_read(monkeypatch):
    import torch

    value = torch.ones(2)
    for method in ("__str__", "__repr__", "__format__", "item", "tolist", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, method, lambda *a, **k: pytest.fail("read"))
    assert mask_value({"w": value, "api_key": [value]}) == {"w": value, "api_key": ["***"]}
    assert mask_value({"w": value})["w"] is value


def test_command_lines():
    argv = ["train.py", "--api-key=abc123", "--hf-token", "t0k3n", "--tokenizer", "gpt2",
            "--lr", "0.1", "--password", "--verbose", "--db=postgresql://a:b@h/d"]  # fmt: skip
    assert mask_argv(argv) == ["train.py", "--api-key=***", "--hf-token", "***", "--tokenizer",
                               "gpt2", "--lr", "0.1", "--password", "--verbose",
                               "--db=postgresql://***@h/d"]  # fmt: skip


def test_masked_sys_argv_is_swapped_only_while_needed(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "--api-key", "hunter2"])
    with masked_sys_argv():
        assert sys.argv == ["train.py", "--api-key", "***"]
    assert sys.argv == ["train.py", "--api-key", "hunter2"]
    plain = ["train.py", "--lr", "0.1"]
    monkeypatch.setattr(sys, "argv", plain)
    with masked_sys_argv():
        assert sys.argv is plain


def test_user_patterns_mask_everywhere_and_can_be_removed():
    corp = add_secret_pattern(r"corp-\d{6}")
    group = add_secret_pattern(re.compile(r"badge (?P<secret>\w+) ok"))
    assert mask_secrets("id corp-123456; badge B7 ok") == "id ***; badge *** ok"
    assert mask_value({"ids": ["corp-654321"]}) == {"ids": ["***"]}
    remove_secret_pattern(corp)
    remove_secret_pattern(group.pattern)
    assert masking.secret_patterns() == ()
    assert mask_secrets("corp-123456") == "corp-123456"


@pytest.mark.parametrize(
    ("pattern", "error", "match"),
    [(5, TypeError, r"regex str or a compiled re.Pattern of str, got 5"),
     (re.compile(b"x"), TypeError, r"got re.compile\(b'x'\)"),
     ("corp-[", ValueError, r"'corp-\[' is not a valid regular expression .*To fix"),
     ("a*", ValueError, r"'a\*' matches the empty string.*To fix")],
    ids=["int", "bytes", "invalid", "empty-match"],
)  # fmt: skip
def test_bad_patterns_are_refused(pattern, error, match):
    with pytest.raises(error, match=match):
        add_secret_pattern(pattern)
    assert masking.secret_patterns() == ()


def test_mask_secrets_wants_text():
    with pytest.raises(TypeError, match=r"takes a str, got a int\. To fix, use mask_value"):
        mask_secrets(5)  # type: ignore[arg-type]


def test_error_messages_and_their_causes_are_masked():
    try:
        try:
            raise OSError("reach s3://ada:hunter2@b/x")
        except OSError as inner:
            raise ValueError("bad 'sk-AbCdEfGh0123456789xyz'") from inner
    except ValueError as exc:
        raised, masked = exc, mask_error(exc)
    assert masked is raised and type(masked) is ValueError
    assert str(masked) == "bad '***'" and str(masked.__cause__) == "reach s3://***@b/x"


# ------------------------------------------------------------- where it applies
def test_logger_masks_hyperparameters_for_every_destination():
    a, b = InMemoryLogger(), InMemoryLogger()
    params = {"db": {"url": "postgresql://admin:PASSWORD@h/db"}, "keys": ["sk-AbCdEfGh0123456789xyz"],
              "auth": {"api_key": "hunter2"}, "lr": 0.1}  # fmt: skip
    Logger(State(run_name="r"), [a, b]).log_hyperparameters(params)
    for dest in (a, b):
        assert dest.hyperparameters == {"db": {"url": "postgresql://***@h/db"}, "keys": ["***"],
                                        "auth": {"api_key": "***"}, "lr": 0.1}  # fmt: skip
    assert params["auth"]["api_key"] == "hunter2"


def test_environment_snapshot_redacts_token_shaped_values_under_innocent_names():
    env = {"OPENAI_BASE": "sk-proj-AbCdEf0123456789GhIj", "MY_API_TOKEN": "plain-secret-1",
           "NOTE": "uses plain-secret-1", "EXTRA": "--password hunter2", "WORLD_SIZE": "8"}  # fmt: skip
    assert environment_snapshot(env) == {"env__EXTRA": "--password ***", "env__NOTE": "uses ***",
                                         "env__OPENAI_BASE": "***", "env__WORLD_SIZE": "8"}  # fmt: skip


@pytest.mark.parametrize(
    "arg", ["torch_prof_remote_file_name", "torch_prof_memory_remote_file_name"]
)
@pytest.mark.parametrize(
    "uri",
    ["s3://admin:PASSWORD1@bucket/x.json", "s3://bucket/{nope}?X-Amz-Signature=PASSWORD1",
     "sftp://admin:PASSWORD1@host/{nope}", "s3://bucket/sk-PASSWORD1abcdefghijkl/{nope}"],
    ids=["password", "signature", "sftp", "token"],
)  # fmt: skip
def test_profiler_errors_never_print_a_uri_secret(arg, uri):
    from obsbus.profiler import Profiler

    for folder in (None, "traces"):
        with pytest.raises(ValueError, match=r"\*\*\*") as raised:
            Profiler(lambda state: None, torch_prof_folder=folder, **{arg: uri})
        assert "PASSWORD1" not in str(raised.value) and "***" in str(raised.value)


def test_torch_profiler_and_remote_uri_errors_are_masked():
    from obsbus.loggers._remote_folder import check_remote_uri
    from obsbus.profiler.torch_profiler import TorchProfiler

    with pytest.raises(ValueError, match=r"must end with '\.html'") as raised:
        TorchProfiler(memory_remote_file_name="s3://b/sk-PASSWORD1abcdefghijkl/{run_name}.txt")
    assert "PASSWORD1" not in str(raised.value)
    for uri in ("s3://b/sk-PASSWORD1abcdefghijkl/{bad}", "s3://a:PASSWORD1@{run_name}/x"):
        with pytest.raises(ValueError, match=r"\*\*\*") as raised:
            check_remote_uri(uri, "remote_folder")
        assert "PASSWORD1" not in str(raised.value) and "***" in str(raised.value)


def test_log_sinks_mask_warnings_errors_and_tracebacks(tmp_path, monkeypatch):
    from obsbus.log import reset_logging, setup_logging

    monkeypatch.setenv("MY_API_TOKEN", "env-secret-77")
    log = setup_logging(tmp_path, stderr=False)
    log.info("info line keeps lr=0.1")
    log.warning("could not reach postgresql://admin:PASSWORD1@db/x with env-secret-77")
    try:
        raise ValueError("bad s3://u:PASSWORD2@b/x")
    except ValueError:
        logging.getLogger("obsbus").exception("failed sk-AbCdEfGh0123456789xyz")
    reset_logging()
    text = (tmp_path / "logs" / "train" / "rank-0" / "debug.log").read_text()
    for secret in ("PASSWORD1", "PASSWORD2", "env-secret-77", "sk-AbCdEfGh"):
        assert secret not in text
    assert "postgresql://***@db/x with ***" in text and "ValueError: bad s3://***@b/x" in text
    assert "failed ***" in text and "info line keeps lr=0.1" in text


def test_a_failing_destination_is_reported_without_the_secret_in_its_error(tmp_path, caplog):
    """Plain stdlib logging (no ``setup_logging``): FailureLog masks what it reports."""
    from obsbus import LoggerDestination, Run

    uri = "https://ada:" + "hunter2" + "@tracker.example.com/api"  # not in the traceback's source

    class Unreachable(LoggerDestination):
        def log_metrics(self, metrics, step=None):
            raise ConnectionError(f"cannot reach {uri}")

    caplog.set_level(logging.INFO, logger="obsbus")
    with Run(max_duration="2ba", run_folder=tmp_path, loggers=[Unreachable()]) as run:
        for _ in run.train([[0], [1]]):
            run.log_metrics({"loss": 1.0})
    reported = "\n".join(caplog.text.splitlines())
    assert "Unreachable.log_metrics failed" in reported
    assert "tracker.example.com" in reported and "hunter2" not in reported
