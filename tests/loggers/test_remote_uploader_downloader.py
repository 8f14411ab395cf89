from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch.nn.functional as F

from obsbus import Callback, State, Trainer
from obsbus.loggers import FileLogger
from obsbus.loggers.remote_uploader_downloader import (
    RemoteUploaderDownloader,
    UploadError,
    maybe_create_remote_uploader_downloader_from_uri,
    parse_uri,
)
from obsbus.profiler import JSONTraceHandler, Profiler, ProfilerAction

from ..helpers import regression_data, tiny_model
from ._s3_server import SECRET_KEY

FAST = {"initial_backoff": 0.01, "max_backoff": 0.05}


@pytest.fixture(autouse=True)
def _staging_in_tmp_path(tmp_path, monkeypatch):
    """Default staging folders (tempfile.mkdtemp) go under the test's tmp_path."""
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def memory_uri() -> str:
    return f"memory://t-{uuid.uuid4().hex[:10]}"


def write(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def flaky(rud, errors):
    """Make the store raise each of ``errors`` once, in order, then work; returns the calls."""
    real, calls = rud.store.upload, []

    def upload(local, name, *, overwrite):
        calls.append(name)
        if errors:
            raise errors.pop(0)
        real(local, name, overwrite=overwrite)

    rud.store.upload = upload
    return calls


def slow(rud, seconds, gate=None):
    real = rud.store.upload

    def upload(local, name, *, overwrite):
        if gate is not None:
            gate.wait(10)
        time.sleep(seconds)
        real(local, name, overwrite=overwrite)

    rud.store.upload = upload


# ------------------------------------------------------------ construction
@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("my-bucket/path", "has no scheme"),
        ("ftp://host/x", "unsupported scheme 'ftp'"),
        ("s3://", "names no bucket"),
        ("gs:///only/a/prefix", "names no bucket"),
        ("sftp:///folder", "names no host"),
        ("abfs://@.dfs.core.windows.net/x", "names no container or account"),
    ],
    ids=["no-scheme", "unknown-scheme", "s3-no-bucket", "gs-no-bucket", "sftp-no-host", "abfs"],
)
def test_a_bad_uri_fails_at_construction_listing_the_schemes(uri, message):
    with pytest.raises(ValueError, match=message) as info:
        RemoteUploaderDownloader(uri)
    if "scheme" in message:
        for scheme in ("file://", "memory://", "s3://", "gs://", "az://", "abfs://", "sftp://"):
            assert scheme in str(info.value)


@pytest.mark.parametrize(
    "uri",
    [
        "sftp://ada:hunter2-pw-123@host/x",
        "s3://AKIAXX:wJalr-secret-99@bucket/x",
        "az://container/x?sv=2024&sig=abc-secret-sig",
    ],
    ids=["sftp-password", "s3-keys", "sas-token"],
)
def test_credentials_in_a_uri_are_refused_and_masked(uri):
    with pytest.raises(ValueError, match=r"credentials|query") as info:
        RemoteUploaderDownloader(uri)
    text = str(info.value)
    assert "***" in text
    assert not any(s in text for s in ("hunter2-pw-123", "wJalr-secret-99", "abc-secret-sig"))


def test_secrets_in_backend_kwargs_are_refused():
    with pytest.raises(ValueError, match=r"backend_kwargs\['aws_secret_access_key'\].*environment"):
        RemoteUploaderDownloader("s3://bucket", {"aws_secret_access_key": "x"})


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_attempts": 0}, ValueError, "num_attempts must be a whole number >= 1, got 0"),
        ({"num_concurrent_uploads": True}, TypeError,
         "num_concurrent_uploads must be a whole number >= 1, got True"),
        (
            {"file_path_format_string": "{run}/{remote_file_name}"},
            ValueError,
            "unknown placeholder {run}",
        ),
        ({"include": [""]}, ValueError, "include must be glob patterns .*the empty pattern ''"),
        ({"include": 5}, TypeError, r"include must be glob patterns \(str\): one, a list .*got 5"),
        ({"exclude": [3]}, TypeError, r"exclude must be glob patterns .*got 3 among \[3\]"),
        ({"close_timeout": float("nan")}, ValueError,
         "close_timeout must be a finite number of seconds > 0, got nan"),
        ({"close_timeout": float("inf")}, ValueError, "close_timeout must be a finite .*got inf"),
        ({"close_timeout": 0}, ValueError, "close_timeout must be a finite .*> 0, got 0"),
        ({"initial_backoff": float("nan")}, ValueError, "initial_backoff must be .*got nan"),
        ({"initial_backoff": float("inf")}, ValueError, "initial_backoff must be .*got inf"),
        ({"initial_backoff": 0}, ValueError, "initial_backoff must be .*> 0, got 0"),
        ({"max_backoff": float("nan")}, ValueError, "max_backoff must be .*got nan"),
        ({"max_backoff": float("inf")}, ValueError, "max_backoff must be .*got inf"),
        ({"max_backoff": 0.0}, ValueError, "max_backoff must be .*> 0, got 0.0"),
        ({"max_backoff": "1"}, TypeError, "max_backoff must be a finite number .*got '1'"),
        ({"progress_bar": "false"}, TypeError, "progress_bar must be True or False, got 'false'"),
        ({"upload_staging_folder": 5}, TypeError, "upload_staging_folder must be a folder path"),
        ({"use_procs": "false"}, TypeError, "use_procs must be True or False, got 'false'"),
    ],
    ids=["attempts", "workers", "placeholder", "pattern", "pattern-int", "pattern-item",
         "timeout-nan", "timeout-inf", "timeout-0", "backoff-nan", "backoff-inf", "backoff-0",
         "max-backoff-nan", "max-backoff-inf", "max-backoff-0", "max-backoff-str", "bar-str",
         "staging-int", "procs-str"],
)
def test_bad_arguments_fail_at_construction(kwargs, error, message):
    with pytest.raises(error, match=message):
        RemoteUploaderDownloader(memory_uri(), **kwargs)


