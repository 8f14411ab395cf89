"""A FileLogger, a JSONTraceHandler or a TorchProfiler given a bucket URI uploads there."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
import torch.nn.functional as F

from obsbus import Run, Trainer
from obsbus.errors import MissingExtraError
from obsbus.loggers.file_logger import FileLogger
from obsbus.loggers.remote_uploader_downloader import RemoteUploaderDownloader
from obsbus.object_store import build_object_store
from obsbus.profiler.json_trace_handler import JSONTraceHandler
from obsbus.profiler.profiler import Profiler
from obsbus.profiler.profiler_action import ProfilerAction
from obsbus.profiler.schedule import cyclic_schedule

from ..helpers import regression_data, tiny_model
from ._s3_server import SECRET_KEY


@pytest.fixture(autouse=True)
def _staging_in_tmp_path(tmp_path, monkeypatch):
    """Private uploaders stage under the test's tmp_path (tempfile.mkdtemp)."""
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))


def bucket() -> str:
    return f"r-{uuid.uuid4().hex[:10]}"


def objects(uri: str) -> dict[str, bytes]:
    return dict(build_object_store(uri).objects)  # memory:// stores share their bucket


def trainer(tmp_path, loggers=(), profiler=None, duration="1ep", strict=True):
    return Trainer(
        tiny_model(),
        regression_data(4),
        duration,
        loss_fn=F.mse_loss,
        loggers=list(loggers),
        device="cpu",
        run_folder=tmp_path / "run",
        run_name="exp",
        profiler=profiler,
        strict=strict,
    )


def local_files(files: FileLogger, prefix: str) -> dict[str, bytes]:
    return {f"{prefix}/{p.name}": p.read_bytes() for p in files.paths}


# ---------------------------------------------------------------- FileLogger
def test_file_logger_uploads_to_its_folder_including_the_last_flush_at_close(tmp_path):
    b = bucket()
    files = FileLogger(flush_interval=1000, remote_folder=f"memory://{b}/{{run_name}}/logs")
    with trainer(tmp_path, [files]) as t:
        t.fit()
        t.logger.log_metrics({"after/fit": 7.0})  # written and uploaded only at close
    assert objects(f"memory://{b}") == local_files(files, "exp/logs")
    assert b"after/fit: 7" in objects(f"memory://{b}")["exp/logs/logs-rank0.txt"]
    [uploader] = files.remote_uploaders
    assert uploader.bucket_uri == f"memory://{b}"
    assert uploader.failed_uploads == []
    assert not list((tmp_path / "tmp").glob("obsbus-uploads-*"))  # staging folder removed


