"""A run refused because its name is taken writes nothing into the earlier run's folder.

Each test makes a first run in a folder (the run record, FileLogger, RunReport,
the loguru logs of ``setup_logging`` and LoguruLogger, a profiler trace), takes
a snapshot of every file there (bytes and modification time) and of every
folder, then starts a second run of the same name without ``resume`` and
checks that it is refused with the message a user reads, and that the folder
is exactly as the first run left it: no file changed, none appeared.

Before the fix, the run record (``config/run.json``, ``hparams.json``, ...),
RunReport's ``run-status-rank0.json`` and the loguru logs were rewritten with
the refused run's command line and hyperparameters before FileLogger refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from obsbus import Run, Trainer, config
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, SpeedMonitor
from obsbus.log import reset_logging, setup_logging
from obsbus.loggers import FileLogger, LoguruLogger, RunReport
from obsbus.profiler import JSONTraceHandler, Profiler, cyclic_schedule
from tests._dist_utils import run_two_ranks

NAME = "lm-1"
TAKEN = r"already exists\. To fix, pass resume=True to append to it \(restarting a run\)"
Snapshot = dict[str, tuple[bytes, int] | None]


def snapshot(folder: Path) -> Snapshot:
    """Every file (bytes, mtime in ns) and every folder (None) under ``folder``."""
    out: Snapshot = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        out[key] = (path.read_bytes(), path.stat().st_mtime_ns) if path.is_file() else None
    return out


def assert_untouched(folder: Path, before: Snapshot) -> None:
    after = snapshot(folder)
    new = sorted(set(after) - set(before))
    gone = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert (new, gone, changed) == ([], [], []), "the refused run touched the earlier run's folder"


def _plugins(resume: bool = False) -> dict[str, Any]:
    # The destinations that write at start come before the one that refuses, so a refusal
    # decided in the order the plug-ins start would come after they wrote.
    return {
        "callbacks": [SpeedMonitor(window_size=1), LRMonitor(), MemoryMonitor(), NaNMonitor()],
        "loggers": [LoguruLogger(), RunReport(), FileLogger(write_period=0.0, resume=resume)],
        "profiler": Profiler(
            schedule=cyclic_schedule(wait=0, warmup=0, active=1, repeat=1),
            trace_handlers=[JSONTraceHandler(overwrite=resume)],
        ),
    }


def _train(run: Run, batches: int = 2) -> None:
    model = run.state.model
    opt = run.state.optimizers[0]
    for x, y in run.train([(torch.ones(2, 3), torch.zeros(2, 1))] * batches):
        opt.zero_grad()
        loss = run.loss(torch.nn.functional.mse_loss, run.forward(model, x), y)
        run.backward(loss)
        opt.step()


def _run(folder: Path, *, resume: bool = False, lr: float = 0.1, log: bool = True) -> None:
    """One run named NAME in ``folder``: loguru set up first, as examples/quickstart.py does."""
    if log:
        setup_logging(folder, stderr=False, resume=resume).info(f"starting, lr={lr}")
    model = torch.nn.Linear(3, 1)
    try:
        with Run(
            model=model,
            optimizers=torch.optim.SGD(model.parameters(), lr=lr),
            max_duration="2ba",
            run_name=NAME,
            run_folder=folder,
            hparams={"lr": lr},
            **_plugins(resume),
        ) as run:
            _train(run)
    finally:
        reset_logging()


def _first(tmp_path: Path) -> tuple[Path, Snapshot]:
    folder = tmp_path / NAME
    _run(folder)
    before = snapshot(folder)
    expected = {"config/run.json", "config/hparams.json", "logs/train/rank-0/info.log",
                "logs-rank0.txt", "metrics-rank0.jsonl", "run-status-rank0.json", "report.html"}  # fmt: skip
    assert expected <= set(before), sorted(before)
    assert any(k.startswith("traces/") and k.endswith(".json") for k in before), sorted(before)
    return folder, before


def test_a_run_refused_for_its_name_leaves_the_earlier_runs_folder_as_it_was(tmp_path):
    folder, before = _first(tmp_path)
    with pytest.raises(FileExistsError, match=rf"setup_logging: .*rank-0/debug\.log' {TAKEN}"):
        _run(folder, lr=0.5)
    assert_untouched(folder, before)


def test_a_run_refused_by_filelogger_writes_no_run_record_and_no_status(tmp_path):
    folder, before = _first(tmp_path)
    with pytest.raises(FileExistsError, match=rf"FileLogger: .*logs-rank0\.txt' {TAKEN}"):
        _run(folder, lr=0.5, log=False)  # no loguru: FileLogger is the first to refuse
    assert_untouched(folder, before)


def test_a_run_refused_for_its_traces_leaves_no_file_of_another_plugin(tmp_path):
    folder, before = _first(tmp_path)
    model = torch.nn.Linear(3, 1)
    plugins = _plugins()
    # New file names: FileLogger may take them, and must give them back when the traces refuse.
    plugins["loggers"][-1] = FileLogger("second-{rank}.txt", "second-{rank}.jsonl")
    with pytest.raises(FileExistsError, match=r"JSONTraceHandler: .* already holds traces"):
        Run(model=model, run_name=NAME, run_folder=folder, hparams={"lr": 0.5}, **plugins)
    assert_untouched(folder, before)


def test_a_trainer_refused_for_its_name_leaves_the_folder_as_it_was(tmp_path):
    folder, before = _first(tmp_path)
    data = [(torch.ones(2, 3), torch.zeros(2, 1))] * 2
    with pytest.raises(FileExistsError, match=rf"FileLogger: .*logs-rank0\.txt' {TAKEN}"):
        Trainer(
            torch.nn.Linear(3, 1),
            data,
            "1ep",
            loss_fn=torch.nn.functional.mse_loss,
            run_name=NAME,
            run_folder=folder,
            device="cpu",
            progress_bar=False,
            **_plugins(),
        )
    assert_untouched(folder, before)


def test_a_run_built_from_a_config_refused_for_its_name_leaves_the_folder_as_it_was(tmp_path):
    folder, before = _first(tmp_path)
    cfg = config.build(
        {
            "run_name": NAME,
            "run_folder": str(folder),
            "callbacks": {"speed_monitor": {"window_size": 1}, "lr_monitor": {}},
            "loggers": {"loguru": {}, "run_report": {}, "file": {}},
            "logging": {"sink_level": "INFO", "stderr": False},
        }
    )
    with pytest.raises(FileExistsError, match=rf"setup_logging: .*info\.log' {TAKEN}"):
        cfg.setup_logging()
    with pytest.raises(FileExistsError, match=rf"FileLogger: .*logs-rank0\.txt' {TAKEN}"):
        Run(max_duration="1ba", **cfg.kwargs())
    assert_untouched(folder, before)


def test_resume_true_appends_to_the_earlier_runs_files(tmp_path):
    folder, before = _first(tmp_path)
    _run(folder, resume=True, lr=0.5)
    rows = [json.loads(line) for line in (folder / "metrics-rank0.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss/train/total" in r] == [1, 2, 1, 2]
    info = (folder / "logs/train/rank-0/info.log").read_text()
    assert info.index("starting, lr=0.1") < info.index("starting, lr=0.5")
    assert info.startswith(before["logs/train/rank-0/info.log"][0].decode())  # type: ignore[index]
    assert json.loads((folder / "config/hparams.json").read_text()) == {"lr": 0.5}


def test_setup_logging_again_keeps_its_files_and_after_a_reset_takes_resume(tmp_path):
    """A second call while obsbus's sinks write the files goes on writing them; after
    reset_logging they are the last run's (a notebook cell run again is another run)."""
    folder = tmp_path / "run"
    setup_logging(folder, stderr=False).info("one")
    setup_logging(folder, stderr=False).info("two")
    reset_logging()
    before = snapshot(folder)
    with pytest.raises(FileExistsError, match=rf"setup_logging: .*rank-0/debug\.log' {TAKEN}"):
        setup_logging(folder, stderr=False)
    assert_untouched(folder, before)
    setup_logging(folder, stderr=False, resume=True).info("three")
    reset_logging()
    text = (folder / "logs/train/rank-0/info.log").read_text()
    assert [w for w in ("one", "two", "three") if f"- {w}\n" in text] == ["one", "two", "three"]


