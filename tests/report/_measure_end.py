"""What the end of a run costs with RunReport: the page's render at fit_end, and at close.

Not a test (no speed goal is asserted); run it from the repository root::

    .venv/bin/python -m tests.report._measure_end [--runs 5] [--batches 20]

Each run is a fresh process (the first render imports Bokeh, as in a real run): the run of
:func:`tests.report._runs.train` (six monitors, a FileLogger, a profiler window with a JSON
trace handler, RunReport), ``--batches`` batches. It prints, per run, the seconds of each page
RunReport wrote (``write_report``: import Bokeh the first time, read the folder, build the
plots, write the HTML) with the status it had, and the seconds of one more render of the
folder afterwards, Bokeh imported (the render alone).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

_CHILD = """
import json, sys, time
from pathlib import Path
import obsbus.report as report
from obsbus.loggers import run_report
from tests.report._runs import train
written, real = [], report.write_report
def timed(*args, **kwargs):
    start = time.perf_counter()
    path = real(*args, **kwargs)
    status = json.loads((path.parent / "run-status-rank0.json").read_text())["status"]
    written.append((status, time.perf_counter() - start))
    return path
report.write_report = timed
start = time.perf_counter()
train(sys.argv[1], int(sys.argv[2]))
run_s = time.perf_counter() - start
start = time.perf_counter()
real(sys.argv[1], Path(sys.argv[1]) / "again.html")  # Bokeh imported now: the render alone
warm = time.perf_counter() - start
print(json.dumps({"pages": written, "run_s": run_s, "warm_s": warm}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    first: list[float] = []
    warm: list[float] = []
    for index in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, folder, str(args.batches)],
                capture_output=True,
                text=True,
                check=True,
            )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        pages = ", ".join(f"{status} {seconds:.2f} s" for status, seconds in result["pages"])
        print(
            f"run {index + 1}: {len(result['pages'])} page(s): {pages}; whole run "
            f"{result['run_s']:.2f} s; rendered again {result['warm_s']:.2f} s"
        )
        first.append(result["pages"][0][1])
        warm.append(result["warm_s"])
    print(
        f"render at fit_end: median {statistics.median(first):.2f} s, "
        f"min {min(first):.2f} s, max {max(first):.2f} s over {len(first)} runs; "
        f"the render alone: median {statistics.median(warm):.2f} s"
    )


if __name__ == "__main__":
    main()
