"""obsbus.dist: rank information from the environment and from torch.distributed."""

from __future__ import annotations

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


@pytest.mark.parametrize("op", ["median", "SUM", "avg", ""], ids=["median", "SUM", "avg", "empty"])
def test_all_reduce_unknown_op_lists_accepted_ones(op):
    with pytest.raises(
        ValueError, match=f"Unknown reduce op '{op}'; accepted: sum, mean, min, max, product"
    ):
        dist.all_reduce(torch.tensor([1.0]), op=op)


def test_all_gather_object_on_one_process():
    obj = {"loss": 0.5}
    out = dist.all_gather_object(obj)
    assert out == [obj]
    assert out[0] is obj


def test_barrier_on_one_process():
    assert dist.barrier() is None


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
