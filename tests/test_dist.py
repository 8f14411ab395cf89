"""obsbus.dist: rank information from the environment and from torch.distributed."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from obsbus import State, dist
from tests._dist_utils import init_gloo, run_two_ranks

# ---------------------------------------------------------------------------
# One process: the launcher's environment variables
# ---------------------------------------------------------------------------


def _setenv(monkeypatch, **values):
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def test_defaults_without_launcher():
    assert not dist.is_initialized()
    assert dist.get_rank() == 0
    assert dist.get_world_size() == 1
    assert dist.get_local_rank() == 0
    assert dist.get_local_world_size() == 1
    assert dist.get_node_rank() == 0
    assert dist.rank_info() == dist.RankInfo(
        rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0
    )


def test_full_launcher_environment(monkeypatch):
    _setenv(monkeypatch, RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4")
    assert dist.get_rank() == 3
    assert dist.get_world_size() == 8
    assert dist.get_local_rank() == 1
    assert dist.get_local_world_size() == 4
    assert dist.get_node_rank() == 0  # 3 // 4
    assert dist.rank_info() == dist.RankInfo(
        rank=3, local_rank=1, world_size=8, local_world_size=4, node_rank=0
    )


@pytest.mark.parametrize(
    ("env", "node_rank"),
    [
        ({"RANK": "3", "LOCAL_WORLD_SIZE": "4"}, 0),
        ({"RANK": "5", "LOCAL_WORLD_SIZE": "4"}, 1),
        ({"RANK": "7", "LOCAL_WORLD_SIZE": "2"}, 3),
        ({"RANK": "5", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "2"}, 2),
        ({"RANK": "5", "LOCAL_WORLD_SIZE": "4", "NODE_RANK": "6"}, 6),
        ({"RANK": "5", "LOCAL_WORLD_SIZE": "4", "NODE_RANK": "6", "GROUP_RANK": "2"}, 6),
        ({"RANK": "5", "WORLD_SIZE": "8"}, 0),  # one node holding all 8 ranks
        ({"RANK": "5", "LOCAL_WORLD_SIZE": "0"}, 5),  # guarded against dividing by zero
    ],
    ids=[
        "computed-node-0",
        "computed-node-1",
        "computed-two-per-node",
        "group-rank",
        "node-rank",
        "node-rank-wins-over-group-rank",
        "local-world-defaults-to-world",
        "zero-local-world",
    ],
)
def test_node_rank(monkeypatch, env, node_rank):
    _setenv(monkeypatch, **env)
    assert dist.get_node_rank() == node_rank
    assert dist.rank_info().node_rank == node_rank


def test_local_values_default_to_global_ones(monkeypatch):
    _setenv(monkeypatch, RANK="2", WORLD_SIZE="4")
    assert dist.get_local_rank() == 2
    assert dist.get_local_world_size() == 4


@pytest.mark.parametrize("value", ["", "   "], ids=["empty", "blank"])
def test_empty_variable_means_unset(monkeypatch, value):
    _setenv(monkeypatch, RANK=value, WORLD_SIZE=value)
    assert dist.get_rank() == 0
    assert dist.get_world_size() == 1


@pytest.mark.parametrize(
    ("name", "value", "reader"),
    [
        ("RANK", "abc", dist.get_rank),
        ("WORLD_SIZE", "two", dist.get_world_size),
        ("LOCAL_RANK", "1.5", dist.get_local_rank),
        ("LOCAL_WORLD_SIZE", "x", dist.get_local_world_size),
        ("NODE_RANK", "n0", dist.get_node_rank),
        ("GROUP_RANK", "g", dist.get_node_rank),
        ("RANK", "abc", dist.rank_info),
    ],
    ids=[
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "GROUP_RANK",
        "rank_info",
    ],
)
def test_non_integer_variable_names_itself_and_its_value(monkeypatch, name, value, reader):
    monkeypatch.setenv(name, value)
    with pytest.raises(
        ValueError, match=f"Environment variable {name}='{value}' is not an integer"
    ):
        reader()


def test_negative_variable(monkeypatch):
    monkeypatch.setenv("RANK", "-1")
    with pytest.raises(ValueError, match="Environment variable RANK='-1' must be non-negative"):
        dist.get_rank()


def test_state_reads_rank_info_from_env(monkeypatch):
    _setenv(monkeypatch, RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4")
    state = State(run_name="r")
    assert (state.rank, state.local_rank, state.world_size) == (3, 1, 8)
    assert state.rank_info.node_rank == 0


def test_state_refresh_rank_info(monkeypatch):
    state = State(run_name="r")
    assert state.rank == 0
    _setenv(monkeypatch, RANK="1", WORLD_SIZE="2")
    assert state.rank == 0  # a snapshot
    state.refresh_rank_info()
    assert (state.rank, state.world_size) == (1, 2)


# ---------------------------------------------------------------------------
# One process: collectives are no-ops
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "mean", "min", "max", "product"])
def test_all_reduce_is_a_no_op_on_one_process(op):
    tensor = torch.tensor([1.0, 2.0, 3.0])
    out = dist.all_reduce(tensor, op=op)
    assert out is tensor
    assert out.tolist() == [1.0, 2.0, 3.0]


def test_all_reduce_no_op_even_when_env_claims_more_ranks(monkeypatch):
    # Without an initialized process group there is nobody to reduce with.
    _setenv(monkeypatch, RANK="0", WORLD_SIZE="2")
    tensor = torch.tensor([5.0])
    assert dist.all_reduce(tensor).tolist() == [5.0]


@pytest.mark.parametrize(
    ("op", "hint"),
    [("median", " Did you mean 'mean'?"), ("SUM", " Did you mean 'sum'?"), ("avg", ""), ("", ""), (3, "")],
    ids=["median", "SUM", "avg", "empty", "int"],
)
def test_all_reduce_unknown_op_lists_accepted_ones(op, hint):
    accepted = "'sum', 'mean', 'min', 'max', 'product'"
    message = f"all_reduce op must be one of {accepted}, got {op!r}.{hint}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        dist.all_reduce(torch.tensor([1.0]), op=op)


def test_all_gather_object_on_one_process():
    obj = {"loss": 0.5}
    out = dist.all_gather_object(obj)
    assert out == [obj]
    assert out[0] is obj


def test_barrier_on_one_process():
    assert dist.barrier() is None


# ---------------------------------------------------------------------------
# collective_device and gather_rows: the helpers the cross-rank monitors share
# ---------------------------------------------------------------------------


def _fake_group(monkeypatch, backend: str, *, cuda: bool, device: int = 1) -> None:
    """An initialized process group on ``backend``, and a host with or without CUDA."""
    group = SimpleNamespace(get_backend=lambda: backend, get_world_size=lambda: 2,
                            get_rank=lambda: 0)  # fmt: skip
    monkeypatch.setattr(dist, "_torch_dist", lambda: group)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: device)


def test_collective_device_without_a_process_group_is_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU alone changes nothing
    assert dist.collective_device() == torch.device("cpu")


@pytest.mark.parametrize(
    ("backend", "cuda", "expected"),
    [
        ("nccl", True, torch.device("cuda", 1)),
        ("NCCL", True, torch.device("cuda", 1)),
        ("rccl", True, torch.device("cuda", 1)),
        ("nccl", False, torch.device("cpu")),
        ("gloo", True, torch.device("cpu")),
        ("mpi", True, torch.device("cpu")),
        ("cpu:gloo,cuda:nccl", True, torch.device("cpu")),
    ],
    ids=["nccl", "nccl-upper", "rccl", "nccl-no-cuda", "gloo", "mpi", "gloo-and-nccl"],
)
def test_collective_device_follows_the_backend(monkeypatch, backend, cuda, expected):
    _fake_group(monkeypatch, backend, cuda=cuda)
    assert dist.collective_device() == expected


def test_gather_rows_on_one_process_is_this_row():
    table = dist.gather_rows([1.5, 2, -3.25])
    assert table.dtype == torch.float64
    assert table.device == torch.device("cpu")
    assert table.tolist() == [[1.5, 2.0, -3.25]]


def test_gather_rows_keeps_large_ints_exact():
    big = 2**62 + 1  # float64 would round it
    table = dist.gather_rows([big, 7], torch.int64)
    assert table.dtype == torch.int64
    assert table.tolist() == [[big, 7]]


def test_gather_rows_ignores_a_launcher_world_size_without_a_group(monkeypatch):
    _setenv(monkeypatch, RANK="1", WORLD_SIZE="4")  # no process group: nobody to gather from
    assert dist.gather_rows([5.0]).tolist() == [[5.0]]


def test_dist_does_not_import_torch_at_import():
    import subprocess
    import sys

    code = "import sys, obsbus.dist; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)  # fmt: skip
    assert result.stdout.strip() == "False"


# ---------------------------------------------------------------------------
# Two real ranks (gloo on loopback, file:// rendezvous)
# ---------------------------------------------------------------------------


def _rank_info_and_collectives(rank: int) -> dict:
    """Runs in each rank: what obsbus sees before and after init, and reductions."""
    from obsbus import State, dist
    from obsbus.naming import format_name

    out: dict = {}
    out["initialized_before"] = dist.is_initialized()
    state = State(run_name="shared")  # built before init: a 1-process snapshot
    out["state_before"] = state.rank_info
    init_gloo(rank)
    out["initialized_after"] = dist.is_initialized()
    out["rank"] = dist.get_rank()
    out["world_size"] = dist.get_world_size()
    out["rank_info"] = dist.rank_info()
    out["state_stale"] = state.rank_info
    state.refresh_rank_info()
    out["state_refreshed"] = state.rank_info
    out["state_new"] = State(run_name="shared").rank_info
    out["name"] = format_name("{run_name}-rank{rank}of{world_size}", state)

    for op in ("sum", "max", "min", "mean", "product"):
        tensor = torch.tensor([rank + 1.0])
        result = dist.all_reduce(tensor, op=op)
        out[f"reduce_{op}"] = result.tolist()
        out[f"reduce_{op}_in_place"] = result is tensor and tensor.tolist() == result.tolist()
    vector = dist.all_reduce(torch.tensor([float(rank), 10.0 * rank, 1.0]))
    out["reduce_vector"] = vector.tolist()

    ints = torch.tensor([rank + 1, 4])
    try:
        dist.all_reduce(ints, op="mean")
        out["int_mean"] = ("ok", None, ints.tolist())
    except Exception as exc:  # recorded, judged in the parent
        out["int_mean"] = (type(exc).__name__, str(exc), ints.tolist())

    out["gathered"] = dist.all_gather_object({"rank": rank, "tag": f"r{rank}"})
    out["collective_device"] = str(dist.collective_device())
    rows = dist.gather_rows([rank + 0.5, 10.0 * rank, -1.0 - rank])
    out["rows"] = (rows.tolist(), str(rows.dtype), str(rows.device))
    ints = dist.gather_rows([2**62 - rank, rank], torch.int64)
    out["int_rows"] = (ints.tolist(), str(ints.dtype))
    out["barrier"] = dist.barrier()
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One two-rank run shared by the tests below (spawning costs seconds)."""
    return run_two_ranks(
        _rank_info_and_collectives, tmp_path_factory.mktemp("two_ranks"), init=False
    )