def _two_rank_run(rank: int, folder: str, second: bool) -> str:
    from obsbus.log import reset_logging as reset
    from obsbus.log import setup_logging as setup

    try:
        if not second:
            setup(folder, stderr=False).info("first")
        with Run(max_duration="2ba", run_name=NAME, run_folder=folder, hparams={"second": second},
                 loggers=[RunReport(), FileLogger(write_period=0.0)]) as run:  # fmt: skip
            for _ in run.train([[0.0]] * 2):
                run.state.loss = 1.0
    except FileExistsError as exc:
        return f"refused: {exc}"
    finally:
        reset()
    return "ran"


def test_two_ranks_both_refuse_and_neither_writes(tmp_path):
    folder = tmp_path / NAME
    assert run_two_ranks(_two_rank_run, tmp_path / "first", str(folder), False) == ["ran", "ran"]
    before = snapshot(folder)
    assert {"logs-rank1.txt", "run-status-rank1.json", "logs/train/rank-1/info.log"} <= set(before)
    results = run_two_ranks(_two_rank_run, tmp_path / "second", str(folder), True)
    for rank, result in enumerate(results):
        assert result.startswith("refused: FileLogger: ") and f"logs-rank{rank}.txt" in result
    assert_untouched(folder, before)


RACE_SCRIPT = Path(__file__).parent / "scripts" / "refused_race_run.py"


