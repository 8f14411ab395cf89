"""merge_traces: one merged Chrome trace per run, each rank its own process row."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from obsbus.profiler.merge import merge_traces

OFFSET = 1500.25  # exactly representable, so shifted timestamps compare exactly


def obsbus_trace(rank: int, offset: float | None = OFFSET) -> dict:
    """What an obsbus JSON trace handler writes: object form, rank and clock metadata."""
    meta = [{"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}}]
    if offset is not None:
        meta.append(
            {
                "ph": "M",
                "name": "obsbus_clock",
                "pid": rank,
                "args": {"offset_us": offset, "wall_clock_start_us": 1.7e15},
            }
        )
    return {
        "traceEvents": [
            *meta,
            {"ph": "B", "name": "batch", "cat": "marker", "pid": rank, "tid": 1, "ts": 100.5},
            {"ph": "B", "name": "forward", "cat": "marker", "pid": rank, "tid": 1, "ts": 110.0},
            {"ph": "E", "name": "forward", "cat": "marker", "pid": rank, "tid": 1, "ts": 120.75},
            {"ph": "i", "name": "checkpoint", "s": "t", "pid": rank, "tid": 1, "ts": 121},
            {"ph": "C", "name": "memory", "pid": rank, "tid": 1, "ts": 122, "args": {"mb": 12}},
            {"ph": "E", "name": "batch", "cat": "marker", "pid": rank, "tid": 1, "ts": 150.5},
        ],
        "otherData": {"rank": rank, "run_name": "demo"},
    }


def torch_events() -> list[dict]:
    """Events as torch.profiler (Kineto) writes them: a CPU process and a GPU device."""
    return [
        {
            "ph": "M",
            "name": "process_name",
            "pid": 4242,
            "tid": 0,
            "args": {"name": "python3 4242"},
        },
        {"ph": "M", "name": "process_sort_index", "pid": 4242, "tid": 0, "args": {"sort_index": 5}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 4242,
            "tid": 4242,
            "args": {"name": "MainThread"},
        },
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "process_sort_index", "pid": 0, "tid": 0, "args": {"sort_index": 1}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 4242,
            "tid": 4242,
            "ts": 10.5,
            "dur": 4,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 4242,
            "tid": 4250,
            "ts": 11.0,
            "dur": 1,
        },
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 4242, "tid": 4250, "ts": 11.0},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12.25, "dur": 3},
        {
            "ph": "f",
            "cat": "ac2g",
            "name": "ac2g",
            "id": 5,
            "bp": "e",
            "pid": 0,
            "tid": 7,
            "ts": 12.25,
        },
        {"ph": "X", "cat": "kernel", "name": "copy", "pid": 1, "tid": 7, "ts": 13.0, "dur": 1},
    ]


def torch_trace(rank: int) -> dict:
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"name": "H100"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": torch_events(),
    }


def write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def on(trace: dict, pid: int, ph: str | None = None) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["pid"] == pid and (ph is None or e["ph"] == ph)]


def meta(trace: dict, name: str) -> dict:
    return {
        (e["pid"], e.get("tid")): e["args"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == name
    }


@pytest.fixture
def two_ranks(tmp_path) -> list[Path]:
    # Rank 1 comes first on purpose: ranks come from the traces, not their order.
    return [
        write(tmp_path / "rank1.json", obsbus_trace(1)),
        write(tmp_path / "rank0.json", torch_trace(0)),
    ]


def test_each_rank_is_a_process_row_with_clock_aligned(two_ranks):
    merged = merge_traces(two_ranks)
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}
    assert merged["displayTimeUnit"] == "ms"
    assert meta(merged, "process_name") == {
        (0, None): {"name": "rank 0"},
        (1, None): {"name": "rank 1"},
    }
    assert meta(merged, "process_sort_index") == {
        (0, None): {"sort_index": 0},
        (1, None): {"sort_index": 1},
    }

    recorded = [e["ts"] for e in obsbus_trace(1)["traceEvents"] if "ts" in e]
    assert [e["ts"] for e in on(merged, 1) if "ts" in e] == [ts + OFFSET for ts in recorded]
    assert [e["ts"] for e in on(merged, 0) if "ts" in e] == [
        e["ts"] for e in torch_events() if "ts" in e
    ]

    other = merged["otherData"]
    assert other["clock_offsets_us"] == {"0": 0.0, "1": OFFSET}
    assert other["unaligned_ranks"] == [0]
    assert other["ranks"]["0"]["inputs"][0]["rank_from"] == "distributedInfo.rank"
    assert other["ranks"]["1"]["inputs"][0]["rank_from"] == "otherData.rank"
    assert other["ranks"]["0"]["inputs"][0]["source"] == str(two_ranks[1])
    assert other["ranks"]["0"]["inputs"][0]["metadata"]["deviceProperties"] == [{"name": "H100"}]
    # The clock metadata says the offset is applied, so merging the result again is a no-op.
    clock = meta(merged, "obsbus_clock")[(1, None)]
    assert clock["offset_us"] == 0.0 and clock["applied_offset_us"] == OFFSET


def test_original_pids_and_tids_become_named_thread_rows(two_ranks):
    merged = merge_traces(two_ranks)
    names = {
        tid: args["name"] for (pid, tid), args in meta(merged, "thread_name").items() if pid == 0
    }
    by_name = {name: tid for tid, name in names.items()}
    assert sorted(by_name) == [
        "pid 0 (GPU 0) / tid 7 (stream 7)",
        "pid 1 / tid 7",
        "pid 4242 (python3 4242) / tid 4242 (MainThread)",
        "pid 4242 (python3 4242) / tid 4250",
    ]
    assert len(set(names)) == 4  # tid 7 of pid 0 and of pid 1 are two rows
    # The original tid is kept where it is unique; GPU 0 sorts first, as its sort_index says.
    assert by_name["pid 0 (GPU 0) / tid 7 (stream 7)"] == 7
    assert by_name["pid 4242 (python3 4242) / tid 4242 (MainThread)"] == 4242
    kernels = {e["name"]: e["tid"] for e in on(merged, 0, "X")}
    assert kernels["gemm"] == 7 and kernels["copy"] == by_name["pid 1 / tid 7"] != 7
    assert kernels["aten::mm"] == 4242 and kernels["cudaLaunchKernel"] == 4250
    sort = {
        tid: args["sort_index"]
        for (pid, tid), args in meta(merged, "thread_sort_index").items()
        if pid == 0
    }
    assert sort[7] < sort[4242] < sort[4250]
    # The originals' process and thread metadata are folded in, not repeated as rows.
    assert not [
        e for e in on(merged, 0, "M") if e["args"].get("name") in ("python3 4242", "MainThread")
    ]


def test_begin_end_pairs_keep_their_order(two_ranks):
    merged = merge_traces(two_ranks)
    spans = [(e["ph"], e["name"]) for e in on(merged, 1) if e["ph"] in "BE"]
    assert spans == [("B", "batch"), ("B", "forward"), ("E", "forward"), ("E", "batch")]
    for rank in (0, 1):  # each process's metadata comes before its events
        phases = [e["ph"] for e in on(merged, rank)]
        assert phases.index("M") == 0 and phases[:4] == ["M"] * 4


def test_flow_ids_pair_within_a_rank_only(tmp_path):
    merged = merge_traces([torch_trace(0), torch_trace(1)])
    ids = {rank: {e["id"] for e in on(merged, rank) if e["ph"] in "sf"} for rank in (0, 1)}
    assert ids[0] == {5} and len(ids[1]) == 1 and ids[1] != ids[0]


def test_counters_of_several_processes_stay_apart():
    events = [
        {"ph": "C", "name": "mem", "pid": p, "tid": 0, "ts": 1, "args": {"v": p}} for p in (3, 4)
    ]
    merged = merge_traces([events])
    assert [e["name"] for e in on(merged, 0, "C")] == ["mem (pid 3)", "mem (pid 4)"]


def test_array_form_takes_rank_and_clock_from_metadata(tmp_path):
    events = [
        {"ph": "M", "name": "obsbus_rank", "args": {"rank": 3}},
        {"ph": "M", "name": "obsbus_clock", "pid": 3, "args": {"offset_us": -2.5}},
        *torch_events(),
    ]
    merged = merge_traces([write(tmp_path / "r3.json", events)])
    assert {e["pid"] for e in merged["traceEvents"]} == {3}
    assert [e["ts"] for e in on(merged, 3, "X")] == [
        10.5 - 2.5,
        11.0 - 2.5,
        12.25 - 2.5,
        13.0 - 2.5,
    ]
    assert merged["otherData"]["ranks"]["3"]["inputs"][0]["rank_from"] == "obsbus_rank"


def test_gzip_input_and_output(tmp_path):
    packed = tmp_path / "rank1.json.gz"
    packed.write_bytes(gzip.compress(json.dumps(obsbus_trace(1)).encode()))
    merged = merge_traces([torch_trace(0), packed], tmp_path / "merged.json.gz")
    assert on(merged, 1, "B")[0]["ts"] == 100.5 + OFFSET
    assert json.loads(gzip.decompress((tmp_path / "merged.json.gz").read_bytes())) == merged


@pytest.mark.parametrize(
    ("tail", "warns"),
    [
        ("", False),
        (",", False),
        (",\n  ", False),
        (',\n{"ph": "X", "name": "to', True),
        (',\n{"ph": "X", "na', True),
        (',\n{"ph": "X", "args": {"a": 1}, "dur": 1.', True),
        (',\n{"ph": "X", "args": {"a": tru', True),
    ],
    ids=[
        "no-bracket",
        "trailing-comma",
        "trailing-space",
        "torn-string",
        "torn-key",
        "torn-number",
        "torn-literal",
    ],
)
def test_truncated_array_is_read(tmp_path, tail, warns):
    events = torch_events()
    path = tmp_path / "crashed.json"
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in events) + tail)
    if warns:
        with pytest.warns(UserWarning, match=r"crashed\.json: dropped an incomplete last event"):
            merged = merge_traces([path])
    else:
        merged = merge_traces([path])
    assert [e["name"] for e in on(merged, 0, "X")] == [
        "aten::mm",
        "cudaLaunchKernel",
        "gemm",
        "copy",
    ]


def test_duplicate_ranks_warn_and_number_by_position(tmp_path):
    paths = [
        write(tmp_path / "a.json", obsbus_trace(1)),
        write(tmp_path / "b.json", torch_trace(1)),
    ]
    with pytest.warns(
        UserWarning, match=r"Several inputs claim rank 1: .*a\.json .*b\.json.*position"
    ):
        merged = merge_traces(paths)
    sources = {r: v["inputs"][0]["source"] for r, v in merged["otherData"]["ranks"].items()}
    assert sources == {"0": str(paths[0]), "1": str(paths[1])}
    assert on(merged, 0, "B")[0]["ts"] == 100.5 + OFFSET  # the offset travels with its input


def test_inputs_without_a_rank_take_the_free_ranks():
    merged = merge_traces([torch_events(), torch_trace(0), torch_events()])
    assert {r: v["inputs"][0]["rank_from"] for r, v in merged["otherData"]["ranks"].items()} == {
        "0": "distributedInfo.rank",
        "1": "position",
        "2": "position",
    }
    assert merged["otherData"]["ranks"]["1"]["inputs"][0]["source"] == "<input 0>"


def test_one_ranks_traces_can_share_its_row(tmp_path):
    window1, window2 = obsbus_trace(1), obsbus_trace(1)
    for e in window2["traceEvents"]:
        if "ts" in e:
            e["ts"] += 1000
    torch_rank1 = torch_trace(1)  # no obsbus_clock: takes the offset of rank 1's clock
    merged = merge_traces([window1, torch_trace(0), window2, torch_rank1], combine_same_rank=True)
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}
    spans = [(e["ph"], e["ts"]) for e in on(merged, 1, "B")]
    assert spans == [
        ("B", 100.5 + OFFSET),
        ("B", 110.0 + OFFSET),
        ("B", 1100.5 + OFFSET),
        ("B", 1110.0 + OFFSET),
    ]
    assert [e["ts"] for e in on(merged, 1, "X")] == [
        ts + OFFSET for ts in (10.5, 11.0, 12.25, 13.0)
    ]
    assert [e["ts"] for e in on(merged, 0, "X")] == [10.5, 11.0, 12.25, 13.0]
    # One row for both windows, beside the torch rows; torch's own pid 1 is not "rank 1".
    rows = {tid: a["name"] for (pid, tid), a in meta(merged, "thread_name").items() if pid == 1}
    assert sorted(rows.values()) == [
        "pid 0 (GPU 0) / tid 7 (stream 7)",
        "pid 1 (rank 1) / tid 1",
        "pid 1 / tid 7",
        "pid 4242 (python3 4242) / tid 4242 (MainThread)",
        "pid 4242 (python3 4242) / tid 4250",
    ]
    assert {e["tid"] for e in on(merged, 1, "B")} == {1}
    rank1 = merged["otherData"]["ranks"]["1"]
    assert [i["source"] for i in rank1["inputs"]] == ["<input 0>", "<input 2>", "<input 3>"]
    assert [i["clock_offset_us"] for i in rank1["inputs"]] == [OFFSET] * 3
    assert merged["otherData"]["unaligned_ranks"] == [0]


def test_torch_time_bases_are_moved_onto_the_unix_epoch():
    base_ns = 1_790_857_026_000_000_000
    torch_rank0 = {**torch_trace(0), "baseTimeNanoseconds": base_ns}
    merged = merge_traces([torch_rank0, obsbus_trace(1, offset=None)])
    assert [e["ts"] for e in on(merged, 0, "X")] == [
        base_ns / 1000 + ts for ts in (10.5, 11.0, 12.25, 13.0)
    ]
    assert on(merged, 1, "B")[0]["ts"] == 100.5  # already on the Unix epoch
    assert "baseTimeNanoseconds" not in merged
    assert merged["otherData"]["ranks"]["0"]["inputs"][0]["shift_us"] == base_ns / 1000


def test_a_shared_time_base_is_kept():
    base_ns = 1_790_857_026_000_000_000
    merged = merge_traces([{**torch_trace(r), "baseTimeNanoseconds": base_ns} for r in (0, 1)])
    assert [e["ts"] for e in on(merged, 1, "X")] == [10.5, 11.0, 12.25, 13.0]
    assert merged["baseTimeNanoseconds"] == base_ns


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b'{"traceEvents": [', "is not valid JSON"),
        (b'[{"ph": "X"}, {oops}]', "is not valid JSON"),
        (b'[{"ph": "X"}] trailing', "is not valid JSON"),
        (b'[{"ph": "X"}, {"ph": tru}, {"ph": "X"}', "is not valid JSON"),
        (b'{"events": []}', "is not a Chrome trace: expected an object with a 'traceEvents' list"),
        (b"[1, 2]", "event 0 is 1, not an object"),
        (b"\xff\xfe[]", "not UTF-8"),
        (b"\x1f\x8bnot gzip", "looks gzip-compressed but can not be read"),
    ],
    ids=[
        "truncated-object",
        "bad-event",
        "trailing-garbage",
        "bad-event-in-open-array",
        "no-traceEvents",
        "not-events",
        "not-utf8",
        "bad-gzip",
    ],
)
def test_unreadable_input_names_the_file(tmp_path, content, match):
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match) as info:
        merge_traces([obsbus_trace(0), path])
    assert str(info.value).startswith(str(path))


@pytest.mark.parametrize(
    ("doc", "error", "match"),
    [
        (
            {"traceEvents": [{"ph": "M", "name": "obsbus_clock", "args": {"offset_us": "3"}}]},
            ValueError,
            r"obsbus_clock offset_us is '3'; expected a finite number",
        ),
        (
            {"traceEvents": [], "otherData": {"rank": -1}},
            ValueError,
            r"otherData.rank is -1; a rank must be a non-negative",
        ),
        (
            {"traceEvents": [], "distributedInfo": {"rank": "zero"}},
            ValueError,
            r"distributedInfo.rank is 'zero'",
        ),
        (42, TypeError, "must be a path, a trace object or a list of events, got 42"),
    ],
    ids=["offset", "negative-rank", "word-rank", "not-a-trace"],
)
def test_bad_values_are_quoted(doc, error, match):
    with pytest.raises(error, match=match):
        merge_traces([doc])


def test_no_inputs_is_an_error():
    with pytest.raises(ValueError, match="at least one input trace, got an empty list"):
        merge_traces([])
    with pytest.raises(TypeError, match=r"a list of traces or paths, got 'rank0\.json'"):
        merge_traces("rank0.json")


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.json"):
        merge_traces([tmp_path / "nope.json"])


def test_output_is_written_atomically(tmp_path, two_ranks, monkeypatch):
    out = tmp_path / "out" / "merged.json"
    merged = merge_traces(two_ranks, out)
    assert json.loads(out.read_text()) == merged
    assert sorted(p.name for p in out.parent.iterdir()) == ["merged.json"]

    from obsbus.profiler import _trace_io

    def fail(trace, stream):
        stream.write(b'{"traceEvents": [')
        raise OSError("disk full")

    monkeypatch.setattr(_trace_io, "_dump", fail)
    with pytest.raises(OSError, match="disk full"):
        merge_traces(two_ranks, out)
    assert json.loads(out.read_text()) == merged  # the old file is whole, no temp file is left
    assert sorted(p.name for p in out.parent.iterdir()) == ["merged.json"]


def test_merging_a_merged_trace_again_changes_no_time(tmp_path, two_ranks):
    once = merge_traces(two_ranks, tmp_path / "once.json")
    twice = merge_traces([tmp_path / "once.json"])
    assert [e.get("ts") for e in on(twice, 0) if e["ph"] != "M"] == [
        e.get("ts") for e in once["traceEvents"] if e["ph"] != "M"
    ]


def test_the_input_is_not_modified():
    doc = obsbus_trace(1)
    before = json.dumps(doc)
    merge_traces([doc])
    assert json.dumps(doc) == before


def test_a_real_torch_profiler_trace_merges(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(8, 8) @ torch.ones(8, 8)
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    merged = merge_traces(
        [write(tmp_path / "obsbus.json", obsbus_trace(0, offset=None)), tmp_path / "torch.json"]
    )
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}
    assert any(e["name"] == "aten::mm" for e in on(merged, 1, "X"))
    assert all(
        " / tid " in args["name"]
        for (pid, _), args in meta(merged, "thread_name").items()
        if pid == 1
    )


@pytest.mark.parametrize(
    ("module", "own"),
    [("obsbus.profiler.merge", {"obsbus.profiler._trace_io"}), ("obsbus.profiler._trace_io", set())],
    ids=["merge", "trace_io"],
)
def test_merge_imports_only_the_standard_library(module, own):
    import ast
    import importlib

    tree = ast.parse(Path(importlib.import_module(module).__file__).read_text())
    names = {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    obsbus_names = {name for name in names if name.split(".")[0] == "obsbus"}
    assert obsbus_names == own  # its trace file reader/writer, itself standard library only
    roots = {name.split(".")[0] for name in names - obsbus_names}
    assert roots and roots <= set(sys.stdlib_module_names)
    code = "import sys, obsbus.profiler.merge; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