def test_file_logger_reaches_s3_with_exact_bytes(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # obsbus's S3 store reads it
    b = s3.new_bucket()
    files = FileLogger(flush_interval=2, remote_folder=f"s3://{b}/{{run_name}}/rank{{rank}}")
    with trainer(tmp_path, [files], duration="2ep") as t:
        t.fit()
        t.logger.log_hyperparameters({"late": 1})
    assert s3.objects(b) == local_files(files, "exp/rank0")
    rows = s3.objects(b)["exp/rank0/metrics-rank0.jsonl"].splitlines()
    assert json.loads(rows[-1])["step"] == 8
    assert b"[hyperparameter][batch=8]: late: 1" in s3.objects(b)["exp/rank0/logs-rank0.txt"]
    assert files.remote_uploaders[0].failed_uploads == []


def test_an_uploader_in_loggers_for_the_bucket_is_used_instead_of_a_second(s3, tmp_path):
    # The endpoint comes from the uploader's backend_kwargs only: a private uploader
    # (which would go to AWS) could not reach the bucket.
    b = s3.new_bucket()
    rud = RemoteUploaderDownloader(f"s3://{b}", {"endpoint_url": s3.endpoint})
    files = FileLogger(remote_folder=f"s3://{b}/logs/{{run_name}}")
    handler = JSONTraceHandler(remote_folder=f"s3://{b}/traces")
    profiler = Profiler(lambda state: ProfilerAction.ACTIVE_AND_SAVE, [handler])
    with trainer(tmp_path, [files, rud], profiler=profiler, duration="2ba") as t:
        t.fit()
    assert files.remote_uploaders == [] and handler.remote_uploaders == []
    traces = tmp_path / "run" / "traces"
    expected = local_files(files, "logs/exp")
    expected.update({f"traces/{p.name}": p.read_bytes() for p in traces.iterdir()})
    assert sorted(k for k in expected if k.startswith("traces/")) == [
        "traces/ep1-ba1-rank0.json",
        "traces/ep1-ba2-rank0.json",
        "traces/merged_trace.json",
    ]
    assert s3.objects(b) == expected
    assert rud.failed_uploads == []


def test_other_file_destinations_get_the_same_name(tmp_path):
    ours, other = bucket(), bucket()
    rud = RemoteUploaderDownloader(f"memory://{other}")
    files = FileLogger(remote_folder=f"memory://{ours}/logs")
    with trainer(tmp_path, [files, rud]) as t:
        t.fit()
    assert [u.bucket_uri for u in files.remote_uploaders] == [f"memory://{ours}"]
    assert objects(f"memory://{ours}") == objects(f"memory://{other}") == local_files(files, "logs")


def test_what_was_logged_before_a_crash_arrives(tmp_path):
    b = bucket()
    files = FileLogger(remote_folder=f"file://{tmp_path}/bucket/{b}")
    with (
        pytest.raises(RuntimeError, match="boom"),
        Run(
            max_duration="4ba", run_name="exp", run_folder=tmp_path / "run", loggers=[files]
        ) as run,
    ):
        for i, _ in enumerate(run.train([[1]] * 4)):
            run.state.loss = 0.25
            if i == 2:
                raise RuntimeError("boom")
    arrived = tmp_path / "bucket" / b / "logs-rank0.txt"
    assert arrived.read_bytes() == files.paths[0].read_bytes()
    assert b"[exception]: RuntimeError('boom')" in arrived.read_bytes()


def test_two_fits_and_two_closes(tmp_path):
    b = bucket()
    files = FileLogger(remote_folder=f"memory://{b}")
    t = trainer(tmp_path, [files])
    t.fit()
    t.fit(duration="2ba")
    t.close()
    t.close()
    assert objects(f"memory://{b}") == {p.name: p.read_bytes() for p in files.paths}
    assert b"[metric][batch=6]" in objects(f"memory://{b}")["logs-rank0.txt"]


def test_a_failed_upload_is_reported_by_name_and_training_goes_on(
    s3, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    files = FileLogger(remote_folder="s3://no-such-bucket-here/logs")
    with (
        caplog.at_level(logging.ERROR, logger="obsbus"),
        trainer(tmp_path, [files], strict=False) as t,
    ):
        t.fit()
    assert t.state.timestamp.batch == "4ba"
    [uploader] = files.remote_uploaders
    names = {f.remote_file_name for f in uploader.failed_uploads}
    assert names == {"logs/logs-rank0.txt", "logs/metrics-rank0.jsonl"}
    assert all(
        "NoSuchBucket" in f.reason and f.staged_path.is_file() for f in uploader.failed_uploads
    )
    assert "did not reach the store" in caplog.text
    assert "s3://no-such-bucket-here/logs/logs-rank0.txt" in caplog.text
    assert SECRET_KEY not in caplog.text


# ------------------------------------------------------------------ profilers
def test_json_trace_handler_uploads_each_trace_and_the_merged_trace(tmp_path):
    b = bucket()
    handler = JSONTraceHandler(remote_folder=f"memory://{b}/{{run_name}}/traces")
    profiler = Profiler(cyclic_schedule(warmup=0, active=2, repeat=0), [handler])
    with trainer(tmp_path, profiler=profiler) as t:
        t.fit()
    traces = tmp_path / "run" / "traces"
    assert objects(f"memory://{b}") == {
        f"exp/traces/{p.name}": p.read_bytes() for p in traces.iterdir()
    }
    assert sorted(objects(f"memory://{b}")) == [
        "exp/traces/ep1-ba2-rank0.json",
        "exp/traces/ep1-ba4-rank0.json",
        "exp/traces/merged_trace.json",
    ]
    assert handler.remote_uploaders[0].failed_uploads == []


def test_torch_traces_go_to_the_bucket_their_remote_name_names(tmp_path):
    b = bucket()
    profiler = Profiler(
        cyclic_schedule(warmup=0, active=1, repeat=2),
        torch_prof_folder="tt",
        torch_prof_remote_file_name=f"memory://{b}/{{run_name}}/torch/rank{{rank}}.{{batch}}.json",
    )
    model = tiny_model()
    with Run(
        model=model,
        max_duration="2ba",
        run_name="exp",
        run_folder="run",
        device="cpu",
        profiler=profiler,
    ) as run:
        for x, y in run.train(regression_data(2, batch_size=2)):
            F.mse_loss(model(x), y).backward()
    tp = profiler.torch_profiler
    assert [p.name for p in tp.saved_traces] == ["rank0.1.pt.trace.json", "rank0.2.pt.trace.json"]
    assert objects(f"memory://{b}") == {
        "exp/torch/rank0.1.json": tp.saved_traces[0].read_bytes(),
        "exp/torch/rank0.2.json": tp.saved_traces[1].read_bytes(),
    }
    assert any(
        e["name"] == "aten::addmm"
        for e in json.loads(objects(f"memory://{b}")["exp/torch/rank0.2.json"])["traceEvents"]
    )
    assert [u.failed_uploads for u in tp.remote_uploaders] == [[]]


# -------------------------------------------------------------- construction
def file_logger(uri):
    return FileLogger(remote_folder=uri)


def trace_handler(uri):
    return JSONTraceHandler(remote_folder=uri)


def torch_profiler(uri):
    return Profiler(
        lambda state: "skip",
        torch_prof_folder="tt",
        torch_prof_remote_file_name=uri + "/trace.json",
    )


BUILDERS = [file_logger, trace_handler, torch_profiler]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize(
    ("uri", "error", "message"),
    [
        (
            "ftp://host/logs",
            ValueError,
            r"unsupported scheme 'ftp'\. To fix, use one of: .*s3://bucket/prefix",
        ),
        ("s3://{run_name}/logs", ValueError, r"placeholder in its bucket '\{run_name\}'"),
        ("memory://b/{rnak}", ValueError, r"unknown placeholder \{rnak\}"),
        ("s3://AKIAEXAMPLE:wJalr-s3cr3t-Kx9@bucket/logs", ValueError, "embeds credentials"),
    ],
    ids=["scheme", "bucket-placeholder", "placeholder", "credentials"],
)
def test_a_bad_uri_fails_at_construction(build, uri, error, message):
    with pytest.raises(error, match=message) as info:
        build(uri)
    assert "wJalr-s3cr3t-Kx9" not in str(info.value)


def test_a_folder_without_a_scheme_lists_the_schemes():
    with pytest.raises(
        ValueError,
        match=r"remote_folder: .*'my-bucket/logs' has no scheme\. "
        r"To fix, use one of: file:///",
    ):
        FileLogger(remote_folder="my-bucket/logs")


def test_a_torch_remote_name_must_name_a_file_in_the_bucket():
    with pytest.raises(ValueError, match="names a bucket but no file in it"):
        Profiler(
            lambda state: "skip", torch_prof_folder="tt", torch_prof_remote_file_name="memory://b/"
        )


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_a_missing_extra_is_named_at_construction(build, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "obstore", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[s3\]'"):
        build("s3://bucket/logs")
