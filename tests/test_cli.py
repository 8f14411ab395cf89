from __future__ import annotations

import json
import subprocess
import sys

import pytest

from obsbus import Event
from obsbus.cli import main


def test_events_lists_every_event_in_order(capsys):
    assert main(["events"]) == 0
    assert capsys.readouterr().out.split() == [e.value for e in Event]


def test_events_order_shows_the_loop(capsys):
    assert main(["events", "--order"]) == 0
    out = capsys.readouterr().out
    assert out.index("fit_start") < out.index("before_forward") < out.index("fit_end")


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "events" in capsys.readouterr().err


def test_version_and_module_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "obsbus.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("obsbus ")


def test_unknown_command_is_an_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def _rank_trace(path, rank, offset=0.0):
    events = [
        {"ph": "M", "name": "obsbus_clock", "pid": rank, "args": {"offset_us": offset}},
        {"ph": "B", "name": "batch", "pid": rank, "tid": 1, "ts": 10.0},
        {"ph": "E", "name": "batch", "pid": rank, "tid": 1, "ts": 20.0},
    ]
    path.write_text(json.dumps({"traceEvents": events, "otherData": {"rank": rank}}))
    return str(path)


def test_merge_traces_writes_one_trace_and_a_summary(tmp_path, capsys):
    inputs = [
        _rank_trace(tmp_path / "r1.json", 1, offset=5.0),
        _rank_trace(tmp_path / "r0.json", 0),
    ]
    out = tmp_path / "merged.json"
    assert main(["merge-traces", "-o", str(out), *inputs]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"merged 2 traces (ranks 0, 1), 14 events -> {out}"
    assert captured.err == ""
    merged = json.loads(out.read_text())
    begins = {e["pid"]: e["ts"] for e in merged["traceEvents"] if e["ph"] == "B"}
    assert begins == {0: 10.0, 1: 15.0}


def test_merge_traces_from_the_module_entry_point(tmp_path):
    inputs = [_rank_trace(tmp_path / "a.json", 0), _rank_trace(tmp_path / "b.json", 1)]
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "obsbus.cli", "merge-traces", "-o", str(out), *inputs],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "ranks 0, 1" in done.stdout
    merged = json.loads(out.read_text())
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}
    assert {e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "process_name"} == {
        "rank 0",
        "rank 1",
    }


def test_merge_traces_bad_input_exits_2_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = tmp_path / "out.json"
    assert (
        main(["merge-traces", "-o", str(out), _rank_trace(tmp_path / "r0.json", 0), str(bad)]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"obsbus merge-traces: error: {bad} is not valid JSON")
    assert not out.exists()


def test_merge_traces_missing_file_exits_1(tmp_path, capsys):
    assert (
        main(["merge-traces", "-o", str(tmp_path / "out.json"), str(tmp_path / "gone.json")]) == 1
    )
    assert "gone.json" in capsys.readouterr().err


def test_merge_traces_reports_warnings_and_succeeds(tmp_path, capsys):
    inputs = [_rank_trace(tmp_path / "a.json", 1), _rank_trace(tmp_path / "b.json", 1)]
    assert main(["merge-traces", "-o", str(tmp_path / "out.json"), *inputs]) == 0
    captured = capsys.readouterr()
    assert "obsbus merge-traces: warning: Several inputs claim rank 1" in captured.err
    assert "ranks 0, 1" in captured.out


def test_merge_traces_combine_same_rank(tmp_path, capsys):
    inputs = [_rank_trace(tmp_path / "a.json", 1), _rank_trace(tmp_path / "b.json", 1)]
    out = tmp_path / "out.json"
    assert main(["merge-traces", "--combine-same-rank", "-o", str(out), *inputs]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "ranks 1)" in captured.out
    assert {e["pid"] for e in json.loads(out.read_text())["traceEvents"]} == {1}


@pytest.mark.parametrize(
    "argv",
    [["merge-traces", "in.json"], ["merge-traces", "-o", "out.json"]],
    ids=["no-output", "no-inputs"],
)
def test_merge_traces_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "usage: obsbus merge-traces" in capsys.readouterr().err


def test_merge_traces_help_documents_it(capsys):
    with pytest.raises(SystemExit) as info:
        main(["merge-traces", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "-o OUT" in out and "distributedInfo.rank" in out and "obsbus_clock" in out
    assert "--combine-same-rank" in out and "baseTimeNanoseconds" in out


def test_cli_imports_merge_only_when_used():
    code = "import sys, obsbus.cli; print('obsbus.profiler.merge' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