def test_a_file_for_the_staging_folder_fails_at_construction(tmp_path, monkeypatch):
    (tmp_path / "staging").write_text("a file")
    with pytest.raises(NotADirectoryError, match=r"upload_staging_folder must be a folder, and "
                       + repr(str(tmp_path / "staging"))):
        RemoteUploaderDownloader(memory_uri(), upload_staging_folder=tmp_path / "staging")
    monkeypatch.chdir(tmp_path)  # a relative one is relative to the working directory
    with pytest.raises(ValueError, match="is an existing file"):
        RemoteUploaderDownloader(memory_uri(), upload_staging_folder="staging")


def test_maybe_create_checks_its_arguments():
    with pytest.raises(TypeError, match=r"loggers must be a list of LoggerDestination, got 5"):
        maybe_create_remote_uploader_downloader_from_uri("memory://b/x", 5)
    with pytest.raises(TypeError, match=r"uri must be a non-empty str, got None"):
        maybe_create_remote_uploader_downloader_from_uri(None, [])
    with pytest.raises(ValueError, match=r"uri 'nope://\*\*\*@h/x': .*unsupported scheme"):
        maybe_create_remote_uploader_downloader_from_uri("nope://u:pw@h/x", [])


@pytest.mark.parametrize(
    ("uri", "module", "extra"),
    [
        ("s3://b", "obstore", "s3"),
        ("gs://b", "obstore", "gcs"),
        ("az://c", "obstore", "azure"),
        ("sftp://u@host/x", "sshfs", "sftp"),
    ],
    ids=["s3", "gcs", "azure", "sftp"],
)
def test_a_missing_backend_names_its_extra(monkeypatch, uri, module, extra):
    monkeypatch.setitem(__import__("sys").modules, module, None)
    with pytest.raises(ImportError, match=rf"pip install 'obsbus\[{extra}\]'"):
        RemoteUploaderDownloader(uri)


def test_gcs_and_azure_stores_are_built_through_obstore_without_a_server(monkeypatch):
    # Construction only: no GCS or Azure emulator here, so transfers are not verified.
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    gcs = RemoteUploaderDownloader("gs://my-bucket/runs")
    assert type(gcs.store).__name__ == "ObstoreObjectStore"
    assert repr(gcs.store._store) == 'GCSStore(bucket="my-bucket", prefix="runs")'
    assert gcs.get_uri_for_file("a/b.txt") == "gs://my-bucket/runs/a/b.txt"
    abfs = RemoteUploaderDownloader("abfs://ckpts@myacct.dfs.core.windows.net/exp")
    assert 'account_name="myacct"' in repr(abfs.store._store)
    assert (abfs.remote_backend_name, abfs.remote_bucket_name) == ("abfs", "ckpts")
    with pytest.raises(ValueError, match=r"Account must be specified.*AZURE_STORAGE_ACCOUNT_NAME"):
        RemoteUploaderDownloader("az://ckpts")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "envacct")
    az = RemoteUploaderDownloader("az://ckpts/exp")
    assert 'account_name="envacct"' in repr(az.store._store)
    with pytest.raises(ValueError, match="not valid for store 'S3'"):
        RemoteUploaderDownloader("s3://bucket", {"no_such_option": 1})


# --------------------------------------------------------- upload semantics
def test_upload_stages_a_copy_so_the_caller_may_change_or_delete_the_file(tmp_path):
    rud = RemoteUploaderDownloader(f"file://{tmp_path}/bucket", **FAST)
    state = State(run_name="r")
    src = write(tmp_path / "ckpt.pt", b"v1")
    gate = threading.Event()
    slow(rud, 0, gate)
    rud.upload_file(state, "ckpt.pt", src)
    src.write_bytes(b"changed after the call")
    src.unlink()
    gate.set()
    assert rud.wait_for_uploads(10)
    assert (tmp_path / "bucket" / "ckpt.pt").read_bytes() == b"v1"
    rud.post_close()
    assert rud.failed_uploads == []
    assert rud.staging_folder is None  # the temporary staging folder is gone


