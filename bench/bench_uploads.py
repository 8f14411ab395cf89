"""What does ``RemoteUploaderDownloader`` cost the training thread, and how fast does it upload?

Starts moto's S3-compatible server in a separate process on 127.0.0.1 (so its
CPU use is not in this process's GIL) and uploads through
``RemoteUploaderDownloader("s3://...", {"endpoint_url": ...})``:

* ``caller``: the time one ``upload_file`` call keeps the calling (training)
  thread, for 1 MiB and 100 MiB files, while earlier uploads run in the
  background, next to the target: ``shutil.copyfile`` of the same file to
  the same file system (a local copy). Median and worst call, in ms.
* ``throughput``: from the first ``upload_file`` to ``wait_for_uploads()``
  returning, for many 4 KiB files, 1 MiB files and 100 MiB files (multipart),
  with 1 and 4 workers; MB/s and files/s. Every object's size is checked.
* ``memory``: the peak growth of this process's RSS while 100 MiB files
  upload (sampled every 10 ms): buffers stay bounded whatever the backlog.
* ``--libraries``: the measurement behind the choice of obstore over
  fsspec/s3fs (``obsbus/object_store/object_store.py``): the same objects
  put with each library directly, one thread, 8 MiB parts. Needs ``s3fs``.

Needs the ``s3`` extra and ``moto[server]`` (a test dependency). Usage::

    .venv/bin/python bench/bench_uploads.py            # ~2 min on 2 busy cores
    .venv/bin/python bench/bench_uploads.py --quick    # fewer files, ~40 s
    .venv/bin/python bench/bench_uploads.py --libraries  # obstore vs s3fs only, ~1 min
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from obsbus import State
from obsbus.loggers.remote_uploader_downloader import RemoteUploaderDownloader

_SERVER = """
import logging, sys, time
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the parent closes stdin
"""
MiB = 1 << 20


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def make_file(folder: Path, size: int) -> Path:
    path = folder / f"src-{size}.bin"
    if not path.exists():
        with open(path, "wb") as f:
            for _ in range(max(size // MiB, 1)):
                f.write(os.urandom(min(size, MiB)))
    return path


def uploader(endpoint: str, bucket: str, workers: int) -> RemoteUploaderDownloader:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return RemoteUploaderDownloader(
        f"s3://{bucket}", {"endpoint_url": endpoint}, num_concurrent_uploads=workers
    )


def check(endpoint: str, bucket: str, count: int, size: int) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    items = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    sizes = [item["Size"] for item in items]
    assert len(sizes) == count, (len(sizes), count)
    assert set(sizes) == {size}, set(sizes)


def caller_cost(endpoint: str, folder: Path, size: int, calls: int) -> tuple[list[float], ...]:
    """ms per upload_file call and per plain copy of the same file."""
    src = make_file(folder, size)
    rud = uploader(endpoint, f"caller-{size}-{time.time_ns()}", 4)
    state, up, cp = State(run_name="bench"), [], []
    staging = Path(tempfile.mkdtemp())
    for i in range(calls):  # alternate which goes first, so the page cache favours neither
        for what in ("copy", "upload") if i % 2 else ("upload", "copy"):
            t = time.perf_counter()
            if what == "copy":
                shutil.copyfile(src, staging / f"copy-{i}.bin")  # a new file, as staging makes
                cp.append((time.perf_counter() - t) * 1000)
            else:
                rud.upload_file(state, f"f{i}.bin", src)
                up.append((time.perf_counter() - t) * 1000)
        (staging / f"copy-{i}.bin").unlink()
    assert rud.wait_for_uploads(600)
    rud.close(state, None)  # type: ignore[arg-type]
    rud.post_close()
    assert rud.failed_uploads == []
    shutil.rmtree(staging)
    return up, cp


def throughput(endpoint: str, folder: Path, size: int, count: int, workers: int) -> tuple:
    src = make_file(folder, size)
    bucket = f"tp-{size}-{workers}-{time.time_ns()}"
    rud = uploader(endpoint, bucket, workers)
    state = State(run_name="bench")
    proc, base, peak = psutil.Process(), psutil.Process().memory_info().rss, [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss - base)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t = time.perf_counter()
    for i in range(count):
        rud.upload_file(state, f"f{i}.bin", src)
    assert rud.wait_for_uploads(900)
    elapsed = time.perf_counter() - t
    stop.set()
    sampler.join()
    rud.close(state, None)  # type: ignore[arg-type]
    rud.post_close()
    assert rud.failed_uploads == []
    check(endpoint, bucket, count, size)
    return elapsed, size * count / elapsed / 1e6, count / elapsed, peak[0] / MiB


def library_put(lib: str, endpoint: str, bucket: str) -> Callable[[Path, str], None]:
    """A function that puts a file with ``lib`` (obstore or s3fs) directly."""
    if lib == "obstore":
        import obstore
        from obstore.store import S3Store

        store = S3Store(bucket, endpoint=endpoint, client_options={"allow_http": True})

        def put_obstore(path: Path, key: str) -> None:
            with open(path, "rb") as f:
                obstore.put(store, key, f, chunk_size=8 * MiB, max_concurrency=4)

        return put_obstore
    import s3fs  # type: ignore[import-untyped]

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)

    def put_s3fs(path: Path, key: str) -> None:
        fs.put_file(str(path), f"{bucket}/{key}", chunksize=8 * MiB)

    return put_s3fs


def libraries(endpoint: str, folder: Path) -> None:
    """obstore and s3fs putting the same files, each in its own bucket."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    print(
        "| library | build client s | 4 KiB x 200 ms/put | 1 MiB x 30 ms/put "
        "| 100 MiB x 2 s/put | peak RSS growth MiB (100 MiB) |"
    )
    print("|---|---|---|---|---|---|")
    proc = psutil.Process()
    for lib in ("obstore", "s3fs"):
        bucket = f"lib-{lib}-{time.time_ns()}"
        client.create_bucket(Bucket=bucket)
        t = time.perf_counter()
        put = library_put(lib, endpoint, bucket)
        build = time.perf_counter() - t
        put(make_file(folder, 4096), "warm-up")
        row = [lib, f"{build:.2f}"]
        for size, count in ((4096, 200), (MiB, 30), (100 * MiB, 2)):
            src, base, peak = make_file(folder, size), proc.memory_info().rss, [0]
            stop = threading.Event()

            def sample(
                base: int = base, peak: list[int] = peak, stop: threading.Event = stop
            ) -> None:
                while not stop.is_set():
                    peak[0] = max(peak[0], proc.memory_info().rss - base)
                    time.sleep(0.01)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t = time.perf_counter()
            for i in range(count):
                put(src, f"{size}-{i}")
            per = (time.perf_counter() - t) / count
            stop.set()
            sampler.join()
            row.append(f"{per:.2f}" if size > 10 * MiB else f"{per * 1000:.1f}")
        row.append(f"{peak[0] / MiB:.0f}")
        print("| " + " | ".join(row) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer files (~40 s)")
    parser.add_argument("--libraries", action="store_true", help="obstore vs s3fs only")
    args = parser.parse_args()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    proc, endpoint = start_server()
    folder = Path(tempfile.mkdtemp(prefix="obsbus-bench-"))
    q = args.quick
    try:
        print(
            f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, python "
            f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs\n"
        )
        if args.libraries:
            libraries(endpoint, folder)
            return
        print("## caller: ms the training thread spends per call\n")
        print("| file | calls | upload_file median | worst | local copy median | worst |")
        print("|---|---|---|---|---|---|")
        for size, calls in ((MiB, 10 if q else 30), (100 * MiB, 2 if q else 4)):
            up, cp = caller_cost(endpoint, folder, size, calls)
            print(
                f"| {size // MiB} MiB | {calls} | {statistics.median(up):.2f} | {max(up):.2f} "
                f"| {statistics.median(cp):.2f} | {max(cp):.2f} |",
                flush=True,
            )
        print("\n## throughput to the local S3 server (moto, another process)\n")
        print("| files | workers | seconds | MB/s | files/s | peak RSS growth MiB |")
        print("|---|---|---|---|---|---|")
        cases = [(4096, 100 if q else 300), (MiB, 20 if q else 60), (100 * MiB, 1 if q else 2)]
        for size, count in cases:
            for workers in (1, 4):
                sec, mbs, fps, rss = throughput(endpoint, folder, size, count, workers)
                label = (
                    f"{count} x {size // 1024} KiB"
                    if size < MiB
                    else (f"{count} x {size // MiB} MiB")
                )
                print(
                    f"| {label} | {workers} | {sec:.2f} | {mbs:.1f} | {fps:.1f} | {rss:.0f} |",
                    flush=True,
                )
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
