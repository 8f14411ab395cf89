"""The report of a crashed run folder: the exception, the metrics up to the crash, the traces."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from obsbus import Run
from obsbus.loggers import FileLogger
from obsbus.report import build_report, write_report
from obsbus.report._read import read_run
from obsbus.report._status import summarize

from ._runs import SECRET, train


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A run of 20 batches that raised at batch 12: FileLogger, monitors, a profiler window,
    no RunReport (the status comes from the folder alone)."""
    folder = tmp_path_factory.mktemp("crashed") / "run"
    with pytest.raises(RuntimeError, match="failed on purpose at batch 12"):
        train(str(folder), 20, fail_at=12, report=False)
    return folder


@pytest.fixture(scope="module")
def crashed_html(crashed):
    return build_report(crashed)


def _rank_row(html: str) -> list[str]:
    table = html.split('<table class="ranks">', 1)[1].split("</table>", 1)[0]
    row = table.split("</tr>")[1]
    return [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]


def test_shows_the_exception_and_the_metrics_up_to_the_crash(crashed, crashed_html):
    html = crashed_html
    rank, status, why, last_step, _ = _rank_row(html)
    assert (rank, status, last_step) == ("0", "failed", "12")
    assert "RuntimeError(&#x27;rank 0 failed on purpose at batch 12" in why
    assert SECRET not in html and "***" in html
    loss = read_run(crashed).ranks[0].series["loss/train/total"]
    assert loss[0] == list(range(1, 13))  # every step up to the crash, none after
    assert 'data-group="loss"' in html and "loss/train/total" in html


def test_time_per_event_and_callback_from_the_traces(crashed_html):
    html = crashed_html
    traces = html.split('<section id="traces">', 1)[1].split("</section>", 1)[0]
    assert "Per event" in traces and "Per callback and event" in traces
    assert "SpeedMonitor/batch_end" in traces and ">batch<" in traces


def test_the_run_record_is_shown_masked(crashed_html):
    html = crashed_html
    record = html.split('<section id="record">', 1)[1]
    for name in ("hparams.json", "plugins.json", "git.json", "env.json", "packages.txt"):
        assert f'data-file="{name}"' in record
    assert "hf_token" in record and SECRET not in record
    assert "obsbus.callbacks.speed_monitor.SpeedMonitor" in record


def test_a_torn_last_line_is_dropped_and_named(crashed, tmp_path):
    folder = tmp_path / "torn"
    shutil.copytree(crashed, folder)
    with open(folder / "metrics-rank0.jsonl", "a") as f:
        f.write('{"step": 13, "epoch": 0, "batch": 13, "loss/tra')
    data = read_run(folder)
    assert data.ranks[0].torn and data.ranks[0].last_step == 12
    summary = summarize(data)
    assert summary.status == "failed"  # the exception line still says why
    assert any("cut short" in line for line in summary.failures)


def test_a_run_that_stopped_without_a_word_is_killed_or_unknown(tmp_path):
    folder = tmp_path / "quiet"
    with Run(max_duration="3ba", run_folder=folder, loggers=[FileLogger()]) as run:
        for batch in run.train([[1], [2], [3]]):
            run.state.loss = float(batch[0])
    assert summarize(read_run(folder)).status == "unknown"  # finished, but nothing says so
    with open(folder / "metrics-rank0.jsonl", "a") as f:
        f.write('{"step": 4, "loss/train/total": 1.')  # SIGKILL mid-write
    assert summarize(read_run(folder)).status == "killed"
    (folder / "run-status-rank0.json").write_text(json.dumps({"status": "running"}))
    ranks = summarize(read_run(folder)).ranks
    assert ranks[0][0] == "killed" and "no end" in ranks[0][1]


def test_a_sigterm_is_killed_not_failed(tmp_path):
    folder = tmp_path / "term"
    folder.mkdir()
    (folder / "metrics-rank0.jsonl").write_text('{"step": 1, "loss/train/total": 1.0}\n')
    (folder / "logs-rank0.txt").write_text("[exception]: TrainingTerminated(143)\n")
    assert summarize(read_run(folder)).status == "killed"


def test_text_from_the_run_is_escaped(tmp_path, open_report):
    """Keys, values and exceptions reach the page as text, never as markup or script."""
    folder = tmp_path / "odd"
    evil = "</script><script>window.__pwned=1</script>"
    with (
        pytest.raises(ValueError, match="pwned"),
        Run(
            max_duration="3ba",
            run_folder=folder,
            loggers=[FileLogger()],
            hparams={"note": '<img src=x onerror="window.__pwned=1">'},
        ) as run,
    ):
        for batch in run.train([[1], [2], [3]]):
            run.logger.log_metrics({f"metrics/eval/{evil}": float(batch[0])})
            if batch[0] == 2:
                raise ValueError(f"bad {evil}")
    seen = open_report(write_report(folder))
    assert not seen.pwned and seen.dialogs == [] and seen.errors == [] and seen.requests == []
    assert f"metrics/eval/{evil}" in seen.text  # shown as text
    assert '<img src=x onerror="window.__pwned=1">' in seen.text
    assert f"ValueError('bad {evil}')" in seen.text