def test_upload_file_never_waits_for_a_slow_store(tmp_path):
    rud = RemoteUploaderDownloader(memory_uri(), **FAST)
    slow(rud, 0.2)
    state = State(run_name="r")
    src = write(tmp_path / "f.bin", b"x" * 1000)
    start = time.perf_counter()
    for i in range(20):
        rud.upload_file(state, f"f{i}.bin", src)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, elapsed  # 20 x 0.2 s of uploading happens in the background
    assert rud.wait_for_uploads(30)
    assert sorted(rud.store.objects) == sorted(f"f{i}.bin" for i in range(20))


def test_latest_wins_among_waiting_and_retrying_uploads(tmp_path):
    rud = RemoteUploaderDownloader(memory_uri(), num_concurrent_uploads=1, num_attempts=3, **FAST)
    calls = flaky(rud, [ConnectionResetError("reset by peer")])
    state = State(run_name="r")
    for i in range(30):
        rud.upload_file(
            state, "logs.txt", write(tmp_path / "logs.txt", f"v{i}".encode()), overwrite=True
        )
    assert rud.wait_for_uploads(10)
    assert rud.store.objects["logs.txt"] == b"v29"
    assert len(calls) < 30  # superseded copies were dropped, not uploaded
    assert rud._queue.superseded + len(calls) >= 30
    assert list((rud.staging_folder).iterdir()) == []


def test_transient_errors_are_retried_with_backoff_and_arrive(tmp_path):
    rud = RemoteUploaderDownloader(
        memory_uri(), num_attempts=4, initial_backoff=0.05, max_backoff=1.0
    )
    calls = flaky(
        rud,
        [
            ConnectionResetError("connection reset"),
            TimeoutError("timed out"),
            OSError("503 Service Unavailable: SlowDown"),
        ],
    )
    start = time.perf_counter()
    rud.upload_file(State(run_name="r"), "a.txt", write(tmp_path / "a.txt", b"data"))
    assert rud.wait_for_uploads(10)
    # Backoff doubles from 0.05 s with jitter in [0.5, 1]: at least 0.025 + 0.05 + 0.1.
    assert time.perf_counter() - start >= 0.17
    assert calls == ["a.txt"] * 4
    assert rud.store.objects["a.txt"] == b"data"
    assert rud.failed_uploads == []


def test_permanent_errors_fail_fast_with_the_message_and_name(tmp_path):
    rud = RemoteUploaderDownloader(memory_uri(), num_attempts=5, **FAST)
    calls = flaky(rud, [PermissionError("AccessDenied: Access Denied")])
    src = write(tmp_path / "ckpt.pt", b"w")
    rud.upload_file(State(run_name="r"), "ckpt.pt", src)
    assert rud.wait_for_uploads(10)
    assert calls == ["ckpt.pt"]
    [failure] = rud.failed_uploads
    assert failure.remote_file_name == "ckpt.pt" and failure.source == src
    assert failure.uri.endswith("/ckpt.pt") and failure.attempts == 1
    assert "AccessDenied: Access Denied" in failure.reason and "permanent" in failure.reason
    assert failure.staged_path.read_bytes() == b"w"
    with pytest.raises(UploadError, match=r"1 upload\(s\) failed:\n  - memory://.*ckpt.pt"):
        rud.check_uploads()
    rud.check_uploads()  # raised once only


def test_overwrite_false_refuses_an_existing_object(tmp_path):
    rud = RemoteUploaderDownloader(memory_uri(), **FAST)
    state = State(run_name="r")
    rud.upload_file(state, "ckpt.pt", write(tmp_path / "a", b"first"))
    rud.wait_for_uploads(10)
    rud.upload_file(state, "ckpt.pt", write(tmp_path / "b", b"second"), overwrite=False)
    rud.wait_for_uploads(10)
    with pytest.raises(UploadError, match=r"ckpt\.pt already exists and overwrite=False refuses"):
        rud.check_uploads()
    assert rud.store.objects["ckpt.pt"] == b"first"
    rud.upload_file(state, "ckpt.pt", write(tmp_path / "c", b"third"), overwrite=True)
    rud.wait_for_uploads(10)
    assert rud.store.objects["ckpt.pt"] == b"third"


def test_routing_by_pattern_and_placeholders(tmp_path):
    traces = RemoteUploaderDownloader(
        memory_uri(),
        include="*/traces/*",
        file_path_format_string="{run_name}/rank{rank}/{remote_file_name}",
    )
    ckpts = RemoteUploaderDownloader(memory_uri(), include=["*.pt"], exclude="*tmp*")
    rest = RemoteUploaderDownloader(memory_uri(), exclude=["*/traces/*", "*.pt"])
    state = State(run_name="exp")
    src = write(tmp_path / "f", b"x")
    for dest in (traces, ckpts, rest):
        for name in ("exp/traces/ep0.json", "exp/ckpt.pt", "exp/tmp.pt", "exp/logs.txt"):
            dest.upload_file(state, name, src)
        dest.wait_for_uploads(10)
    assert list(traces.store.objects) == ["exp/rank0/exp/traces/ep0.json"]
    assert list(ckpts.store.objects) == ["exp/ckpt.pt"]
    assert list(rest.store.objects) == ["exp/logs.txt"]
    with pytest.raises(ValueError, match="not a valid object name"):
        rest.upload_file(state, "../escape.txt", src)


