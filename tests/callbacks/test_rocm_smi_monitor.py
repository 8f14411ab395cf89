"""RocmSmiMonitor: a fake rocm-smi on PATH prints rocm-smi's real text and JSON formats."""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path

import pytest

from obsbus import Logger, ObsbusWarning, Run, State, Timestamp
from obsbus.callbacks._rocm_smi import GpuReading, Probe, parse_rocm_smi, physical_gpu_index
from obsbus.callbacks.rocm_smi_monitor import RocmSmiMonitor
from obsbus.loggers import InMemoryLogger
from tests._dist_utils import run_two_ranks

FIXTURES = Path(__file__).parent / "fixtures" / "rocm_smi"
TOTAL = 68702699520
USED = {0: 10526720, 1: 58963439616, 2: 31457280000, 3: 6643777536}
NODE = {
    0: GpuReading(TOTAL, USED[0], 0.0),
    1: GpuReading(TOTAL, USED[1], 100.0),
    2: GpuReading(TOTAL, USED[2], 37.0),
    3: GpuReading(TOTAL, USED[3], None),  # "GPU use Unsupported"
}
ENV_VARS = (
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "FAKE_ROCM_SMI_MODE",
    "FAKE_ROCM_SMI_USED",
)
ROCM_KEYS = {
    "memory/rocm/used_vram_gb",
    "memory/rocm/total_vram_gb",
    "memory/rocm/free_vram_gb",
    "memory/rocm/used_vram_pct",
    "utilization/rocm/gpu_use_pct",
    "memory/rocm/max_used_vram_pct",
    "memory/rocm/max_used_vram_gb",
    "memory/rocm/max_rank",
}


def install_fake(bin_dir: Path) -> Path:
    """Write the fake as ``bin_dir/rocm-smi``, runnable by this interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / "rocm-smi"
    target.write_text(f"#!{sys.executable}\n" + (FIXTURES / "fake_rocm_smi.py").read_text())
    target.chmod(0o755)
    return target


@pytest.fixture
def calls(tmp_path, monkeypatch) -> Path:
    """A fake rocm-smi first on PATH; returns the file where it records each run."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    install_fake(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ROCM_SMI_FIXTURES", str(FIXTURES))
    record = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_ROCM_SMI_CALLS", str(record))
    return record


def runs(record: Path) -> list[list[str]]:
    return [line.split() for line in record.read_text().splitlines()] if record.exists() else []


def train(monitor, batches: int = 4, duration: str | None = None) -> InMemoryLogger:
    mem = InMemoryLogger()
    with Run(max_duration=duration or f"{batches}ba", callbacks=[monitor], loggers=[mem]) as run:
        for _ in run.train([[1.0]] * batches):
            pass
    return mem


def rocm_keys(mem: InMemoryLogger) -> set[str]:
    return {k for k in mem.data if "rocm" in k}


def expected(gpu: int) -> dict:
    used = USED[gpu]
    return {
        "memory/rocm/used_vram_gb": used / 1e9,
        "memory/rocm/total_vram_gb": TOTAL / 1e9,
        "memory/rocm/free_vram_gb": (TOTAL - used) / 1e9,
        "memory/rocm/used_vram_pct": 100.0 * used / TOTAL,
    }


# ---------------------------------------------------------------------------
# Parsing rocm-smi's output
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture",
    ["showmeminfo_vram_showuse.txt", "showmeminfo_vram_showuse_json.txt"],
    ids=["text", "json"],
)
def test_parse_fixture_exact_numbers(fixture):
    assert parse_rocm_smi((FIXTURES / fixture).read_text()) == NODE


def test_parse_legacy_release():
    out = (FIXTURES / "legacy_d0_showmeminfo_vram.txt").read_text()
    assert parse_rocm_smi(out) == {0: GpuReading(34342961152, 7028736, None)}


@pytest.mark.parametrize(
    ("output", "parsed"),
    [
        (
            "GPU[2] \t\t: VRAM Total Memory (B): 100\nGPU[2] \t\t: VRAM Total Used Memory (B): 25\n",
            {2: GpuReading(100, 25, None)},
        ),
        ("GPU[0]\t\t: Current GPU use: 42%\n", {0: GpuReading(None, None, 42.0)}),
        (
            '{"card1": {"GPU use (%)": "N/A", "VRAM Total Memory (B)": "8"}}',
            {1: GpuReading(8, None, None)},
        ),
        (
            'WARNING: a line before the JSON\n{"card0": {"VRAM Total Used Memory (B)": "3"}}\n',
            {0: GpuReading(None, 3, None)},
        ),
        ("WARNING: No AMD GPUs specified\n", {}),
        ("", {}),
        ('{"card0": ', {}),
        ("GPU[0]\t\t: GPU use Unsupported\n", {}),
    ],
    ids=[
        "old-prefix",
        "oldest-use-line",
        "json-na",
        "json-after-noise",
        "warning-only",
        "empty",
        "truncated-json",
        "no-values",
    ],
)
def test_parse_variants(output, parsed):
    assert parse_rocm_smi(output) == parsed