def _next(out: Any, attempt: int) -> list[str]:
    while True:
        line = out.readline()
        assert line, f"the process ended before reporting attempt {attempt}"
        words = line.rstrip("\n").split(" ", 3)
        if words[0] in ("won", "lost") and int(words[1]) == attempt:
            return words


def test_of_two_runs_started_together_the_loser_writes_nothing(tmp_path):
    """Both start at one instant: the winner's run record and status are the only ones."""
    import subprocess
    import sys

    attempts, folder, barrier = 6, tmp_path / "race", tmp_path / "go"
    errs = [tmp_path / f"stderr-{n}.txt" for n in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(RACE_SCRIPT), str(folder), str(barrier), str(attempts)],
            stdout=subprocess.PIPE,
            stderr=err.open("w"),
            text=True,
            cwd=tmp_path,
        )
        for err in errs
    ]
    try:
        for i in range(attempts):
            for p, err in zip(procs, errs, strict=True):
                assert p.stdout is not None
                assert p.stdout.readline() == f"ready {i}\n", err.read_text()[-3000:]
            Path(f"{barrier}-{i}").touch()
            results = [_next(p.stdout, i) for p in procs]
            won = [int(r[2]) for r in results if r[0] == "won"]
            assert len(won) == 1, f"attempt {i}: {results}"
            lost = next(r for r in results if r[0] == "lost")
            assert lost[3].startswith("FileExistsError: FileLogger: "), lost
            path = folder.with_name(f"race-{i}")
            hparams = json.loads((path / "config/hparams.json").read_text())
            status = json.loads((path / "run-status-rank0.json").read_text())
            assert (hparams, status["status"]) == ({"pid": won[0]}, "finished"), f"attempt {i}"
        for p in procs:
            p.wait(timeout=120)
            assert p.returncode == 0
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_rerun_on_more_ranks_is_refused_on_every_rank_and_writes_nothing(tmp_path):
    """The earlier run had one rank: the new rank 0 finds its files taken, the new rank 1
    finds none of its own. The ranks agree at start (one collective), so rank 1 does not
    start a run of its own in a folder rank 0 was refused."""
    folder = tmp_path / NAME
    with Run(max_duration="2ba", run_name=NAME, run_folder=folder,
             loggers=[RunReport(), FileLogger(write_period=0.0)]) as run:  # fmt: skip
        for _ in run.train([[0.0]] * 2):
            run.state.loss = 1.0
    before = snapshot(folder)
    results = run_two_ranks(_two_rank_run, tmp_path / "second", str(folder), True)
    assert results[0].startswith("refused: FileLogger: ") and "logs-rank0.txt" in results[0]
    assert results[1].startswith("refused: ") and "rank 0" in results[1], results[1]
    assert_untouched(folder, before)