def test_a_full_backlog_makes_the_caller_wait_and_says_so(tmp_path, caplog):
    rud = RemoteUploaderDownloader(
        memory_uri(), num_concurrent_uploads=1, max_pending_uploads=2, **FAST
    )
    slow(rud, 0.05)
    src = write(tmp_path / "f", b"x")
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        for i in range(6):
            rud.upload_file(State(run_name="r"), f"f{i}", src)
    assert rud.wait_for_uploads(10)
    assert len(rud.store.objects) == 6  # nothing dropped
    assert rud._queue.blocked_puts >= 1
    assert "the caller waits for room" in caplog.text


def test_close_waits_reports_each_failure_and_a_second_close_is_a_no_op(tmp_path, caplog):
    rud = RemoteUploaderDownloader(memory_uri(), num_attempts=2, **FAST)
    flaky(rud, [ConnectionResetError("reset")] * 4)
    state = State(run_name="r")
    for name in ("a.txt", "b.txt"):
        rud.upload_file(state, name, write(tmp_path / name, name.encode()))
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        rud.close(state, None)
        rud.post_close()
    assert sorted(f.remote_file_name for f in rud.failed_uploads) == ["a.txt", "b.txt"]
    assert "2 file(s) did not reach the store" in caplog.text
    for failure in rud.failed_uploads:
        assert "still failing after 2 attempts" in failure.reason
        assert failure.staged_path.exists() and str(failure.staged_path) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        rud.close(state, None)
        rud.post_close()
    assert caplog.text == ""
    # Still usable after close.
    rud.upload_file(state, "c.txt", write(tmp_path / "c.txt", b"c"))
    assert rud.wait_for_uploads(10)
    assert rud.store.objects["c.txt"] == b"c"


def test_close_timeout_gives_up_with_the_staged_copies_kept(tmp_path):
    rud = RemoteUploaderDownloader(
        memory_uri(), num_concurrent_uploads=1, close_timeout=0.3, **FAST
    )
    gate = threading.Event()
    slow(rud, 0, gate)
    state = State(run_name="r")
    for name in ("a", "b", "c"):
        rud.upload_file(state, name, write(tmp_path / name, name.encode()))
    rud.close(state, None)
    reasons = {f.remote_file_name: f.reason for f in rud.failed_uploads}
    assert set(reasons) == {"b", "c"}  # "a" is running; it finishes in the background
    assert all("close_timeout=0s" in r or "close_timeout" in r for r in reasons.values())
    assert all(
        f.staged_path.read_bytes() == f.remote_file_name.encode() for f in rud.failed_uploads
    )
    gate.set()
    assert rud.wait_for_uploads(10)
    assert rud.store.objects == {"a": b"a"}


def test_download_for_a_resume(tmp_path):
    uri = memory_uri()
    writer = RemoteUploaderDownloader(uri, file_path_format_string="{run_name}/{remote_file_name}")
    slow(writer, 0.2)
    state = State(run_name="r")
    writer.upload_file(state, "ckpt.pt", write(tmp_path / "ckpt.pt", b"weights"))
    writer._state = state
    # The upload is still running: the download waits for it.
    writer.download_file("ckpt.pt", str(tmp_path / "restored" / "ckpt.pt"))
    assert (tmp_path / "restored" / "ckpt.pt").read_bytes() == b"weights"
    with pytest.raises(FileExistsError, match="overwrite=True"):
        writer.download_file("ckpt.pt", str(tmp_path / "restored" / "ckpt.pt"))
    # Another process (a restarted run) reads the same bucket.
    reader = RemoteUploaderDownloader(uri)
    reader.download_file("r/ckpt.pt", str(tmp_path / "restored" / "ckpt.pt"), overwrite=True)
    assert (tmp_path / "restored" / "ckpt.pt").read_bytes() == b"weights"
    with pytest.raises(FileNotFoundError, match=r"memory://t-.*/missing.pt does not exist"):
        reader.download_file("missing.pt", str(tmp_path / "m.pt"))
    assert not (tmp_path / "m.pt").exists()
    assert [p.name for p in (tmp_path / "restored").iterdir()] == ["ckpt.pt"]


