"""Many runs in one process (a notebook, an Optuna sweep) leak nothing, whatever the destination.

The attack: one process makes short runs one after another, first with the
default stack alone (the five default monitors: the baseline), then with the
default stack and one destination, a fresh one per run
(``scripts/many_runs.py``; a fresh process per destination, since in a test
process memory an earlier test freed is filled again before RSS moves, and
trackers keep process-wide state). After each run has closed (and
``gc.collect()``, ``malloc_trim``), the script samples the open file
descriptors, the live threads and the resident memory. Then:

- **fds**: none open into any closed run's folder (MLflow's default store kept
  2 on each closed run's ``mlflow.db``), and the count does not grow over the
  measured runs;
- **threads** and **child processes** (wandb's service): none alive at the end
  that was not alive after the warm-up runs (named in the failure);
- **RSS**: grows per run at most ``TOLERANCE_MB`` more than the baseline's. The
  slope is the median of the slopes between every two measured runs (Theil-Sen),
  so one step (a lazy import, an allocator arena) does not count as growth;
  MLflow's SQLAlchemy engine cache grew ~7-9 MB a run, and a flat destination's
  slope is within ~0.3 MB/run of the baseline here, hence 1.5 MB/run.

Warm-up runs come first (imports, process-wide singletons such as wandb's
service, one-time caches). The default suite makes ``RUNS`` measured runs per
destination (fewer for MLflow's SQLite store: a new database is migrated per
run, seconds each); ``-m long`` makes the issue's 30 for every destination.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "many_runs.py"
#: MB a run a destination may add to the baseline's RSS slope (see the module).
TOLERANCE_MB = 1.5
WARMUP, RUNS = 2, 6
#: A new SQLite store per run is migrated (seconds): fewer runs in the default suite.
FEWER = {"mlflow-sqlite": (1, 3)}
#: Destinations with no process-wide state of their own share one process (and baseline).
LIGHT = ["file", "console", "progress-bar", "loguru", "in-memory", "run-report", "tensorboard",
         "remote-file-store", "slack", "webhook"]  # fmt: skip
TRACKERS = ["wandb-offline", "mlflow-sqlite", "mlflow-file-store", "comet-offline",
            "neptune-offline"]  # fmt: skip
_done: dict[tuple[str, int, int], dict[str, list]] = {}


def slope(values: list[float]) -> float:
    """Theil-Sen: the median of the slopes between every two points (robust to one step)."""
    pairs = [(values[j] - values[i]) / (j - i)
             for i in range(len(values)) for j in range(i + 1, len(values))]  # fmt: skip
    return statistics.median(pairs)


def many_runs(root: Path, cases: list[str], warmup: int, runs: int) -> dict[str, list]:
    """Each case's samples (and the baseline's, ``"base"``) from one process."""
    key = (",".join(cases), warmup, runs)
    if key in _done:
        return _done[key]
    root.mkdir(parents=True)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), key[0], str(root), str(warmup), str(runs)],
        capture_output=True, text=True, cwd=root.parent, timeout=3600,
    )  # fmt: skip
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, done.stderr[-4000:]
    assert rows[-1] == {"network": []}, rows[-1]
    phases: dict[str, list] = {}
    for row in rows[:-1]:
        phases.setdefault(row["phase"], []).append(row)
    for phase in ("base", *cases):
        assert len(phases.get(phase, [])) == warmup + runs, done.stdout[-2000:]
    inside = {phase: round(sum(r["secs"] for r in rows)) for phase, rows in phases.items()}
    print(f"{key[0]}: {len(rows) - 1} runs in {time.monotonic() - start:.0f}s; inside runs: "
          f"{inside} s")  # fmt: skip
    _done[key] = phases
    return phases


def check_nothing_leaks(case: str, base: list, dest: list, warmup: int) -> None:
    folders = [r["folder"] + "/" for r in base + dest]
    for rows in (base, dest):
        last, first = rows[-1], rows[warmup]
        what = f"{case} ({last['phase']})"
        # fds: none into a closed run's folder, and no more at the end than after warm-up.
        into_runs = sorted(f for f in last["fds"] if f.startswith(tuple(folders)))
        assert into_runs == [], f"{what}: fds still open into closed runs' folders: {into_runs}"
        counts = [len(r["fds"]) for r in rows]
        assert counts[-1] <= counts[warmup], f"{what}: open fds after each run grew: {counts}"
        # threads: none alive at the end that the warm-up left not.
        known = {ident for ident, _ in first["threads"]}
        new = [name for ident, name in last["threads"] if ident not in known]
        assert new == [], f"{what}: threads left alive by closed runs: {new}"
        # child processes (wandb's service): none that the warm-up left not.
        known = {pid for pid, _ in first["children"]}
        new = [name for pid, name in last["children"] if pid not in known]
        assert new == [], f"{what}: processes left alive by closed runs: {new}"
    mb = [[r["rss"] / 2**20 for r in rows[warmup:]] for rows in (base, dest)]
    growth = slope(mb[1]) - slope(mb[0])
    seen = (f"RSS after each measured run (MB): baseline {[round(v, 1) for v in mb[0]]}, "
            f"{case} {[round(v, 1) for v in mb[1]]}")  # fmt: skip
    print(f"{case}: {growth:+.2f} MB/run over the baseline; {seen}")
    assert growth < TOLERANCE_MB, (
        f"{case}: RSS grows {growth:.1f} MB a run more than the default stack's; {seen}"
    )


def _check(root: Path, case: str, warmup: int, runs: int) -> None:
    group = list(LIGHT) if case in LIGHT else [case]  # every backend is in the test extra
    phases = many_runs(root / ("light" if case in LIGHT else case), group, warmup, runs)
    check_nothing_leaks(case, phases["base"], phases[case], warmup)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("many-runs")


@pytest.mark.parametrize("case", LIGHT + TRACKERS)
def test_runs_one_after_another_leak_no_fd_thread_or_memory(root, case):
    _check(root, case, *FEWER.get(case, (WARMUP, RUNS)))


@pytest.mark.long
@pytest.mark.parametrize("case", LIGHT + TRACKERS)
def test_thirty_runs_leak_nothing(root, case):
    """The issue's 30 runs in one process, for every destination (``-m long``)."""
    _check(root / "thirty", case, 3, 30)


