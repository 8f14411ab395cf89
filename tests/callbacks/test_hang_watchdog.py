"""HangWatchdog: a step that blocks gets a dump per rank naming where it is stuck."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from obsbus import Callback, LoggerDestination, Run
from obsbus.callbacks.hang_watchdog import EXIT_CODE, THREAD_NAME, HangWatchdog

from .._dist_utils import run_two_ranks

REPO = Path(__file__).resolve().parents[2]


class SleepAt(Callback):
    """Sleeps ``seconds`` in batch_end of the batches in ``at`` (a step that blocks)."""

    def __init__(self, at: tuple[int, ...], seconds: float) -> None:
        self.at, self.seconds = at, seconds

    def batch_end(self, state, logger):
        if state.timestamp.batch.value in self.at:
            time.sleep(self.seconds)  # see https://alice:hunter2@example.com/blocked


class Receiver(LoggerDestination):
    """Takes files and alerts, from whichever thread hands them over."""

    def __init__(self, fail_alert: bool = False) -> None:
        self.uploads: list[tuple[str, Path, str]] = []
        self.alerts: list[tuple[str, str, str, Path | None]] = []
        self.fail_alert = fail_alert

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.uploads.append((remote_file_name, Path(file_path), threading.current_thread().name))

    def alert(self, title, text, *, level, file):
        if self.fail_alert:
            raise ConnectionError("alert endpoint down")
        self.alerts.append((title, text, level, file))


def train(callbacks, loggers=(), batches=4, run_folder="run"):
    with Run(
        max_duration=f"{batches}ba",
        callbacks=callbacks,
        loggers=loggers,
        run_folder=run_folder,
        run_name="hang-test",
    ) as run:
        for _ in run.train([[1.0]] * batches):
            pass
    return run


# ------------------------------------------------------------ construction
@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30min", 1800.0),
        ("90s", 90.0),
        ("2h", 7200.0),
        ("1h30min", 5400.0),
        ("45m", 2700.0),
        ("30sec", 30.0),
        (0.5, 0.5),
        (12, 12.0),
        (timedelta(minutes=2), 120.0),
    ],
    ids=["30min", "90s", "2h", "1h30min", "45m", "30sec", "float", "int", "timedelta"],
)
def test_timeout_forms(value, seconds):
    dog = HangWatchdog(timeout=value)
    assert dog.timeout == seconds
    assert dog.first_batch_timeout == seconds  # None: the same allowance as every batch


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("30ba", ValueError),
        ("soon", ValueError),
        ("", ValueError),
        ("-5s", ValueError),
        ("0s", ValueError),
        (0, ValueError),
        (-1.0, ValueError),
        (float("nan"), ValueError),
        (True, TypeError),
        ([30], TypeError),
    ],
    ids=[
        "batches",
        "word",
        "empty",
        "negative-str",
        "zero-str",
        "zero",
        "negative",
        "nan",
        "bool",
        "list",
    ],
)
def test_bad_timeout_is_refused_with_what_is_accepted(value, error):
    with pytest.raises(error, match=r"HangWatchdog timeout must be .*"):
        HangWatchdog(timeout=value)
    if error is ValueError and isinstance(value, str):
        with pytest.raises(error, match=r"'30min', '90s', '2h'.*got " + repr(value)):
            HangWatchdog(timeout=value)


def test_bad_arguments():
    with pytest.raises(
        ValueError,
        match=r"on_hang must be one of \('dump', 'dump_and_exit'\), "
        r"got 'exit'",
    ):
        HangWatchdog(on_hang="exit")
    with pytest.raises(ValueError, match=r"first_batch_timeout must be .*got '1ep'"):
        HangWatchdog(first_batch_timeout="1ep")
    with pytest.raises(ValueError, match="unknown placeholder"):
        HangWatchdog(dump_folder="hangs/{rnak}")
    assert HangWatchdog(timeout=1, first_batch_timeout="10min").first_batch_timeout == 600.0
    assert HangWatchdog.EXIT_CODE == EXIT_CODE == 87


# ------------------------------------------------------------- one process
def test_blocked_step_dumps_stacks_summary_and_hands_file_over():
    dog = HangWatchdog(timeout=0.3)
    receiver = Receiver()
    train([SleepAt(at=(2,), seconds=1.5), dog], loggers=[receiver])

    assert len(dog.dumps) == 1
    path = dog.dumps[0]
    assert path.parent == Path("run", "hangs").resolve()
    assert path.name.startswith("rank0-") and path.suffix == ".txt"
    text = path.read_text()
    assert "rank: 0 of 1" in text
    assert "run: hang-test" in text
    assert "epoch: 0  batch: 2" in text  # two batches counted; the second's batch_end blocks
    assert "last event seen: batch_end" in text
    assert "event in progress: batch_end (in SleepAt.batch_end)" in text
    line = SleepAt.batch_end.__code__.co_firstlineno + 2
    assert f"blocked frame: SleepAt.batch_end ({__file__}:{line})" in text
    assert "[training thread]" in text and "time.sleep(self.seconds)" in text
    assert "== faulthandler.dump_traceback(all_threads=True) ==" in text
    assert f'File "{__file__}", line {line} in batch_end' in text  # faulthandler's own format
    assert "CUDA is not initialized in this process." in text
    assert "hunter2" not in text, text
    assert "https://***@example.com/blocked" in text  # the quoted source line is masked

    remote, uploaded, thread = receiver.uploads[-1]
    assert (remote, uploaded) == (f"hang-test/hangs/{path.name}", path)
    assert thread.startswith(THREAD_NAME)  # handed over while the training thread was stuck
    [(title, alert_text, level, file)] = receiver.alerts
    assert title == "Hang on rank 0 of run hang-test" and level == "error" and file == path
    assert "last event batch_end" in alert_text and "SleepAt.batch_end" in alert_text
    assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


def test_healthy_run_writes_nothing_and_the_thread_ends():
    dog = HangWatchdog(timeout=30)
    train([dog], batches=20)
    assert dog.dumps == []
    assert not Path("run", "hangs").exists()
    assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


def test_each_stall_dumps_once_and_the_watch_rearms(caplog):
    dog = HangWatchdog(timeout=0.3)
    with caplog.at_level("WARNING", logger="obsbus"):
        train([SleepAt(at=(2, 4), seconds=1.2), dog], batches=5)
    assert len(dog.dumps) == 2  # a 1.2 s stall is one hang, not four
    assert ["batch: 2 " in p.read_text() for p in dog.dumps] == [True, False]
    assert "epoch: 0  batch: 4" in dog.dumps[1].read_text()
    resumed = [r for r in caplog.records if "batches resumed" in r.getMessage()]
    assert len(resumed) == 2
    errors = [
        r for r in caplog.records if r.levelname == "ERROR" and "HangWatchdog" in r.getMessage()
    ]
    assert len(errors) == 2 and "no batch has ended" in errors[0].getMessage()


class SleepBeforeFirstBatch(Callback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def batch_start(self, state, logger):
        if state.timestamp.batch.value == 0:
            time.sleep(self.seconds)  # compiling, say


@pytest.mark.parametrize(("first", "dumps"), [(5.0, 0), (None, 1)], ids=["allowance", "none"])
def test_first_batch_timeout(first, dumps):
    dog = HangWatchdog(timeout=0.3, first_batch_timeout=first)
    train([SleepBeforeFirstBatch(1.2), dog], batches=2)
    assert len(dog.dumps) == dumps
    if dumps:
        assert "event in progress: batch_start (in SleepBeforeFirstBatch.batch_start)" in (
            dog.dumps[0].read_text()
        )


def test_an_alert_that_fails_is_contained(caplog):
    dog = HangWatchdog(timeout=0.3, dump_folder="{run_name}-hangs")
    receiver = Receiver(fail_alert=True)
    with caplog.at_level("ERROR", logger="obsbus"):
        train([SleepAt(at=(1,), seconds=1.2), dog], loggers=[receiver], batches=2)
    assert [p.parent.name for p in dog.dumps] == ["hang-test-hangs"]
    assert receiver.uploads and not receiver.alerts
    assert any("Receiver.alert failed" in r.getMessage() for r in caplog.records)


def test_two_fits_and_close_twice():
    dog = HangWatchdog(timeout=0.3)
    run = Run(callbacks=[SleepAt(at=(3,), seconds=1.2), dog], run_folder="run")
    for _ in range(2):  # batches 1-2, then 3-4: the second fit's first batch stalls
        with run.fitting():
            for _ in run.epoch([[1.0]] * 2):
                pass
        assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]
    run.close()
    assert [p.read_text().count("batch: 3 ") for p in dog.dumps] == [1]
    dog.close(run.state, run.logger)
    dog.close(run.state, run.logger)
    assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


# ------------------------------------------------------------ dump_and_exit
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import torch
    from obsbus import Callback, Run
    from obsbus.callbacks.hang_watchdog import HangWatchdog
    from obsbus.loggers import FileLogger

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank,
                                world_size=world)

    def stuck_all_reduce():
        dist.all_reduce(torch.ones(1))  # rank 1 never joins

    def stuck_sleep():
        time.sleep(120)

    class Block(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch.value == 3:
                stuck_all_reduce() if world > 1 and rank == 0 else stuck_sleep()

    dog = HangWatchdog(timeout=1.0, on_hang="dump_and_exit", exit_grace=3.0)
    with Run(max_duration="5ba", callbacks=[Block(), dog], run_folder=sys.argv[1],
             run_name="exit-test", loggers=[FileLogger(write_period=60.0)]) as run:
        for x in run.train([torch.ones(1)] * 5):
            run.state.loss = x.sum() * (run.state.timestamp.batch.value + 1)
    print("not reached")
    """
)


