"""scripts/profiler_smoke.py passes, and fails loudly when a trace is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "profiler_smoke.py"


def test_profiler_smoke_script_passes():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("ok")] == [
        "ok    JSON traces", "ok    torch.profiler traces", "ok    merged trace"]
    assert lines[-1] == "profiler smoke: all traces ok"


def test_the_trace_checks_catch_an_unpaired_end_and_an_undocumented_phase(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import profiler_smoke
    finally:
        sys.path.remove(str(SCRIPT.parent))
    bad = {
        "crossed.json": [{"ph": "B", "name": "outer", "pid": 0, "tid": 0, "ts": 1},
                         {"ph": "B", "name": "inner", "pid": 0, "tid": 0, "ts": 2},
                         {"ph": "E", "name": "outer", "pid": 0, "tid": 0, "ts": 3}],
        "other_thread.json": [{"ph": "B", "name": "a", "pid": 0, "tid": 0, "ts": 1},
                              {"ph": "E", "name": "a", "pid": 0, "tid": 1, "ts": 2}],
        "backwards.json": [{"ph": "B", "name": "a", "pid": 0, "tid": 0, "ts": 5},
                           {"ph": "E", "name": "a", "pid": 0, "tid": 0, "ts": 4}],
        "phase.json": [{"ph": "Z", "name": "a", "pid": 0, "tid": 0, "ts": 1}],
    }
    for name, events in bad.items():
        path = tmp_path / name
        path.write_text(json.dumps({"traceEvents": events}))
        try:
            profiler_smoke.load(path)
        except AssertionError:
            continue
        raise AssertionError(f"{name} passed the checks")
    good = tmp_path / "good.json"
    end = {"ph": "E", "pid": 0, "tid": 0, "ts": 3}  # a nameless E ends the latest B
    good.write_text(json.dumps([*bad["crossed.json"][:2], end, end]))
    assert len(profiler_smoke.load(good)) == 4