def test_uploads_queued_before_a_crash_still_arrive_without_close(tmp_path):
    class Crash(Callback):
        def batch_end(self, state, logger):
            path = write(tmp_path / f"ckpt{state.timestamp.batch.value}.pt", b"w")
            logger.upload_file(f"ckpt{state.timestamp.batch.value}.pt", path)
            if state.timestamp.batch >= "3ba":
                raise RuntimeError("crash")

    rud = RemoteUploaderDownloader(memory_uri(), **FAST)
    slow(rud, 0.1)
    trainer = Trainer(
        tiny_model(),
        regression_data(4),
        "1ep",
        loss_fn=F.mse_loss,
        callbacks=[Crash()],
        loggers=[rud],
        device="cpu",
        run_folder=tmp_path / "run",
        run_name="r",
    )
    with pytest.raises(RuntimeError, match="crash"):
        trainer.fit()
    # No close: the exception event waited for what was queued.
    assert sorted(rud.store.objects) == ["ckpt1.pt", "ckpt2.pt", "ckpt3.pt"]
    trainer.close()


def test_uri_helpers_create_one_uploader_per_bucket():
    assert parse_uri("s3://bkt/run/logs.txt") == ("s3", "bkt", "run/logs.txt")
    assert parse_uri("runs/logs.txt") == ("", "", "runs/logs.txt")
    assert maybe_create_remote_uploader_downloader_from_uri("runs/logs.txt", []) is None
    loggers = [FileLogger()]
    rud = maybe_create_remote_uploader_downloader_from_uri("s3://bkt/{run_name}/x.txt", loggers)
    assert isinstance(rud, RemoteUploaderDownloader) and rud.bucket_uri == "s3://bkt"
    loggers.append(rud)
    assert maybe_create_remote_uploader_downloader_from_uri("s3://bkt/other.txt", loggers) is None
    other = maybe_create_remote_uploader_downloader_from_uri("s3://other-bkt/a", loggers)
    assert other is not None and other.remote_bucket_name == "other-bkt"
    with pytest.raises(ValueError, match="unsupported scheme 'wandb'"):
        maybe_create_remote_uploader_downloader_from_uri("wandb://project/x", loggers)


def test_a_component_given_a_uri_routes_its_files_through_the_helper(tmp_path):
    """The pattern FileLogger/JSONTraceHandler use for an ``s3://...`` path, end to end."""

    class Writes(Callback):
        def __init__(self, uri):
            self.uri = uri

        def fit_end(self, state, logger):
            path = write(tmp_path / "model.pt", b"trained")
            logger.upload_file(logger.format_name(parse_uri(self.uri)[2]), path)

    uri = f"{memory_uri()}/{{run_name}}/model.pt"
    loggers = []
    rud = maybe_create_remote_uploader_downloader_from_uri(uri, loggers)
    loggers.append(rud)
    with Trainer(
        tiny_model(),
        regression_data(2),
        "1ep",
        loss_fn=F.mse_loss,
        callbacks=[Writes(uri)],
        loggers=loggers,
        device="cpu",
        run_folder=tmp_path / "run",
        run_name="exp",
    ) as trainer:
        trainer.fit()
    assert rud.store.objects == {"exp/model.pt": b"trained"}


# ------------------------------------------------------------------- S3 (moto)
def s3_uploader(server, bucket, **kwargs):
    kwargs = {**FAST, **kwargs}
    return RemoteUploaderDownloader(f"s3://{bucket}", {"endpoint_url": server.endpoint}, **kwargs)


def save_at_batches_2_and_4(state):
    return (
        ProfilerAction.ACTIVE_AND_SAVE
        if state.timestamp.batch.value in (2, 4)
        else ProfilerAction.ACTIVE
    )


class SavesCheckpoint(Callback):
    def __init__(self, folder):
        self.folder = folder

    def epoch_end(self, state, logger):
        path = write(
            self.folder / f"ep{state.timestamp.epoch.value}.pt",
            f"weights at {state.timestamp.batch}".encode() * 1000,
        )
        logger.upload_file("{run_name}/checkpoints/" + path.name, path)


def run_and_collect(tmp_path, rud, extra_loggers=()):
    files = FileLogger(flush_interval=2)
    trainer = Trainer(
        tiny_model(),
        regression_data(4),
        "2ep",
        loss_fn=F.mse_loss,
        callbacks=[SavesCheckpoint(tmp_path / "ckpts")],
        loggers=[files, *extra_loggers, rud],
        device="cpu",
        profiler=Profiler(save_at_batches_2_and_4, [JSONTraceHandler()]),
        run_folder=tmp_path / "run",
        run_name="exp",
        strict=True,
    )
    with trainer:
        trainer.fit()
    run = tmp_path / "run"
    expected = {f"exp/{p.name}": p.read_bytes() for p in files.paths}
    expected.update({f"exp/traces/{p.name}": p.read_bytes() for p in (run / "traces").iterdir()})
    expected.update(
        {f"exp/checkpoints/{p.name}": p.read_bytes() for p in (tmp_path / "ckpts").iterdir()}
    )
    return expected