def _launch(tmp_path: Path, world: int) -> list[subprocess.CompletedProcess[str]]:
    script = tmp_path / "train_and_hang.py"
    script.write_text(SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GLOO_SOCKET_IFNAME": "lo",
        "OBSBUS_RUN_NAME": "exit-test",
    }
    procs = []
    for rank in range(world):
        rank_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(world)}
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(tmp_path / "run"), str(tmp_path / "rendezvous")],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    done = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.parametrize("world", [1, 2], ids=["one-rank", "two-ranks-gloo"])
def test_dump_and_exit_exits_with_the_code_and_keeps_the_metrics(tmp_path, world):
    results = _launch(tmp_path, world)
    for rank, result in enumerate(results):
        assert result.returncode == EXIT_CODE, result.stderr
        assert "not reached" not in result.stdout
        assert f"exiting with code {EXIT_CODE}" in result.stderr
        rows = [
            json.loads(line)
            for line in (tmp_path / "run" / f"metrics-rank{rank}.jsonl").read_text().splitlines()
        ]
        # batch 3's loss is logged before its batch_end blocks; write_period=60 s means only
        # the watchdog's flush can have written them.
        assert [r["step"] for r in rows if "loss/train/total" in r] == [1, 2, 3]
        assert [r["loss/train/total"] for r in rows if "loss/train/total" in r] == [1.0, 2.0, 3.0]
        [dump] = (tmp_path / "run" / "hangs").glob(f"rank{rank}-*.txt")
        text = dump.read_text()
        assert f"rank: {rank} of {world}" in text
        assert "last event seen: batch_end" in text
        assert "event in progress: batch_end (in Block.batch_end)" in text
        if world > 1 and rank == 0:
            assert "blocked frame: all_reduce (" in text  # torch's own frame, innermost
            assert "call site: stuck_all_reduce (" in text
        else:
            assert "blocked frame: stuck_sleep (" in text


