"""How long does ``log.info(...)`` keep the training thread, with enqueue=False vs True?

Measures the per-call latency of ``logger.info()`` from the calling (training)
thread with obsbus's file sinks (``setup_logging``, default levels: an INFO
line goes to ``debug.log`` and ``info.log``) on a real disk, in three
scenarios:

* ``paced``: one line, then 200 us of idle time (a training step that logs
  every step, with the GIL released in between, as torch ops release it);
* ``burst``: lines back to back (the worst case for a queue);
* ``busy-disk``: paced, while another process writes a checkpoint-sized
  file in 8 MiB chunks with ``fsync`` after each (a checkpoint save on the
  same disk).

Rounds interleave the two modes (the order alternates each round) so that
drift on the machine hits both alike. After each run, ``reset_logging()``
drains and closes the sinks (its time is reported as ``close ms``) and the
lines in ``info.log`` are counted: nothing may be lost.

Usage::

    .venv/bin/python bench/bench_logging.py            # ~30 s
    .venv/bin/python bench/bench_logging.py --rounds 3 --calls 500 --dir /mnt/nfs/tmp
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from obsbus.log import reset_logging, setup_logging

_DISK_HOG = """
import os, sys
path, chunk = sys.argv[1], b"x" * (8 << 20)
while True:
    with open(path, "wb") as f:
        for _ in range(64):  # 512 MiB, then start again
            f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
"""


def measure(
    folder: Path, enqueue: bool, calls: int, gap_s: float
) -> tuple[list[float], float, int]:
    """Latencies (us) of ``calls`` info() calls, close time (ms), lines found in info.log."""
    log = setup_logging(
        folder, rank=0, world_size=1, stderr=False, intercept=False, enqueue=enqueue
    )
    for i in range(200):  # warm up: files open, formats memoized
        log.info("warmup {} loss {:.4f}", i, 0.5)
    latencies = []
    clock = time.perf_counter_ns
    for i in range(calls):
        start = clock()
        log.info("step {} loss {:.4f} lr {:.3e}", i, 0.123456, 3e-4)
        latencies.append((clock() - start) / 1e3)
        if gap_s:
            time.sleep(gap_s)
    start = clock()
    reset_logging()
    close_ms = (clock() - start) / 1e6
    text = (folder / "logs" / "train" / "rank-0" / "info.log").read_text()
    return latencies, close_ms, text.count("\n")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--dir", default=None, help="a folder on the disk to test (default: a temp folder in .)"
    )
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="bench-logging-", dir=args.dir or "."))
    print(
        f"# {datetime.datetime.now():%Y-%m-%d %H:%M} python {platform.python_version()} "
        f"{platform.machine()} cpus={os.cpu_count()} dir={base}"
    )
    scenarios = {"paced": 200e-6, "burst": 0.0, "busy-disk": 200e-6}
    results: dict[tuple[str, bool], list[float]] = {}
    closes: dict[tuple[str, bool], list[float]] = {}
    try:
        for scenario, gap in scenarios.items():
            hog = None
            if scenario == "busy-disk":
                hog = subprocess.Popen(
                    [sys.executable, "-c", _DISK_HOG, str(base / "checkpoint.bin")]
                )
                time.sleep(1.0)
            try:
                for r in range(args.rounds):
                    for enqueue in (False, True) if r % 2 == 0 else (True, False):
                        folder = base / f"{scenario}-{enqueue}-{r}"
                        lat, close_ms, lines = measure(folder, enqueue, args.calls, gap)
                        expected = args.calls + 200  # + warm-up; the setup line is DEBUG only
                        if lines != expected:
                            raise SystemExit(
                                f"lost lines: {scenario} enqueue={enqueue}: {lines} != {expected}"
                            )
                        results.setdefault((scenario, enqueue), []).extend(lat)
                        closes.setdefault((scenario, enqueue), []).append(close_ms)
                        shutil.rmtree(folder)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(f"\n{args.rounds} rounds x {args.calls} calls per scenario and mode; latency in us\n")
    print("| scenario | enqueue | median | p99 | p99.9 | max | close ms (max) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (scenario, enqueue), lat in results.items():
        print(
            f"| {scenario} | {enqueue} | {statistics.median(lat):.1f} | {pct(lat, 0.99):.1f} | "
            f"{pct(lat, 0.999):.1f} | {max(lat):.1f} | {max(closes[(scenario, enqueue)]):.1f} |"
        )


if __name__ == "__main__":
    main()
