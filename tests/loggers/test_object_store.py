from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from obsbus.object_store import BucketURI, build_object_store, mask_secrets, parse_bucket_uri
from obsbus.object_store.object_store import ObjectStore


@pytest.mark.parametrize(
    ("uri", "expected", "display"),
    [
        ("s3://bkt", BucketURI("s3", "bkt"), "s3://bkt"),
        ("s3://bkt/a/b/", BucketURI("s3", "bkt", "a/b"), "s3://bkt/a/b"),
        ("gs://bkt/p", BucketURI("gs", "bkt", "p"), "gs://bkt/p"),
        ("az://container/p", BucketURI("az", "container", "p"), "az://container/p"),
        (
            "abfss://c@acct.dfs.core.windows.net/p",
            BucketURI("abfss", "c", "p", account="acct"),
            "abfss://c@acct.dfs.core.windows.net/p",
        ),
        (
            "sftp://ada@Host.example:2222/data/runs",
            BucketURI("sftp", "host.example", "/data/runs", port=2222, username="ada"),
            "sftp://ada@host.example:2222/data/runs",
        ),
        ("memory://b/x", BucketURI("memory", "b", "x"), "memory://b/x"),
        (
            "file:///mnt/shared/runs",
            BucketURI("file", "", "/mnt/shared/runs"),
            "file:///mnt/shared/runs",
        ),
    ],
    ids=["s3", "s3-prefix", "gs", "az", "abfss", "sftp", "memory", "file"],
)
def test_parse_bucket_uri(uri, expected, display):
    parsed = parse_bucket_uri(uri)
    assert parsed == expected
    assert parsed.display == display
    assert parsed.object_uri("x/y.txt") == display + "/x/y.txt"


def test_a_relative_file_uri_resolves_against_the_working_directory():
    assert parse_bucket_uri("file://out/bucket").prefix == str(Path.cwd() / "out" / "bucket")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"uri": "memory://b"}, r"ObjectStore uri must be a BucketURI, got 'memory://b'\. To fix"),
    ({"uri": BucketURI("memory", "b"), "secrets": 5},
     r"ObjectStore secrets must be a list of str \(values to mask\), got 5\."),
    ({"uri": BucketURI("memory", "b"), "secrets": [None]}, r"secrets must be .*got None among"),
], ids=["uri-str", "secrets-int", "secrets-none"])
def test_a_store_checks_what_it_is_built_with(kwargs, match):
    with pytest.raises(TypeError, match=match):
        ObjectStore(**kwargs)


def test_parse_rejects_a_non_str():
    with pytest.raises(TypeError, match="bucket_uri must be a str"):
        parse_bucket_uri(Path("/tmp"))


def test_mask_secrets_in_any_text():
    text = (
        "connect sftp://ada:pw-123456@h/x then https://a.blob.core.windows.net/c?"
        "sv=2024&se=1&sig=AbC%2F&skoid=z and key AKIA-value-12"
    )
    masked = mask_secrets(text, ["AKIA-value-12"])
    assert masked == (
        "connect sftp://***@h/x then https://a.blob.core.windows.net/c?"
        "sv=2024&se=1&sig=***&skoid=z and key ***"
    )
    assert mask_secrets("http://127.0.0.1:5000/b@c") == "http://127.0.0.1:5000/b@c"