# ----------------------------------------------------------- two ranks, dump
def _blocked_rank(rank, folder):
    import torch
    import torch.distributed as dist

    class Block(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch.value == 3:
                if rank == 0:
                    with contextlib.suppress(RuntimeError):  # rank 1 left without joining
                        rank0_all_reduce(dist, torch)
                else:
                    rank1_never_joins()

    dog = HangWatchdog(timeout=0.5)
    with Run(
        max_duration="3ba", callbacks=[Block(), dog], run_folder=folder, run_name="two-ranks"
    ) as run:
        for _ in run.train([[1.0]] * 3):
            pass
    return [p.read_text() for p in dog.dumps]


def rank0_all_reduce(dist, torch):
    dist.all_reduce(torch.ones(1))


def rank1_never_joins():
    time.sleep(3.0)  # past rank 0's timeout, then leave without joining the all_reduce


def test_two_ranks_each_dump_their_own_blocked_frame(tmp_path):
    texts = run_two_ranks(_blocked_rank, tmp_path / "ranks", str(tmp_path / "run"), timeout=10.0)
    [rank0], [rank1] = texts
    assert "rank: 0 of 2" in rank0 and "rank: 1 of 2" in rank1
    for text in (rank0, rank1):
        assert "last event seen: batch_end" in text and "epoch: 0  batch: 3" in text
    assert "blocked frame: all_reduce (" in rank0
    assert "call site: rank0_all_reduce (" in rank0
    assert "blocked frame: rank1_never_joins (" in rank1
    assert sorted(p.name[:5] for p in (tmp_path / "run" / "hangs").iterdir()) == ["rank0", "rank1"]


# ---------------------------------------------------------------- alerts, CUDA
def test_a_real_webhook_destination_receives_the_hang(monkeypatch):
    from obsbus.loggers.alerts import WebhookLogger

    from ..loggers._http_server import WebhookServer

    server = WebhookServer("ok").start()
    try:
        monkeypatch.setenv("OBSBUS_TEST_HOOK_URL", server.url())
        hook = WebhookLogger(url_env="OBSBUS_TEST_HOOK_URL", on_start=False, on_finish=False)
        dog = HangWatchdog(timeout=0.3)
        train([SleepAt(at=(2,), seconds=1.2), dog], loggers=[hook], batches=3)
    finally:
        server.stop()
    sent = [json.dumps(p) for p in server.payloads]
    hangs = [p for p in sent if "Hang on rank 0 of run hang-test" in p]
    assert len(hangs) == 1, sent
    assert dog.dumps[0].name in hangs[0]


class FakeCuda:
    """torch.cuda as the dump reads it: initialized, two devices, allocator stats."""

    def __init__(self, stall: float = 0.0) -> None:
        self.stall = stall
        self.release = threading.Event()

    def is_initialized(self):
        return True

    def device_count(self):
        return 2

    def memory_stats(self, index):
        self.release.wait(self.stall)  # an allocator lock held by the stuck thread
        mib = 2**20
        return {
            "allocated_bytes.all.current": (index + 1) * 3 * mib,
            "allocated_bytes.all.peak": 8 * mib,
            "reserved_bytes.all.current": 16 * mib,
            "reserved_bytes.all.peak": 32 * mib,
            "num_alloc_retries": 1,
            "num_ooms": 0,
        }


class FakeTorch:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda


def test_cuda_memory_stats_are_read_when_cuda_is_initialized(monkeypatch):
    from types import SimpleNamespace

    from obsbus import State
    from obsbus.callbacks import _watchdog_dump

    monkeypatch.setitem(sys.modules, "torch", FakeTorch(FakeCuda()))
    state = State(run_name="r")
    lines = _watchdog_dump.cuda_memory(state)  # no CUDA device on the state: every device
    assert [line.split(":")[1] for line in lines] == ["0", "1"]
    assert lines[1].startswith("cuda:1: allocated_bytes.all.current=6.0 MiB, ")
    assert "reserved_bytes.all.peak=32.0 MiB, num_alloc_retries=1, num_ooms=0" in lines[0]
    state.device = SimpleNamespace(type="cuda", index=1)  # this rank's device only
    assert [line.split(":")[1] for line in _watchdog_dump.cuda_memory(state)] == ["1"]


def test_cuda_memory_stats_that_hang_are_given_up(monkeypatch):
    from obsbus import State
    from obsbus.callbacks import _watchdog_dump

    cuda = FakeCuda(stall=5.0)
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(cuda))
    monkeypatch.setattr(_watchdog_dump, "CUDA_WAIT_S", 0.2)
    try:
        assert _watchdog_dump.cuda_memory(State(run_name="r")) == [
            "not read within 0.2 s (the stuck thread may hold the allocator)"
        ]
    finally:
        cuda.release.set()  # the reader thread ends, so no later test sees it


