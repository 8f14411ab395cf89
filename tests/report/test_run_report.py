"""RunReport under obsbus's Trainer and Run: the page at fit_end, on exception and at close."""

from __future__ import annotations

import importlib.util
import json
import re
import warnings

import pytest
import torch.nn.functional as F

from obsbus import LoggerDestination, Run, Trainer
from obsbus.errors import MissingExtraError, ObsbusWarning
from obsbus.loggers import FileLogger, RunReport

from ..helpers import regression_data, tiny_model


class Uploads(LoggerDestination):
    """Records each file handed to upload_file, with its content at that moment."""

    def __init__(self) -> None:
        self.files: list[tuple[str, str, bool]] = []

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.files.append((remote_file_name, file_path.read_text(), overwrite))

    def pages(self) -> list[str]:
        return [text for name, text, _ in self.files if name.endswith("/report.html")]


def _status(folder, rank=0):
    return json.loads((folder / f"run-status-rank{rank}.json").read_text())


def _last_step(html: str) -> str:
    table = html.split('<table class="ranks">', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", table.split("</tr>")[1])
    return cells[3]


def test_trainer_fit_end_writes_the_page_with_every_metric_and_uploads_it(tmp_path):
    uploads = Uploads()
    trainer = Trainer(
        tiny_model(),
        regression_data(3),
        "1ep",
        loss_fn=F.mse_loss,
        device="cpu",
        run_folder=tmp_path,
        run_name="fit-end",
        strict=True,
        # RunReport before the FileLogger: it still sees the FileLogger's last rows
        loggers=[RunReport(), FileLogger(write_period=60.0), uploads],
    )
    trainer.fit()
    assert _status(tmp_path)["status"] == "finished"
    page = (tmp_path / "report.html").read_text()
    assert _last_step(page) == "3" and "fit-end" in page
    assert [
        (name, overwrite) for name, _, overwrite in uploads.files if name.endswith("report.html")
    ] == [("fit-end/report.html", True)]
    assert uploads.pages()[0] == page  # handed over whole
    trainer.close()
    assert _status(tmp_path)["status"] == "finished"


def test_run_exception_writes_the_page_with_the_exception(tmp_path):
    uploads = Uploads()
    model = tiny_model()
    with (
        pytest.raises(RuntimeError, match="diverged"),
        Run(
            model=model,
            max_duration="5ba",
            run_folder=tmp_path,
            run_name="boom",
            loggers=[FileLogger(), RunReport(), uploads],
            strict=True,
        ) as run,
    ):
        for x, y in run.train(regression_data(5)):
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
            if run.state.timestamp.batch.value == 3:
                raise RuntimeError("loss diverged at batch 3")
    status = _status(tmp_path)
    assert status["status"] == "failed" and "loss diverged at batch 3" in status["exception"]
    assert status["timestamp"]["batch"] == 3
    page = (tmp_path / "report.html").read_text()
    assert "loss diverged at batch 3" in page and _last_step(page) == "3"
    assert any("loss diverged" in text for text in uploads.pages())


def test_close_without_fit_writes_the_page(tmp_path):
    uploads = Uploads()
    run = Run(max_duration="2ba", run_folder=tmp_path, loggers=[RunReport(), uploads])
    assert _status(tmp_path)["status"] == "running"  # written at init
    assert not (tmp_path / "report.html").exists()
    run.close()
    assert _status(tmp_path)["status"] == "closed"
    assert "closed without fit_end" in (tmp_path / "report.html").read_text()
    assert len(uploads.pages()) == 1


def test_a_failing_render_never_stops_training(tmp_path, monkeypatch):
    import obsbus.report

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(obsbus.report, "write_report", broken)
    model = tiny_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Run(
            model=model,
            max_duration="3ba",
            run_folder=tmp_path,
            loggers=[RunReport(), FileLogger()],
            strict=True,
        ) as run:
            for x, y in run.train(regression_data(3)):
                run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
    messages = [str(w.message) for w in caught if issubclass(w.category, ObsbusWarning)]
    assert any("RunReport could not write the report: OSError: disk full" in m for m in messages)
    assert run.state.timestamp.batch.value == 3
    assert _status(tmp_path)["status"] == "finished"
    assert not (tmp_path / "report.html").exists()


def test_without_the_extra_construction_names_the_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bokeh" else real(name, *a)
    )
    with pytest.raises(MissingExtraError, match=r"RunReport .*pip install 'obsbus\[report\]'"):
        RunReport()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"filename": ""}, TypeError, "RunReport filename must be a non-empty str"),
        ({"filename": 5}, TypeError, r"^RunReport filename must be a non-empty str, got 5\.$"),
        ({"filename": "{rnak}.html"}, ValueError, "unknown placeholder"),
        ({"remote_file_name": ""}, TypeError, "remote_file_name must be a non-empty str or None"),
        ({"buckets": 0}, ValueError, r"^RunReport buckets must be a whole number >= 1, got 0\.$"),
        ({"buckets": True}, ValueError, r"^RunReport buckets must be a whole number >= 1, got True\.$"),
    ],
    ids=["empty-name", "int-name", "bad-placeholder", "empty-remote", "no-buckets", "bool-buckets"],
)
def test_bad_arguments_are_refused_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        RunReport(**kwargs)