def test_store_messages_mask_environment_credentials(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value-9")
    store = build_object_store(f"memory://m-{uuid.uuid4().hex[:8]}")
    err = OSError("signature mismatch for env-secret-value-9")
    assert "env-secret-value-9" not in store.describe_error(err)


def test_describe_error_keeps_the_code_and_message_of_an_s3_reply():
    store = build_object_store(f"memory://m-{uuid.uuid4().hex[:8]}")
    exc = FileNotFoundError(
        "Object at location k not found: Error performing PUT http://127.0.0.1:1/b/k in 2ms - "
        'Server returned non-2xx status code: 404 Not Found: <?xml version="1.0"?>\n'
        "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>"
        '</Error>\n\nDebug source:\nNotFound { path: "k" }'
    )
    text = store.describe_error(exc)
    assert text.startswith("FileNotFoundError: Object at location k not found")
    assert text.endswith("404 Not Found: NoSuchBucket: The specified bucket does not exist")
    assert "Debug source" not in text


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (ConnectionResetError("reset by peer"), True),
        (TimeoutError("timed out"), True),
        (OSError("503 Service Unavailable"), True),
        (RuntimeError("SlowDown: please reduce your request rate"), True),
        (RuntimeError("HTTP error: error sending request, kind: Connect"), True),
        (FileNotFoundError("no such key"), False),
        (PermissionError("denied"), False),
        (FileExistsError("exists"), False),
        (OSError("AccessDenied: Access Denied"), False),
        (OSError("NoSuchBucket"), False),
        (RuntimeError("something unrelated"), False),
        (ValueError("bad"), False),
    ],
    ids=lambda v: v if isinstance(v, bool) else type(v).__name__ + ":" + str(v)[:20],
)
def test_transient_or_permanent(exc, transient):
    assert ObjectStore(parse_bucket_uri("memory://x")).is_transient(exc) is transient


def test_obstore_error_classes_are_classified_by_name():
    import obstore.exceptions as obstore_exceptions
    store = build_object_store("s3://bkt", {"endpoint_url": "http://127.0.0.1:9"})
    assert not store.is_transient(obstore_exceptions.AlreadyExistsError("exists"))
    assert not store.is_transient(obstore_exceptions.UnauthenticatedError("who"))
    assert store.is_transient(obstore_exceptions.GenericError("Generic S3 error: 500"))


def test_s3_store_takes_composer_names_and_allows_http_for_a_local_endpoint():
    store = build_object_store(
        "s3://bkt/pre", {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"}
    )
    config = store._store.config
    assert config["endpoint"] == "http://127.0.0.1:9" and config["region"] == "eu-west-1"
    assert str(store._store.client_options["allow_http"]).lower() == "true"
    with pytest.raises(ValueError, match="upload_chunk_size must be >= 5 MiB"):
        build_object_store("s3://bkt", {"upload_chunk_size": 1024})


def test_local_store_writes_atomically_and_refuses_to_overwrite(tmp_path):
    store = build_object_store(f"file://{tmp_path}/bucket")
    src = tmp_path / "src.txt"
    src.write_text("one")
    store.upload(src, "a/b.txt", overwrite=False)
    src.write_text("two")
    with pytest.raises(FileExistsError, match=r"a/b\.txt already exists and overwrite=False"):
        store.upload(src, "a/b.txt", overwrite=False)
    assert (tmp_path / "bucket/a/b.txt").read_text() == "one"
    store.upload(src, "a/b.txt", overwrite=True)
    assert (tmp_path / "bucket/a/b.txt").read_text() == "two"
    assert os.listdir(tmp_path / "bucket/a") == ["b.txt"]  # no temporary files left
    assert store.size("a/b.txt") == 3 and store.size("nope") is None
    seen = []
    store.download("a/b.txt", tmp_path / "back.txt", lambda done, total: seen.append((done, total)))
    assert (tmp_path / "back.txt").read_text() == "two" and seen == [(3, 3)]
    with pytest.raises(ValueError, match="leaves"):
        store.upload(src, "../outside.txt", overwrite=True)


def test_file_and_memory_take_no_backend_kwargs():
    with pytest.raises(ValueError, match="takes no backend_kwargs"):
        build_object_store("memory://b", {"endpoint_url": "x"})


def test_building_a_store_imports_only_its_backend(monkeypatch):
    for name in ("obstore", "sshfs"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    build_object_store(f"memory://m-{uuid.uuid4().hex[:8]}")
    assert "obstore" not in sys.modules and "sshfs" not in sys.modules