def test_a_trainer_run_lands_in_s3_with_the_right_names_and_bytes(s3, tmp_path):
    bucket = s3.new_bucket()
    rud = s3_uploader(s3, bucket)
    expected = run_and_collect(tmp_path, rud)
    assert {
        "exp/logs-rank0.txt",
        "exp/metrics-rank0.jsonl",
        "exp/traces/merged_trace.json",
        "exp/checkpoints/ep1.pt",
        "exp/checkpoints/ep2.pt",
    } <= set(expected)
    assert sorted(k for k in expected if k.startswith("exp/traces/ep")) == [
        "exp/traces/ep1-ba3-rank0.json",
        "exp/traces/ep2-ba5-rank0.json",
    ]
    assert s3.objects(bucket) == expected
    assert json.loads(expected["exp/metrics-rank0.jsonl"].splitlines()[-1])["step"] == 8
    assert rud.failed_uploads == []


def test_tensorboard_event_files_arrive_in_s3(s3, tmp_path):
    from obsbus.loggers import tensorboard_logger as tb
    bucket = s3.new_bucket()
    rud = s3_uploader(s3, bucket)
    expected = run_and_collect(tmp_path, rud, [tb.TensorboardLogger()])
    objects = s3.objects(bucket)
    events = {k: v for k, v in objects.items() if k.startswith("exp/tensorboard/")}
    assert events and all("tfevents" in k for k in events)
    for key, data in events.items():
        assert (tmp_path / "run" / "tensorboard" / key.rsplit("/", 1)[1]).read_bytes() == data
    assert {k: objects[k] for k in expected} == expected


def test_latest_wins_100_rapid_uploads_of_one_name(s3, tmp_path):
    bucket = s3.new_bucket()
    rud = s3_uploader(s3, bucket)
    state = State(run_name="r")
    src = tmp_path / "latest.txt"
    for i in range(100):
        src.write_bytes(f"version {i}".encode())
        rud.upload_file(state, "r/latest.txt", src, overwrite=True)
    assert rud.wait_for_uploads(30)
    assert s3.objects(bucket) == {"r/latest.txt": b"version 99"}