def test_not_a_folder_is_a_clear_error(tmp_path, capsys):
    from obsbus.cli import main

    assert main(["report", str(tmp_path / "missing")]) == 2  # bad input, as argparse's
    err = capsys.readouterr().err
    assert "does not exist: a run folder was expected" in err and err.count("obsbus report:") == 1


def test_a_nan_loss_is_listed_as_a_failure(tmp_path):
    from obsbus.callbacks import NaNMonitor

    folder = tmp_path / "nan"
    with Run(
        max_duration="4ba",
        run_folder=folder,
        loggers=[FileLogger()],
        callbacks=[NaNMonitor(on_nan="log")],
    ) as run:
        for batch in run.train([[1], [2], [3], [4]]):
            run.state.loss = float("nan") if batch[0] >= 3 else 1.0
    failures = summarize(read_run(folder)).failures
    assert "rank 0: loss/train/total is not finite (NaN or inf) from step 3" in failures


def test_python_m_obsbus_report(crashed, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-m", "obsbus.report", str(crashed), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"report -> {out}" and "failed on purpose" in out.read_text()


def test_traces_in_the_folders_the_profiler_was_given_are_summed(tmp_path):
    from obsbus.report._traces import read_traces

    root = tmp_path / "run"
    (root / "config").mkdir(parents=True)
    (root / "config" / "plugins.json").write_text(
        json.dumps(
            {
                "plugins": [
                    {
                        "kind": "callback",
                        "class": "obsbus.profiler.JSONTraceHandler",
                        "args": {"folder": "prof"},
                    },
                    {"kind": "callback", "class": "x.Y", "args": {"folder": "../outside"}},
                ]
            }
        )
    )
    (root / "prof").mkdir()
    events = [
        {"ph": "B", "name": "event/batch", "ts": 0, "pid": 0, "tid": 0},
        {"ph": "B", "name": "callback/SpeedMonitor/batch_end", "ts": 100, "pid": 0, "tid": 0},
        {"ph": "E", "ts": 400, "pid": 0, "tid": 0},  # no name: closes the innermost span
        {"ph": "E", "name": "event/batch", "ts": 1500, "pid": 0, "tid": 0},
        {"ph": "X", "name": "event/batch", "ts": 2000, "dur": 500, "pid": 1, "tid": 0},
    ]
    (root / "prof" / "w.json").write_text(json.dumps({"traceEvents": events}))
    (tmp_path / "outside").mkdir()  # beside the run folder: never read
    (tmp_path / "outside" / "x.json").write_text(json.dumps({"traceEvents": events}))
    # a torn trace: a bare array without its closing bracket
    (root / "prof" / "torn.json").write_text(json.dumps(events[:1] + events[3:4])[:-1])
    traces = read_traces(root, read_run(root).config)
    assert sorted(p.name for p in traces.files) == ["torn.json", "w.json"]
    batch = traces.spans["event/batch"]
    assert (batch.count, batch.total_us) == (3, 1500 + 500 + 1500)
    assert traces.spans["callback/SpeedMonitor/batch_end"].total_us == 300


def test_without_a_status_file_the_start_comes_from_run_json(tmp_path):
    """No RunReport: config/run.json's ``started`` (written at init) starts the duration, and
    the header shows it."""
    import datetime

    folder = tmp_path / "record"
    with Run(max_duration="2ba", run_folder=folder, loggers=[FileLogger()]) as run:
        for batch in run.train([[1], [2]]):
            run.state.loss = float(batch[0])
    run_json = json.loads((folder / "config" / "run.json").read_text())
    # an earlier start than the first row's wall time, as a long first step would give
    run_json["started"] = "2026-01-02T03:04:05+00:00"
    (folder / "config" / "run.json").write_text(json.dumps(run_json))
    data = read_run(folder)
    assert not data.ranks[0].status  # no status file: nothing else says when it started
    summary = summarize(data)
    start = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC).timestamp()
    assert summary.started == start
    assert summary.duration_s == pytest.approx(data.ranks[0].last_wall - start)
    assert "<dt>started</dt><dd>2026-01-02 03:04:05 UTC</dd>" in build_report(folder)