# ----------------------------------------------- MLflow: obsbus's engine, and yours
def open_into(folder: Path) -> list[str]:
    """What this process's open fds point to under ``folder``."""
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith(f"{folder}/"):
            found.append(target)
    return found


@pytest.fixture
def mlflow_offline(monkeypatch):
    pytest.importorskip("sqlalchemy")
    for name, value in {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def fit(folder: Path, *loggers) -> None:
    import torch

    from obsbus import Run

    with Run(max_duration="2ba", loggers=list(loggers), run_name=folder.name,
             run_folder=folder) as run:  # fmt: skip
        for _ in run.train([[0], [0]]):
            run.state.loss = torch.tensor(1.0)


def test_mlflow_gives_back_its_stores_engine_and_your_client_on_it_keeps_working(
    tmp_path, mlflow_offline
):
    """A client of yours, opened on the run's database while it ran, shares obsbus's engine:
    at close its connections close too, and the next call opens one."""
    import torch
    from mlflow import MlflowClient

    from obsbus import Run
    from obsbus.loggers import MLFlowLogger

    mlf, folder = MLFlowLogger(log_env=False, log_git=False), tmp_path / "r"
    uri = mlf.resolved_tracking_uri(folder)
    with Run(max_duration="2ba", loggers=[mlf], run_name="r", run_folder=folder) as run:
        for _ in run.train([[0], [0]]):
            run.state.loss = torch.tensor(1.0)
        mlf.flush()
        mlf._wait_for_client()  # the writer has started the MLflow run
        yours = MlflowClient(uri)
        assert yours.get_run(mlf.run_id).info.status == "RUNNING"
    assert open_into(folder) == []
    assert yours.get_run(mlf.run_id).info.status == "FINISHED"  # reconnects
    assert [m.value for m in yours.get_metric_history(mlf.run_id, "loss/train/total")] == [1, 1]


def test_mlflow_leaves_the_engine_of_your_own_database_alone(tmp_path, mlflow_offline):
    from mlflow import MlflowClient
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from obsbus.loggers import MLFlowLogger

    uri = f"sqlite:///{tmp_path / 'yours.db'}"
    yours = MlflowClient(uri)
    mine = yours.create_experiment("mine")
    engine = SqlAlchemyStore._engine_map[uri]
    assert open_into(tmp_path) != []  # your client's pooled connection
    mlf = MLFlowLogger(tracking_uri=uri, log_env=False, log_git=False)
    fit(tmp_path / "r", mlf)
    assert SqlAlchemyStore._engine_map[uri] is engine
    assert engine.pool.checkedin() > 0 and len(engine._compiled_cache) > 0  # not disposed
    assert open_into(tmp_path) != []
    assert yours.get_run(mlf.run_id).info.status == "FINISHED"
    assert yours.get_experiment(mine).name == "mine"


def test_mlflow_runs_sharing_a_new_database_give_it_back_when_the_last_ends(
    tmp_path, mlflow_offline
):
    """Two destinations on one new database in one run, then a second run on it (a sweep):
    its connections close when the last obsbus run using it ends, each time."""
    from obsbus.loggers import MLFlowLogger

    uri = f"sqlite:///{tmp_path / 'sweep' / 'mlflow.db'}"
    quiet = {"tracking_uri": uri, "log_env": False, "log_git": False}
    one, two = MLFlowLogger(run_name="one", **quiet), MLFlowLogger(run_name="two", **quiet)
    fit(tmp_path / "a", one, two)
    assert open_into(tmp_path / "sweep") == []
    three = MLFlowLogger(run_name="three", **quiet)
    fit(tmp_path / "b", three)
    assert open_into(tmp_path / "sweep") == []
    assert len({one.run_id, two.run_id, three.run_id}) == 3


def test_mlflow_async_logging_threads_end_with_the_run(tmp_path, mlflow_offline):
    """``synchronous=False`` starts MLflow's async-logging threads on the run's store."""
    import threading

    from obsbus.loggers import MLFlowLogger

    before = {t.ident for t in threading.enumerate()}
    mlf = MLFlowLogger(synchronous=False, log_env=False, log_git=False)
    fit(tmp_path / "r", mlf)
    assert [t.name for t in threading.enumerate() if t.ident not in before] == []
    assert open_into(tmp_path / "r") == []