@pytest.mark.parametrize(
    ("visible", "env", "physical"),
    [
        (3, {}, 3),
        (1, {"HIP_VISIBLE_DEVICES": "4,5,6,7"}, 5),
        (1, {"CUDA_VISIBLE_DEVICES": "6, 7"}, 7),
        (0, {"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "5"}, 2),
        (1, {"ROCR_VISIBLE_DEVICES": "0,2,4"}, 2),
        (0, {"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"}, 3),
        (0, {"HIP_VISIBLE_DEVICES": "GPU-3b1c"}, None),
        (2, {"HIP_VISIBLE_DEVICES": "0,1"}, None),
        (0, {"HIP_VISIBLE_DEVICES": ""}, None),
    ],
    ids=[
        "none-set",
        "hip",
        "cuda",
        "hip-wins",
        "rocr",
        "rocr-then-hip",
        "uuid",
        "too-short",
        "empty",
    ],
)
def test_physical_gpu_index(visible, env, physical):
    assert physical_gpu_index(visible, env) == physical


# ---------------------------------------------------------------------------
# Construction errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"at_batches": [1], "log_interval": "10ba"},
            ValueError,
            "at_batches or log_interval, not both",
        ),
        (
            {"at_batches": "12"},
            TypeError,
            r"at_batches must be a list of batch numbers >= 1.*got '12'",
        ),
        ({"at_batches": [0]}, ValueError, r"got \[0\] \(bad entry 0\)"),
        ({"at_batches": [True]}, ValueError, r"bad entry True"),
        ({"at_batches": 3}, TypeError, "got 3"),
        ({"log_interval": "5sp"}, ValueError, "RocmSmiMonitor log_interval '5sp' is not supported"),
        ({"timeout": 0}, ValueError, "timeout must be a finite number of seconds > 0, got 0"),
        ({"timeout": math.nan}, ValueError, "got nan"),
        ({"timeout": True}, ValueError, "got True"),
        ({"executable": ""}, ValueError, "executable must be a command name or path"),
        (
            {"device_index": -1},
            ValueError,
            r"device_index must be a whole number >= 0 or None, got -1",
        ),
        ({"json_output": "yes"}, TypeError, "json_output must be True or False, got 'yes'"),
    ],
    ids=[
        "both",
        "string",
        "zero",
        "bool",
        "int",
        "bad-interval",
        "timeout-0",
        "timeout-nan",
        "timeout-bool",
        "executable",
        "device-index",
        "json-flag",
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        RocmSmiMonitor(**kwargs)


def test_command_follows_the_flags():
    assert RocmSmiMonitor(
        json_output=False, gpu_use=False, executable="/opt/rocm/bin/rocm-smi"
    ).command == ["/opt/rocm/bin/rocm-smi", "--showmeminfo", "vram"]


# ---------------------------------------------------------------------------
# When it runs, what it logs
# ---------------------------------------------------------------------------


def test_at_batches_default_runs_exactly_at_batches_1_and_2(calls):
    mem = train(RocmSmiMonitor(), batches=5)
    assert [argv[1:] for argv in runs(calls)] == [
        ["--showmeminfo", "vram", "--showuse", "--json"]
    ] * 2
    assert rocm_keys(mem) == ROCM_KEYS
    for key in ROCM_KEYS:
        assert mem.steps[key] == [1, 2], key
    values = {k: mem.most_recent_values[k] for k in ROCM_KEYS}
    assert values == {
        **expected(0),
        "utilization/rocm/gpu_use_pct": 0.0,
        "memory/rocm/max_used_vram_pct": 100.0 * USED[0] / TOTAL,
        "memory/rocm/max_used_vram_gb": USED[0] / 1e9,
        "memory/rocm/max_rank": 0,
    }


def test_custom_batches_and_an_empty_list(calls):
    mem = train(RocmSmiMonitor(at_batches=[3]), batches=4)
    assert len(runs(calls)) == 1 and mem.steps["memory/rocm/used_vram_gb"] == [3]
    mem = train(RocmSmiMonitor(at_batches=[]), batches=4)
    assert len(runs(calls)) == 1 and rocm_keys(mem) == set()


def test_interval_mode_in_batches(calls):
    mem = train(RocmSmiMonitor(log_interval="2ba"), batches=5)
    assert len(runs(calls)) == 2
    assert mem.steps["memory/rocm/used_vram_gb"] == [2, 4]


def test_interval_mode_in_epochs(calls):
    mem = train(RocmSmiMonitor(log_interval="1ep"), batches=2, duration="2ep")
    assert len(runs(calls)) == 2
    assert mem.steps["memory/rocm/used_vram_gb"] == [2, 4]  # the last batch of each epoch


def test_a_probe_at_the_last_batch_is_read_at_fit_end(calls):
    mem = train(RocmSmiMonitor(at_batches=[2]), batches=2)
    assert mem.steps["memory/rocm/used_vram_gb"] == [2]


@pytest.mark.parametrize(
    ("kwargs", "mode"),
    [({"json_output": False}, "normal"), ({}, "text")],
    ids=["text-requested", "text-despite-json-flag"],
)
def test_text_output_gives_the_same_numbers(calls, monkeypatch, kwargs, mode):
    monkeypatch.setenv("FAKE_ROCM_SMI_MODE", mode)
    mem = train(RocmSmiMonitor(at_batches=[1], device_index=1, **kwargs), batches=2)
    for key, value in expected(1).items():
        assert mem.most_recent_values[key] == value
    assert mem.most_recent_values["utilization/rocm/gpu_use_pct"] == 100.0


def test_local_rank_is_mapped_through_hip_visible_devices(calls, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2,3")
    mem = train(RocmSmiMonitor(at_batches=[1]), batches=2)
    for key, value in expected(3).items():  # local rank 1 -> GPU[3]
        assert mem.most_recent_values[key] == value
    assert "utilization/rocm/gpu_use_pct" not in mem.data  # GPU[3] reports no use


def test_without_reduction_no_max_keys(calls):
    mem = train(RocmSmiMonitor(at_batches=[1], reduce_across_ranks=False, gpu_use=False), batches=2)
    assert rocm_keys(mem) == {
        "memory/rocm/used_vram_gb",
        "memory/rocm/total_vram_gb",
        "memory/rocm/free_vram_gb",
        "memory/rocm/used_vram_pct",
    }
    assert runs(calls)[0][1:] == ["--showmeminfo", "vram", "--json"]


# ---------------------------------------------------------------------------
# Failures: one warning each, never a crash, never a long wait
# ---------------------------------------------------------------------------


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_hung_rocm_smi_costs_at_most_the_timeout_and_is_killed(calls, monkeypatch):
    monkeypatch.setenv("FAKE_ROCM_SMI_MODE", "hang")  # sleeps 120 s
    start = time.monotonic()
    with pytest.warns(ObsbusWarning, match=r"did not finish within timeout=0\.5s; it was killed"):
        mem = train(RocmSmiMonitor(at_batches=[1], timeout=0.5), batches=3)
    assert time.monotonic() - start < 5.0
    assert rocm_keys(mem) == set()
    [[pid, *_]] = runs(calls)
    assert _gone(int(pid)), "the hung rocm-smi was left running"


def test_starting_a_probe_does_not_wait_and_close_kills_it(calls, monkeypatch):
    monkeypatch.setenv("FAKE_ROCM_SMI_MODE", "hang")
    monitor = RocmSmiMonitor(at_batches=[1], timeout=60.0)
    state = State(run_name="r")
    logger = Logger(state, [InMemoryLogger()])
    state.timestamp = Timestamp(batch=1)
    start = time.monotonic()
    monitor.batch_end(state, logger)
    assert time.monotonic() - start < 0.5  # Popen runs on the probe's thread
    deadline = time.monotonic() + 5.0
    while not runs(calls) and time.monotonic() < deadline:
        time.sleep(0.02)
    [[pid, *_]] = runs(calls)
    monitor.close(state, logger)  # a run that ended early: no collective, kill the command
    assert _gone(int(pid))
    monitor.close(state, logger)


def test_probe_kills_its_command_at_the_deadline_by_itself(calls, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_ROCM_SMI_MODE", "hang")
    probe = Probe([str(tmp_path / "bin" / "rocm-smi")], timeout=0.3)
    start = time.monotonic()
    assert probe.wait() is False  # returns at the deadline, not when the command ends
    assert time.monotonic() - start < 1.0
    deadline = time.monotonic() + 5.0
    while not runs(calls) and time.monotonic() < deadline:
        time.sleep(0.02)
    [[pid, *_]] = runs(calls)
    assert _gone(int(pid))  # no cancel(): the probe's thread killed it
    assert probe.error == "timeout"


def test_probe_reports_a_missing_executable(tmp_path):
    probe = Probe([str(tmp_path / "nothing-here")], timeout=5.0)
    assert probe.wait() is True
    assert probe.error == "missing"


def test_missing_rocm_smi_warns_once_and_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monitor = RocmSmiMonitor()  # probes at batches 1 and 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem = train(monitor, batches=3)
        mem2 = train(monitor, batches=3)  # a second fit: still no second warning
    ours = [w for w in caught if issubclass(w.category, ObsbusWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "'rocm-smi' was not found on PATH, so no ROCm memory is logged" in str(ours[0].message)
    assert rocm_keys(mem) == rocm_keys(mem2) == set()


def test_missing_explicit_path_warns_once(tmp_path):
    with pytest.warns(ObsbusWarning, match="'/nowhere/rocm-smi' was not found"):
        mem = train(RocmSmiMonitor(executable="/nowhere/rocm-smi"), batches=3)
    assert rocm_keys(mem) == set()


@pytest.mark.parametrize(
    ("mode", "match"),
    [
        ("fail", r"exited with status 1: .*Driver not initialized"),
        ("garbage", r"could not read VRAM from rocm-smi's output 'WARNING: No AMD GPUs specified"),
    ],
    ids=["exit-status", "unparsable"],
)
def test_failing_rocm_smi_warns_once_then_summarizes_at_close(
    calls, monkeypatch, caplog, mode, match
):
    monkeypatch.setenv("FAKE_ROCM_SMI_MODE", mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with caplog.at_level(logging.WARNING, logger="obsbus"):
            monitor = RocmSmiMonitor(at_batches=[1, 2, 3])
            mem = train(monitor, batches=4)
            monitor.close(None, None)  # a second close says nothing new
    ours = [str(w.message) for w in caught if issubclass(w.category, ObsbusWarning)]
    assert len(ours) == 1 and re.search(match, ours[0]), ours
    assert len(runs(calls)) == 3
    assert rocm_keys(mem) == set()
    assert "failures repeated after their first warning" in caplog.text
    assert caplog.text.count("x3") == 1


def test_gpu_not_in_output_warns(calls):
    with pytest.warns(ObsbusWarning, match=r"reported GPUs \[0, 1, 2, 3\] but not GPU\[9\]"):
        mem = train(RocmSmiMonitor(at_batches=[1], device_index=9), batches=2)
    assert rocm_keys(mem) == set()


# ---------------------------------------------------------------------------
# Two ranks: MAX over ranks and which rank it is
# ---------------------------------------------------------------------------


def _two_rank_probe(rank: int, bin_dir: str, fixtures: str, record: str) -> dict:
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    os.environ["FAKE_ROCM_SMI_FIXTURES"] = fixtures
    os.environ["FAKE_ROCM_SMI_CALLS"] = record
    for name in ENV_VARS:
        os.environ.pop(name, None)
    out = {}
    # Rank r reads GPU[r] (its local rank): GPU[1] is far fuller than GPU[0].
    out["natural"] = train(RocmSmiMonitor(at_batches=[1, 2]), batches=3)
    if rank == 0:
        os.environ["FAKE_ROCM_SMI_USED"] = "0=65000000000"
    out["rank0_fuller"] = train(RocmSmiMonitor(at_batches=[2]), batches=3)
    return {
        name: {
            key: (mem.steps[key], mem.get_timeseries(key)[key]) for key in mem.data if "rocm" in key
        }
        for name, mem in out.items()
    }


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    root = tmp_path_factory.mktemp("rocm_two_ranks")
    install_fake(root / "bin")
    return run_two_ranks(
        _two_rank_probe, root, str(root / "bin"), str(FIXTURES), str(root / "calls.txt")
    )


@pytest.mark.dist
def test_two_ranks_report_their_own_gpu(two_ranks):
    for rank, out in enumerate(two_ranks):
        steps, values = out["natural"]["memory/rocm/used_vram_gb"]
        assert steps == [1, 2]
        assert values == [USED[rank] / 1e9] * 2


@pytest.mark.dist
def test_two_ranks_max_and_the_rank_that_holds_it(two_ranks):
    for out in two_ranks:
        natural = out["natural"]
        assert natural["memory/rocm/max_rank"] == ([1, 2], [1, 1])
        assert natural["memory/rocm/max_used_vram_gb"][1] == [USED[1] / 1e9] * 2
        assert natural["memory/rocm/max_used_vram_pct"][1] == [100.0 * USED[1] / TOTAL] * 2
        fuller = out["rank0_fuller"]
        assert fuller["memory/rocm/max_rank"] == ([2], [0])
        assert fuller["memory/rocm/max_used_vram_gb"][1] == [65.0]
        assert fuller["memory/rocm/max_used_vram_pct"][1] == [100.0 * 65e9 / TOTAL]
    assert two_ranks[1]["rank0_fuller"]["memory/rocm/used_vram_gb"][1] == [USED[1] / 1e9]