def test_two_stalls_in_one_second_keep_both_dumps():
    dog = HangWatchdog(timeout=0.1)
    train([SleepAt(at=(1, 2), seconds=0.4), dog], batches=3)
    assert len(dog.dumps) == 2
    assert len({p.name for p in dog.dumps}) == 2
    assert all(p.exists() for p in dog.dumps)


class SleepInEvalAndPredict(Callback):
    def eval_batch_end(self, state, logger):
        time.sleep(1.0)

    def predict_batch_end(self, state, logger):
        time.sleep(1.0)


@pytest.mark.parametrize("mode", ["eval", "predict"])
def test_standalone_eval_and_predict_are_watched(mode):
    dog = HangWatchdog(timeout=0.3)
    run = Run(callbacks=[SleepInEvalAndPredict(), dog], run_folder="run", run_name="alone")
    for _ in getattr(run, mode)([[1.0]]):
        pass
    assert not [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]
    run.close()
    [dump] = dog.dumps
    hook = f"{mode}_batch_end (in SleepInEvalAndPredict.{mode}_batch_end)"
    assert f"event in progress: {hook}" in dump.read_text()


def test_predict_inside_a_fit_keeps_the_fit_watched():
    dog = HangWatchdog(timeout=0.3)
    with Run(
        max_duration="3ba", callbacks=[SleepAt(at=(2,), seconds=1.2), dog], run_folder="run"
    ) as run:
        for _ in run.train([[1.0]] * 3):
            if run.state.timestamp.batch.value == 1:
                for _ in run.predict([[2.0]]):
                    pass
    assert ["batch: 2 " in p.read_text() for p in dog.dumps] == [True]
