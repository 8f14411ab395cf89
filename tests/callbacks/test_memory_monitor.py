"""MemoryMonitor: allocator keys from a memory_stats() dict, host RSS on CPU, min/avg/max over ranks."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from obsbus import Logger, Run, State, Timestamp, Trainer
from obsbus.callbacks.memory_monitor import MemoryMonitor, cuda_memory_report
from obsbus.loggers import InMemoryLogger
from tests._dist_utils import run_two_ranks

from ..helpers import regression_data, tiny_model
from ..test_values import SyncsPerBatch, SyncSpy

# The shape torch 2.x's torch.cuda.memory_stats() returns (flat "stat.pool.metric"
# keys, pools all/large_pool/small_pool, event counters, requested_bytes, the
# flattened private-pool keys); a trimmed copy with the pools and neighbours
# that the conversion must not pick up. Values: a mid-size model after a few
# steps on an 80 GB card.
CUDA_STATS = {
    "active.all.allocated": 48213,
    "active.all.current": 1893,
    "active.all.freed": 46320,
    "active.all.peak": 2671,
    "active_bytes.all.allocated": 2_870_457_974_272,
    "active_bytes.all.current": 17_213_423_616,
    "active_bytes.all.freed": 2_853_244_550_656,
    "active_bytes.all.peak": 41_909_485_568,
    "active_bytes.large_pool.current": 17_196_646_400,
    "active_bytes.small_pool.current": 16_777_216,
    "allocated_bytes.all.allocated": 2_870_391_881_728,
    "allocated_bytes.all.current": 17_179_869_184,
    "allocated_bytes.all.freed": 2_853_212_012_544,
    "allocated_bytes.all.peak": 41_875_931_136,
    "allocated_bytes.large_pool.current": 17_163_091_968,
    "allocated_bytes.large_pool.peak": 41_859_153_920,
    "allocated_bytes.small_pool.current": 16_777_216,
    "allocation.all.current": 1893,
    "inactive_split.all.current": 37,
    "inactive_split_bytes.all.current": 1_128_267_776,
    "inactive_split_bytes.all.peak": 3_221_225_472,
    "inactive_split_bytes.large_pool.current": 1_126_170_624,
    "max_split_size": -1,
    "num_alloc_retries": 2,
    "num_device_alloc": 412,
    "num_device_free": 0,
    "num_ooms": 0,
    "num_sync_all_streams": 0,
    "oversize_allocations.current": 0,
    "oversize_segments.current": 0,
    "requested_bytes.all.current": 17_178_984_448,
    "requested_bytes.all.peak": 41_874_897_920,
    "reserved_bytes.all.allocated": 45_097_156_608,
    "reserved_bytes.all.current": 45_097_156_608,
    "reserved_bytes.all.freed": 0,
    "reserved_bytes.all.peak": 45_097_156_608,
    "reserved_bytes.large_pool.current": 45_055_213_568,
    "reserved_bytes.small_pool.current": 41_943_040,
    "reserved_bytes_by_private_pools.0_1.all.current": 2_097_152,
    "segment.all.current": 412,
}

CUDA_REPORT = {
    "memory/current_allocated_mem": 17.179869184,
    "memory/current_active_mem": 17.213423616,
    "memory/current_inactive_mem": 1.128267776,
    "memory/current_reserved_mem": 45.097156608,
    "memory/peak_allocated_mem": 41.875931136,
    "memory/peak_active_mem": 41.909485568,
    "memory/peak_inactive_mem": 3.221225472,
    "memory/peak_reserved_mem": 45.097156608,
    "memory/alloc_retries": 2,
    "memory/num_ooms": 0,
}
HOST_KEYS = {"memory/host_rss_mem", "memory/host_peak_rss_mem"}


def test_report_from_a_memory_stats_dict():
    report = cuda_memory_report(CUDA_STATS)
    assert list(report) == list(CUDA_REPORT)  # order is the documented order
    assert report == pytest.approx(CUDA_REPORT, rel=1e-12)
    assert isinstance(report["memory/alloc_retries"], int)
    assert isinstance(report["memory/num_ooms"], int)


def test_report_of_an_uninitialized_device_is_empty():
    assert cuda_memory_report({}) == {}


def train(monitor, batches: int = 4) -> InMemoryLogger:
    mem = InMemoryLogger()
    with Run(max_duration=f"{batches}ba", callbacks=[monitor], loggers=[mem]) as run:
        for _ in run.train([[1.0]] * batches):
            pass
    return mem


def test_cpu_run_logs_host_rss_and_no_allocator_keys():
    mem = train(MemoryMonitor(log_interval="2ba"), batches=5)
    assert set(mem.data) - {"loss/train/total"} == HOST_KEYS
    assert mem.steps["memory/host_rss_mem"] == [2, 4]
    rss = mem.most_recent_values["memory/host_rss_mem"]
    peak = mem.most_recent_values["memory/host_peak_rss_mem"]
    assert 0.01 < rss < 1000  # GB: a Python process with torch holds tens of MB at least
    assert peak >= rss * 0.99


def test_epoch_interval():
    mem = InMemoryLogger()
    with Run(
        max_duration="2ep", callbacks=[MemoryMonitor(log_interval="1ep")], loggers=[mem]
    ) as run:
        for _ in run.train([[1.0]] * 3):
            pass
    assert mem.steps["memory/host_rss_mem"] == [3, 6]


def test_host_memory_false_on_cpu_logs_nothing():
    mem = train(MemoryMonitor(host_memory=False))
    assert not [k for k in mem.data if k.startswith("memory/")]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"log_interval": "5sp"}, ValueError, "MemoryMonitor log_interval '5sp' is not supported"),
        ({"log_interval": 0}, ValueError, "MemoryMonitor log_interval '0ba' is not supported"),
        (
            {"reduce_across_ranks": "yes"},
            TypeError,
            "reduce_across_ranks must be True or False, got 'yes'",
        ),
        ({"reset_peaks": 1}, TypeError, "reset_peaks must be True or False, got 1"),
        ({"host_memory": "auto"}, TypeError, "host_memory must be None, True or False, got 'auto'"),
    ],
    ids=["unit", "zero", "reduce", "reset", "host"],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        MemoryMonitor(**kwargs)


# ---------------------------------------------------------------------------
# The GPU path on a CPU machine: torch.cuda's allocator query replaced by a fake
# ---------------------------------------------------------------------------


class FakeAllocator:
    """Stands in for torch.cuda.memory_stats / reset_peak_memory_stats."""

    def __init__(self, stats):
        self.stats = stats
        self.queries: list = []
        self.resets: list = []

    def memory_stats(self, device=None):
        self.queries.append(device)
        return dict(self.stats)

    def reset_peak_memory_stats(self, device=None):
        self.resets.append(device)


@pytest.fixture
def allocator(monkeypatch):
    fake = FakeAllocator(CUDA_STATS)
    monkeypatch.setattr(torch.cuda, "memory_stats", fake.memory_stats)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", fake.reset_peak_memory_stats)
    return fake


def drive(monitor, batches: int, device="cuda:1"):
    """Call the hooks as a loop on ``device`` would, without a GPU."""
    state = State(run_name="r", device=device)
    mem = InMemoryLogger()
    logger = Logger(state, [mem])
    monitor.fit_start(state, logger)
    for batch in range(1, batches + 1):
        state.timestamp = Timestamp(batch=batch)
        monitor.batch_end(state, logger)
    return state, logger, mem


def test_gpu_run_logs_allocator_keys_only_at_log_steps(allocator):
    _, _, mem = drive(MemoryMonitor(log_interval="2ba"), batches=5)
    assert allocator.queries == [1, 1]  # batches 2 and 4, on cuda:1; nothing in between
    assert set(mem.data) == set(CUDA_REPORT)  # no host keys on a GPU run
    assert mem.steps["memory/peak_allocated_mem"] == [2, 4]
    assert {k: mem.most_recent_values[k] for k in CUDA_REPORT} == pytest.approx(CUDA_REPORT)
    assert allocator.resets == []  # peaks run from process start by default


def test_reset_peaks_after_each_log(allocator):
    drive(MemoryMonitor(log_interval="2ba", reset_peaks=True), batches=4)
    assert allocator.resets == [1, 1]


def test_host_memory_true_adds_host_keys_on_gpu(allocator):
    _, _, mem = drive(MemoryMonitor(host_memory=True), batches=1)
    assert set(mem.data) == set(CUDA_REPORT) | HOST_KEYS


def test_device_from_the_model_when_the_loop_names_none(allocator):
    state = State(run_name="r", model=torch.nn.Linear(2, 2))
    monitor, mem = MemoryMonitor(), InMemoryLogger()
    monitor.fit_start(state, Logger(state, [mem]))
    state.timestamp = Timestamp(batch=1)
    monitor.batch_end(state, Logger(state, [mem]))
    assert allocator.queries == [] and set(mem.data) == HOST_KEYS  # a CPU model


def test_out_of_memory_logs_the_last_picture(allocator):
    state, logger, mem = drive(MemoryMonitor(log_interval="100ba"), batches=3)
    assert mem.data == {}
    state.exception = RuntimeError("not memory")
    MemoryMonitor().exception(state, logger)  # other errors: nothing
    assert mem.data == {}
    monitor = MemoryMonitor(log_interval="100ba")
    monitor.fit_start(state, logger)
    state.exception = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monitor.exception(state, logger)
    assert set(mem.data) == set(CUDA_REPORT)
    assert mem.steps["memory/num_ooms"] == [3]
    try:  # an OOM the loop wrapped in its own error still counts
        try:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        except torch.cuda.OutOfMemoryError as oom:
            raise RuntimeError("step 4 failed") from oom
    except RuntimeError as wrapped:
        state.exception = wrapped
    state.timestamp = Timestamp(batch=4)
    monitor.exception(state, logger)
    assert mem.steps["memory/num_ooms"] == [3, 4]


def test_reduction_on_one_process_is_the_value_itself(allocator):
    _, _, mem = drive(MemoryMonitor(reduce_across_ranks=True), batches=1)
    for key, value in CUDA_REPORT.items():
        for stat in ("min", "avg", "max"):
            assert mem.most_recent_values[f"{key}_{stat}"] == pytest.approx(value)


# ---------------------------------------------------------------------------
# No device syncs on steps that do not log
# ---------------------------------------------------------------------------


def test_steps_that_do_not_log_never_sync():
    spy = SyncSpy()
    recorder = SyncsPerBatch(spy)
    model = tiny_model()
    trainer = Trainer(
        model,
        regression_data(8),
        "1ep",
        loss_fn=F.mse_loss,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
        device="cpu",
        callbacks=[MemoryMonitor(log_interval="4ba", reduce_across_ranks=True), recorder],
        loggers=[InMemoryLogger()],
    )
    with spy:
        trainer.fit()
    trainer.close()
    assert set(recorder.per_batch) == set(range(1, 9))
    for batch, syncs in recorder.per_batch.items():
        if batch % 4:
            assert syncs == [], f"batch {batch} synced: {syncs}"


# ---------------------------------------------------------------------------
# Two ranks: min/avg/max, one all_reduce
# ---------------------------------------------------------------------------


def _two_rank_memory(rank: int) -> dict:
    import torch

    from obsbus import Logger, State, Timestamp
    from obsbus.callbacks.memory_monitor import MemoryMonitor
    from obsbus.loggers import InMemoryLogger

    # Rank r's allocator holds (r + 1) x the sample: exact, known min/avg/max.
    scaled = {k: v * (rank + 1) for k, v in CUDA_STATS.items()}
    torch.cuda.memory_stats = lambda device=None: dict(scaled)
    state = State(run_name="two", device="cuda:0")
    mem = InMemoryLogger()
    logger = Logger(state, [mem])
    monitor = MemoryMonitor(log_interval="2ba", reduce_across_ranks=True)
    monitor.fit_start(state, logger)
    for batch in (1, 2, 3, 4):
        state.timestamp = Timestamp(batch=batch)
        monitor.batch_end(state, logger)
    gpu = {key: (mem.steps[key], mem.get_timeseries(key)[key]) for key in mem.data}

    # The host path, with a real difference between the ranks.
    ballast = bytearray(200_000_000 if rank == 1 else 0)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touch the pages so they are resident
    host = train(MemoryMonitor(reduce_across_ranks=True), batches=2)
    del ballast
    return {"gpu": gpu, "host": {k: host.most_recent_values[k] for k in host.data}}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_two_ranks(_two_rank_memory, tmp_path_factory.mktemp("memory_two_ranks"))


@pytest.mark.dist
def test_two_ranks_min_avg_max_of_allocator_keys(two_ranks):
    for rank, out in enumerate(two_ranks):
        gpu = out["gpu"]
        for key, value in CUDA_REPORT.items():
            assert gpu[key][0] == [2, 4]
            assert gpu[key][1] == pytest.approx([value * (rank + 1)] * 2)
            assert gpu[f"{key}_min"][1] == pytest.approx([value] * 2)
            assert gpu[f"{key}_avg"][1] == pytest.approx([value * 1.5] * 2)
            assert gpu[f"{key}_max"][1] == pytest.approx([value * 2] * 2)


@pytest.mark.dist
def test_two_ranks_host_rss_reduced(two_ranks):
    own = [out["host"]["memory/host_rss_mem"] for out in two_ranks]
    assert own[1] > own[0] + 0.1  # rank 1 holds 0.2 GB more
    for out in two_ranks:
        host = out["host"]
        assert host["memory/host_rss_mem_min"] == own[0]
        assert host["memory/host_rss_mem_max"] == own[1]
        assert host["memory/host_rss_mem_avg"] == pytest.approx((own[0] + own[1]) / 2, rel=1e-12)
        assert host["memory/host_peak_rss_mem_max"] >= own[1] * 0.99


def test_the_fast_rss_reading_agrees_with_psutil():
    import psutil

    from obsbus.callbacks.memory_monitor import _rss_bytes

    block = bytearray(64 * 2**20)  # 64 MiB touched, so the RSS moves
    block[::4096] = b"x" * len(block[::4096])
    fast, reference = _rss_bytes(), psutil.Process().memory_info().rss
    assert abs(fast - reference) < 8 * 2**20
    del block


def test_a_forked_child_reads_its_own_rss_not_its_parents():
    import psutil

    from obsbus.callbacks.memory_monitor import _rss_bytes

    _rss_bytes()  # opens the descriptor of the parent's /proc/self/statm
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: grow by 256 MiB, then report the reading and the truth
        code = 1
        try:
            block = bytearray(256 * 2**20)
            block[::4096] = b"x" * len(block[::4096])
            truth = psutil.Process().memory_info().rss  # the child's own, read afresh
            os.write(write, f"{_rss_bytes()} {truth}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    reading, truth = map(int, os.read(read, 128).decode().split())
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent = _rss_bytes()
    assert abs(truth - parent) > 64 * 2**20  # the two processes' RSS tell apart
    assert abs(reading - truth) < 8 * 2**20, (reading, truth, parent)


# ---------------------------------------------------------------------------
# Composer's arguments: memory_keys, dist_aggregate_batch_interval
# ---------------------------------------------------------------------------


def test_memory_keys_as_composers(allocator):
    """Composer's ``MemoryMonitor(memory_keys={torch name: logged name})``
    (``composer/callbacks/memory_monitor.py``, ``_get_memory_report``): only those, byte counts
    in GB with ``bytes`` in the logged name turned into ``gigabytes``, counts as they are."""
    keys = {"allocated_bytes.all.current": "allocated_bytes", "num_alloc_retries": "retries",
            "no_such_stat": "missing"}
    _, _, mem = drive(MemoryMonitor(memory_keys=keys), batches=1)
    assert set(mem.data) == {"memory/allocated_gigabytes", "memory/retries"}
    assert mem.most_recent_values["memory/allocated_gigabytes"] == pytest.approx(
        CUDA_STATS["allocated_bytes.all.current"] / 1e9)
    assert mem.most_recent_values["memory/retries"] == CUDA_STATS["num_alloc_retries"]
    assert cuda_memory_report(CUDA_STATS, keys) == {k: mem.most_recent_values[k] for k in mem.data}


def test_dist_aggregate_batch_interval_reduces_every_n_batches(allocator):
    """Composer: with ``dist_aggregate_batch_interval=N`` the ``_avg``/``_min``/``_max``
    keys come at batches that are multiples of N; the plain keys every batch."""
    _, _, mem = drive(MemoryMonitor(dist_aggregate_batch_interval=2), batches=5)
    assert mem.steps["memory/peak_allocated_mem"] == [1, 2, 3, 4, 5]
    for stat in ("min", "avg", "max"):
        assert mem.steps[f"memory/peak_allocated_mem_{stat}"] == [2, 4]
        assert mem.most_recent_values[f"memory/peak_allocated_mem_{stat}"] == pytest.approx(
            CUDA_REPORT["memory/peak_allocated_mem"])


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (({"allocated_bytes.all.current": "a"},), {}, TypeError,
         r"Composer's first argument is memory_keys; obsbus's is log_interval\. To fix, write "
         r"MemoryMonitor\(memory_keys=\{\.\.\.\}\)"),
        ((), {"memory_keys": {"allocated_bytes.all.current": 3}}, TypeError,
         r"memory_keys must be a dict with str keys and non-empty str values; "
         r"'allocated_bytes.all.current' holds 3"),
        ((), {"memory_keys": ["allocated_bytes.all.current"]}, TypeError, "memory_keys must be a dict"),
        ((), {"dist_aggregate_batch_interval": 0}, ValueError,
         "dist_aggregate_batch_interval must be a whole number >= 1, got 0"),
        ((), {"dist_aggregate_batch_interval": 2, "reduce_across_ranks": True}, ValueError,
         r"both set when to reduce\. To fix, give one"),
    ],
    ids=["positional-dict", "value", "list", "zero", "both"],
)
def test_composer_arguments_are_checked(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        MemoryMonitor(*args, **kwargs)