def test_large_files_go_multipart_and_download_whole(s3, tmp_path):
    bucket = s3.new_bucket()
    rud = s3_uploader(s3, bucket, file_path_format_string="big/{remote_file_name}")
    data = bytes(range(256)) * (48 << 12)  # 12 MiB: more than one 8 MiB part
    rud.upload_file(State(run_name="r"), "blob.bin", write(tmp_path / "blob.bin", data))
    assert rud.wait_for_uploads(60)
    assert "-" in s3.etag(bucket, "big/blob.bin")  # a multipart upload's ETag
    rud.download_file("blob.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == data


def test_s3_server_stopped_mid_run_and_started_again(s3, tmp_path):
    bucket = s3.new_bucket()
    rud = s3_uploader(s3, bucket, num_attempts=60, initial_backoff=0.05, max_backoff=0.2)

    class Outage(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch.value == 2:
                s3.stop()
                threading.Timer(1.0, s3.start).start()

    expected = run_and_collect_with(tmp_path, rud, Outage())
    assert rud.failed_uploads == []
    assert rud._queue.retries > 0  # the outage was hit, and outlasted
    assert s3.objects(bucket) == expected


def run_and_collect_with(tmp_path, rud, callback):
    files = FileLogger(flush_interval=1)
    trainer = Trainer(
        tiny_model(),
        regression_data(4),
        "1ep",
        loss_fn=F.mse_loss,
        callbacks=[callback, SavesCheckpoint(tmp_path / "ckpts")],
        loggers=[files, rud],
        device="cpu",
        run_folder=tmp_path / "run",
        run_name="exp",
    )
    with trainer:
        trainer.fit()
    expected = {f"exp/{p.name}": p.read_bytes() for p in files.paths}
    expected["exp/checkpoints/ep1.pt"] = (tmp_path / "ckpts" / "ep1.pt").read_bytes()
    return expected


def test_s3_server_stopped_for_good(s3, tmp_path, caplog):
    bucket = s3.new_bucket()
    rud = s3_uploader(s3, bucket, num_attempts=2)

    class Down(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch.value == 1:
                s3.stop()

    with caplog.at_level(logging.ERROR, logger="obsbus"):
        expected = run_and_collect_with(tmp_path, rud, Down())  # training finishes
    failed = {f.remote_file_name: f for f in rud.failed_uploads}
    assert set(expected) <= set(failed)
    # At fit_end and at close: every failed file, by name, with where its copy is.
    report = "\n".join(
        r.getMessage() for r in caplog.records if "did not reach the store" in r.getMessage()
    )
    for name, failure in failed.items():
        assert failure.uri == f"s3://{bucket}/{name}"
        assert "still failing after 2 attempts" in failure.reason
        assert f"s3://{bucket}/{name}" in report and str(failure.staged_path) in report
    # The newest staged copy of each file is kept, with the bytes on disk at close.
    newest = {}
    for failure in rud.failed_uploads:
        newest[failure.remote_file_name] = failure.staged_path
    assert {
        name: path.read_bytes() for name, path in newest.items() if name in expected
    } == expected


def test_s3_no_such_bucket_fails_fast_with_the_store_message(s3, tmp_path):
    rud = s3_uploader(s3, "no-such-bucket-here", num_attempts=5)
    rud.upload_file(State(run_name="r"), "x.txt", write(tmp_path / "x.txt", b"x"))
    assert rud.wait_for_uploads(10)
    [failure] = rud.failed_uploads
    assert failure.attempts == 1
    assert "NoSuchBucket: The specified bucket does not exist" in failure.reason


def test_s3_overwrite_false_on_an_existing_object_raises_clearly(s3, tmp_path):
    bucket = s3.new_bucket()
    s3.client().put_object(Bucket=bucket, Key="exp/checkpoints/ep1.pt", Body=b"earlier run")
    rud = s3_uploader(s3, bucket)

    class Save(Callback):
        def epoch_end(self, state, logger):
            path = write(tmp_path / "ep1.pt", b"this run")
            logger.upload_file("{run_name}/checkpoints/ep1.pt", path, overwrite=False)

    trainer = Trainer(
        tiny_model(),
        regression_data(2),
        "1ep",
        loss_fn=F.mse_loss,
        callbacks=[Save()],
        loggers=[rud],
        device="cpu",
        run_folder=tmp_path / "run",
        run_name="exp",
        strict=True,
    )
    with pytest.raises(
        Exception,
        match=rf"s3://{bucket}/exp/checkpoints/ep1.pt already exists "
        r"and overwrite=False refuses to replace it\. To fix",
    ):
        trainer.fit()
    trainer.close()
    assert s3.objects(bucket) == {"exp/checkpoints/ep1.pt": b"earlier run"}


def test_no_secret_reaches_any_log_line(s3, tmp_path, capsys, monkeypatch):
    from obsbus.log import reset_logging, setup_logging

    monkeypatch.setenv("OBSBUS_SFTP_PASSWORD", "sftp-secret-Qw3")
    setup_logging(tmp_path / "logs", module="train")
    try:
        bucket = s3.new_bucket()
        rud = s3_uploader(s3, bucket, num_attempts=2)
        rud.upload_file(State(run_name="r"), "a.txt", write(tmp_path / "a.txt", b"a"))
        rud.wait_for_uploads(10)
        s3.stop()
        rud.upload_file(State(run_name="r"), "b.txt", write(tmp_path / "b.txt", b"b"))
        rud.close(State(run_name="r"), None)
        rud.post_close()
        with pytest.raises(ValueError, match="embeds credentials") as info:
            RemoteUploaderDownloader("sftp://u:sftp-secret-Qw3@host/x")
    finally:
        reset_logging()
    assert [f.remote_file_name for f in rud.failed_uploads] == ["b.txt"]
    captured = capsys.readouterr()
    files = [p.read_text() for p in (tmp_path / "logs").rglob("*.log")]
    assert any("did not reach the store" in t and "b.txt" in t for t in files)
    assert "did not reach the store" in captured.err
    texts = [
        captured.out,
        captured.err,
        str(info.value),
        repr(rud),
        *(str(f) for f in rud.failed_uploads),
        *files,
    ]
    for text in texts:
        assert SECRET_KEY not in text and "sftp-secret-Qw3" not in text


# --------------------------------------------------------------------- SFTP
@pytest.fixture
def sftp(tmp_path, monkeypatch):
    from ._sftp_server import PASSWORD, SFTPServer

    monkeypatch.setenv("OBSBUS_SFTP_PASSWORD", PASSWORD)
    root = tmp_path / "sftp-root"
    root.mkdir()
    server = SFTPServer(root).start()
    yield server
    server.stop()


def test_a_trainer_run_lands_over_sftp_with_the_right_names_and_bytes(sftp, tmp_path):
    from ._sftp_server import PASSWORD, USERNAME

    rud = RemoteUploaderDownloader(
        f"sftp://{USERNAME}@127.0.0.1:{sftp.port}/uploads", {"known_hosts": None}, **FAST
    )
    expected = run_and_collect(tmp_path, rud)
    root = sftp.root / "uploads"
    landed = {
        p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
    }
    assert landed == expected
    assert rud.failed_uploads == []
    rud.download_file("exp/checkpoints/ep2.pt", str(tmp_path / "back.pt"))
    assert (tmp_path / "back.pt").read_bytes() == expected["exp/checkpoints/ep2.pt"]
    assert PASSWORD not in repr(rud) + rud.bucket_uri


def test_sftp_wrong_password_fails_fast(sftp, tmp_path, monkeypatch):
    from ._sftp_server import USERNAME

    monkeypatch.setenv("OBSBUS_SFTP_PASSWORD", "wrong-password-1")
    rud = RemoteUploaderDownloader(
        f"sftp://{USERNAME}@127.0.0.1:{sftp.port}/uploads",
        {"known_hosts": None},
        num_attempts=4,
        **FAST,
    )
    rud.upload_file(State(run_name="r"), "x.txt", write(tmp_path / "x.txt", b"x"))
    assert rud.wait_for_uploads(20)
    [failure] = rud.failed_uploads
    assert failure.attempts == 1 and "Permission denied for user obsbus" in failure.reason
    assert "wrong-password-1" not in failure.reason


_EXIT_SCRIPT = """
import sys, time
from pathlib import Path
from obsbus import State
from obsbus.loggers.remote_uploader_downloader import RemoteUploaderDownloader

folder, mode = sys.argv[1], sys.argv[2]
rud = RemoteUploaderDownloader(f"file://{folder}/bucket", close_timeout=1.0,
                               num_attempts=1000, initial_backoff=0.05, max_backoff=0.1)
real = rud.store.upload

def upload(local, name, *, overwrite):
    time.sleep(0.2)
    if mode == "down":
        raise ConnectionResetError("connection reset by peer")
    real(local, name, overwrite=overwrite)

rud.store.upload = upload
src = Path(folder) / "src.txt"
src.write_text("payload")
for i in range(3):
    rud.upload_file(State(run_name="r"), f"f{i}.txt", src)
print("main thread done", flush=True)  # no close(): the program just ends
"""


@pytest.mark.parametrize("mode", ["up", "down"])
def test_a_program_that_ends_without_close_still_uploads_what_was_queued(tmp_path, mode):
    import subprocess
    import sys

    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, str(tmp_path), mode],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env={**__import__("os").environ, "TMPDIR": str(tmp_path)},  # staging under tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    landed = sorted(p.name for p in (tmp_path / "bucket").glob("*.txt"))
    if mode == "up":
        assert landed == ["f0.txt", "f1.txt", "f2.txt"]
    else:  # given up after close_timeout, each reported with its staged copy
        assert landed == []
        assert time.perf_counter() - start < 30
        for i in range(3):
            assert f"bucket/f{i}.txt (from {tmp_path}/src.txt): the program ended" in proc.stderr
        assert proc.stderr.count("staged copy kept at") == 3


def test_sftp_checks_the_host_key_by_default(sftp, tmp_path, monkeypatch):
    from ._sftp_server import USERNAME

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/known_hosts knows this server
    rud = RemoteUploaderDownloader(
        f"sftp://{USERNAME}@127.0.0.1:{sftp.port}/uploads", num_attempts=4, **FAST
    )
    rud.upload_file(State(run_name="r"), "x.txt", write(tmp_path / "x.txt", b"x"))
    assert rud.wait_for_uploads(20)
    [failure] = rud.failed_uploads
    assert failure.attempts == 1 and "Host key is not trusted" in failure.reason
    assert not (sftp.root / "uploads" / "x.txt").exists()


@pytest.mark.parametrize("name", ["initial_backoff", "max_backoff", "shutdown_timeout"])
def test_the_upload_queue_refuses_a_wait_that_never_ends_too(name):
    from obsbus.loggers._upload_queue import UploadQueue
    from obsbus.object_store import build_object_store

    waits = {"initial_backoff": 1.0, "max_backoff": 2.0, "shutdown_timeout": 3.0, name: math.inf}
    with pytest.raises(ValueError, match=rf"q {name} must be a finite number of seconds > 0, "
                                         "got inf"):
        UploadQueue(build_object_store(memory_uri()), name="q", workers=1, attempts=1,
                    max_pending=1, **waits)


@pytest.mark.parametrize("use_procs", [True, False])
def test_use_procs_is_accepted_and_uploads_run_on_threads(tmp_path, use_procs):
    """Composer's ``RemoteUploaderDownloader(..., use_procs=...)`` (its callback tests pass
    ``use_procs=False, num_concurrent_uploads=1``; the default is True): accepted either way,
    and obsbus uploads from threads, never from a child process."""
    import multiprocessing

    rud = RemoteUploaderDownloader(memory_uri(), use_procs=use_procs, num_concurrent_uploads=1,
                                   **FAST)  # fmt: skip
    assert rud.use_procs is use_procs
    uploaders: list[str] = []
    put = rud.store.upload

    def recording(local, name, *, overwrite):
        uploaders.append(threading.current_thread().name)
        put(local, name, overwrite=overwrite)

    rud.store.upload = recording
    rud.upload_file(State(run_name="r"), "a.txt", write(tmp_path / "a.txt", b"a"))
    assert rud.wait_for_uploads(10)
    assert rud.store.objects["a.txt"] == b"a"
    assert uploaders and threading.main_thread().name not in uploaders
    assert multiprocessing.active_children() == []


def test_composers_positional_order_is_accepted():
    """Composer's order: bucket_uri, backend_kwargs, file_path_format_string,
    num_concurrent_uploads, upload_staging_folder, use_procs, num_attempts."""
    rud = RemoteUploaderDownloader(memory_uri(), None, "rank{rank}/{remote_file_name}", 2, None,
                                   False, 3)  # fmt: skip
    assert (rud.num_concurrent_uploads, rud.use_procs, rud.num_attempts) == (2, False, 3)
    assert rud.file_path_format_string == "rank{rank}/{remote_file_name}"