@pytest.mark.dist
def test_two_ranks_rank_info(two_ranks):
    for rank, out in enumerate(two_ranks):
        assert out["initialized_before"] is False
        assert out["initialized_after"] is True
        assert out["rank"] == rank
        assert out["world_size"] == 2
        assert out["rank_info"] == dist.RankInfo(
            rank=rank, local_rank=rank, world_size=2, local_world_size=2, node_rank=0
        )


@pytest.mark.dist
def test_two_ranks_state_rank_info(two_ranks):
    single = dist.RankInfo(rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0)
    for rank, out in enumerate(two_ranks):
        assert out["state_before"] == single
        assert out["state_stale"] == single  # a snapshot until refreshed
        assert out["state_refreshed"] == out["rank_info"]
        assert out["state_new"] == out["rank_info"]
        assert out["name"] == f"shared-rank{rank}of2"


@pytest.mark.dist
@pytest.mark.parametrize(
    ("op", "expected"),
    [("sum", 3.0), ("max", 2.0), ("min", 1.0), ("mean", 1.5), ("product", 2.0)],
    ids=["sum", "max", "min", "mean", "product"],
)
def test_two_ranks_all_reduce(two_ranks, op, expected):
    for out in two_ranks:
        assert out[f"reduce_{op}"] == [expected]
        assert out[f"reduce_{op}_in_place"] is True