class Broken(LoggerDestination):
    """A store whose uploads fail: at once (counted by the logger) and in the background."""

    def __init__(self) -> None:
        self.gave_up: list[str] = []

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        raise OSError(f"bucket refused {remote_file_name}")

    def close(self, state, logger):
        self.gave_up.append("ckpt.pt: gave up after 3 attempts")  # known only after close

    @property
    def failed_uploads(self):
        return list(self.gave_up)


def test_failed_destinations_and_uploads_reach_the_status_and_the_page(tmp_path):
    model = tiny_model()
    with Run(
        model=model,
        max_duration="2ba",
        run_folder=tmp_path,
        loggers=[FileLogger(), RunReport(), Broken()],
    ) as run:
        for x, y in run.train(regression_data(2)):
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
    failures = _status(tmp_path)["failures"]
    assert any(line.startswith("Broken failed") and "bucket refused" in line for line in failures)
    assert "Broken: upload failed: ckpt.pt: gave up after 3 attempts" in failures  # post_close
    page = (tmp_path / "report.html").read_text()
    assert "bucket refused" in page and "gave up after 3 attempts" in page


def test_import_obsbus_and_building_runreport_import_no_plotting_library():
    import subprocess
    import sys

    code = (
        "import sys, obsbus, obsbus.loggers, obsbus.cli; obsbus.loggers.RunReport(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bokeh', 'plotly', 'obsbus.report')"
        " or m.startswith('obsbus.report')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.fixture
def renders(monkeypatch):
    """Every page RunReport writes, as (its path, its text right after the write)."""
    import obsbus.report

    written: list[tuple[str, str]] = []
    real = obsbus.report.write_report

    def counting(*args, **kwargs):
        path = real(*args, **kwargs)
        written.append((str(path), path.read_text()))
        return path

    monkeypatch.setattr(obsbus.report, "write_report", counting)
    return written


def test_a_finished_run_renders_once(tmp_path, renders):
    """fit_end writes the page; close does not again: the merged trace the profiler writes at
    close changes nothing the page shows (the per-rank traces are summed, not the merge)."""
    from ._runs import train

    train(str(tmp_path), 6)
    assert (tmp_path / "traces" / "merged_trace.json").is_file()  # written after fit_end
    assert len(renders) == 1
    assert renders[0][1] == (tmp_path / "report.html").read_text()
    assert _status(tmp_path)["status"] == "finished" and _last_step(renders[0][1]) == "6"


def test_a_failed_run_ends_with_the_failure_page(tmp_path, renders):
    from ._runs import train

    with pytest.raises(RuntimeError, match="failed on purpose at batch 4"):
        train(str(tmp_path), 8, fail_at=4)
    assert 1 <= len(renders) <= 2  # at exception; again at close only if its files grew
    last = renders[-1][1]
    assert "failed on purpose at batch 4" in last and _last_step(last) == "4"
    assert last == (tmp_path / "report.html").read_text()
    assert _status(tmp_path)["status"] == "failed"


def test_a_run_closed_without_fit_end_renders_once(tmp_path, renders):
    run = Run(max_duration="5ba", run_folder=tmp_path, loggers=[RunReport(), FileLogger()])
    run.logger.log_metrics({"loss/train/total": 0.5}, step=1)  # logged, then no fit at all
    run.close()
    assert len(renders) == 1
    assert "closed without fit_end" in renders[0][1] and _last_step(renders[0][1]) == "1"