@pytest.mark.dist
def test_two_ranks_all_reduce_elementwise(two_ranks):
    for out in two_ranks:
        assert out["reduce_vector"] == [1.0, 10.0, 2.0]


@pytest.mark.dist
def test_two_ranks_mean_of_an_int_tensor_is_not_half_applied(two_ranks):
    # An in-place mean cannot store 1.5 in an int tensor. Either obsbus handles
    # it (a whole-number result) or it refuses with an error that names the
    # problem before touching the tensor; what it must not do is sum in place
    # and then fail, leaving every rank holding the sum.
    for rank, out in enumerate(two_ranks):
        kind, message, values = out["int_mean"]
        if kind == "ok":
            assert values == [1, 4]
        else:
            assert kind in ("ValueError", "TypeError"), (kind, message)
            assert "mean" in message
            assert values == [rank + 1, 4], "the tensor was changed before the error"


@pytest.mark.dist
def test_two_ranks_all_gather_object_in_rank_order(two_ranks):
    expected = [{"rank": 0, "tag": "r0"}, {"rank": 1, "tag": "r1"}]
    for out in two_ranks:
        assert out["gathered"] == expected
        assert out["barrier"] is None


@pytest.mark.dist
def test_two_ranks_collective_device_on_gloo_is_the_cpu(two_ranks):
    for out in two_ranks:
        assert out["collective_device"] == "cpu"


@pytest.mark.dist
def test_two_ranks_gather_rows_in_rank_order(two_ranks):
    for out in two_ranks:
        assert out["rows"] == ([[0.5, 0.0, -1.0], [1.5, 10.0, -2.0]], "torch.float64", "cpu")
        assert out["int_rows"] == ([[2**62, 0], [2**62 - 1, 1]], "torch.int64")


def _fail_on_rank_one(rank: int, message: str) -> int:
    if rank == 1:
        raise RuntimeError(message)
    return rank


@pytest.mark.dist
def test_run_two_ranks_reports_a_failing_rank(tmp_path):
    # The harness itself must be able to fail, or the tests above prove nothing.
    with pytest.raises(Exception, match="boom on rank 1"):
        run_two_ranks(_fail_on_rank_one, tmp_path, "boom on rank 1")


def test_run_two_ranks_needs_a_module_level_function(tmp_path):
    with pytest.raises(TypeError, match="needs a module-level function"):
        run_two_ranks(lambda rank: rank, tmp_path)
