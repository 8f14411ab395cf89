"""SlackLogger and WebhookLogger against a local HTTP server on 127.0.0.1."""

from __future__ import annotations

import logging
import pickle
import threading
import urllib.request
import uuid
import warnings

import pytest
import torch

from obsbus import Callback, Run
from obsbus.callbacks import NaNMonitor
from obsbus.loggers import FileLogger, RemoteUploaderDownloader, _alert_destination
from obsbus.loggers.alerts import SlackLogger, WebhookLogger

from ._http_server import WebhookServer

TOKEN = "Zq7xK2mPw9LrT4vB8nYc3hJd"  # the secret part of a Slack webhook URL (24 characters)
FAST = {"retry_backoff": 0.01, "max_backoff": 0.05, "close_timeout": 5.0}


@pytest.fixture(autouse=True)
def _no_secret_pattern_outlives_the_test():
    """A destination built and never closed keeps its URL registered as a secret pattern:
    drop what the test added, so other tests (test_masking) see none."""
    from obsbus import masking
    from obsbus.loggers import _alert_secrets

    before = set(masking.secret_patterns())
    yield
    for pattern in set(masking.secret_patterns()) - before:
        masking.remove_secret_pattern(pattern)
        _alert_secrets._holders.pop(pattern.pattern, None)


@pytest.fixture
def server(request):
    """A WebhookServer; ``@pytest.mark.parametrize("server", [...], indirect=True)`` picks
    the mode (or ``(mode, kwargs)``); stopped after the test."""
    param = getattr(request, "param", "ok")
    mode, kwargs = (param, {}) if isinstance(param, str) else param
    srv = WebhookServer(mode, **kwargs).start()
    yield srv
    srv.stop()


def slack_url(server, token=TOKEN, ids=("T0AB12CD3", "B0EF45GH6")) -> str:
    return server.url(f"/services/{ids[0]}/{ids[1]}/{token}")


def make(kind, server, monkeypatch, **kwargs):
    """A SlackLogger or a WebhookLogger(format="json") posting to ``server``."""
    url = kwargs.pop("url", None) or slack_url(server)
    if kind == "slack":
        monkeypatch.setenv("SLACK_WEBHOOK_URL", url)
        return SlackLogger(**{**FAST, **kwargs})
    monkeypatch.setenv("ALERT_URL", url)
    return WebhookLogger("ALERT_URL", **{**FAST, **kwargs})


class Record(Callback):
    """Records, at fit_end (before the destinations' own fit_end), what the alerts were doing."""

    def __init__(self, dest, server=None):
        self.dest, self.server = dest, server
        self.pending_at_fit_end = None
        self.in_flight_at_fit_end = None
        self.batches = 0

    def batch_end(self, state, logger):
        self.batches += 1

    def fit_end(self, state, logger):
        self.pending_at_fit_end = self.dest.pending
        if self.server is not None:
            self.in_flight_at_fit_end = self.server.in_flight


def train(dest, batches=4, callbacks=(), losses=None, during=None, **kwargs):
    """A plain loop under Run; ``during(run, batch_number)`` runs after each loss."""
    data = [torch.tensor([v]) for v in (losses or [0.5 - 0.1 * i for i in range(batches)])]
    with Run(
        max_duration=f"{len(data)}ba",
        loggers=[dest],
        callbacks=list(callbacks),
        run_name="alert-run",
        **kwargs,
    ) as run:
        for i, x in enumerate(run.train(data), 1):
            run.loss(torch.mean, x)
            if during is not None:
                during(run, i)
    return run


def header(payload) -> str:
    return payload["blocks"][0]["text"]["text"]


# ------------------------------------------------------------------ payloads
SCENARIO = [
    "run_started",
    "nan_found",
    "loss_spike",
    "hang_detected",
    "run_failed",
    "upload_failed",
]
EMOJI = {
    "run_started": ":rocket:",
    "nan_found": ":warning:",
    "loss_spike": ":chart_with_upwards_trend:",
    "hang_detected": ":hourglass:",
    "run_failed": ":x:",
    "upload_failed": ":outbox_tray:",
}


def run_every_event(dest, tmp_path):
    """One run that starts, finds a NaN, spikes, hangs, fails, and leaves a failed upload."""
    dump = tmp_path / "rank0-hang.txt"
    dump.write_text('Thread 0x1 (most recent call first):\n  File "train.py", line 7 in step\n')
    store = RemoteUploaderDownloader(
        f"memory://alerts-{uuid.uuid4().hex[:8]}", initial_backoff=0.01, max_backoff=0.05
    )
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(b"1")
    second.write_bytes(b"2")

    def during(run, i):
        if i == 1:
            run.logger.upload_file("ckpt.pt", first)
            store.wait_for_uploads(10)
            run.logger.upload_file("ckpt.pt", second, overwrite=False)  # refused: exists
        if i == 3:
            run.log_metrics({"loss_spike/detected": torch.tensor(1.0)}, step=3)
            run.log_metrics({"loss_spike/ratio": torch.tensor(9.0)}, step=3)  # same step: no 2nd
            dest.alert("Hang on rank 0", "No batch_end for 30 min.", level="error", file=dump)
        if i == 4:
            raise RuntimeError("the data loader died")

    run = Run(
        max_duration="5ba",
        loggers=[dest, store],
        run_name="alert-run",
        callbacks=[NaNMonitor("1ba", on_nan="log")],
    )
    with pytest.raises(RuntimeError, match="the data loader died"), run:
        losses = [0.5, float("nan"), 0.4, 0.3, 0.2]
        for i, x in enumerate(run.train([torch.tensor([v]) for v in losses]), 1):
            run.loss(torch.mean, x)
            during(run, i)
    return dump


def test_json_payload_for_each_event(server, monkeypatch, tmp_path):
    dest = make("json", server, monkeypatch)
    dump = run_every_event(dest, tmp_path)
    payloads = server.payloads
    assert [p["event"] for p in payloads] == SCENARIO
    keys = {
        "event",
        "run_name",
        "rank",
        "level",
        "title",
        "text",
        "step",
        "metrics",
        "file",
        "time",
    }
    assert all(set(p) == keys for p in payloads)
    assert {p["run_name"] for p in payloads} == {"alert-run"}
    assert {p["rank"] for p in payloads} == {0}
    by = {p["event"]: p for p in payloads}
    assert by["run_started"]["level"] == "info" and "5ba" in by["run_started"]["text"]
    assert by["nan_found"]["metrics"] == {"nan/first_bad_batch": 2}
    assert "first at batch 2" in by["nan_found"]["text"]
    assert by["loss_spike"]["metrics"] == {"loss_spike/detected": 1.0}
    assert by["loss_spike"]["step"] == 3 and by["loss_spike"]["level"] == "warning"
    hang = by["hang_detected"]
    assert hang["title"] == "Hang on rank 0" and hang["file"] == str(dump)
    assert 'File "train.py", line 7 in step' in hang["text"]  # the dump's stacks, quoted
    failed = by["run_failed"]
    assert failed["level"] == "error" and "RuntimeError: the data loader died" in failed["text"]
    assert failed["title"] == "Run failed: alert-run (RuntimeError)"
    assert "during(run, i)" in failed["text"]  # the traceback's frames
    upload = by["upload_failed"]
    assert "1 file(s) did not reach the store" in upload["text"] and "ckpt.pt" in upload["text"]
    assert all(p["time"].endswith("+00:00") for p in payloads)
    assert dest.undelivered == {}


def test_slack_block_payload_for_each_event(server, monkeypatch, tmp_path):
    dest = make("slack", server, monkeypatch)
    run_every_event(dest, tmp_path)
    payloads = server.payloads
    assert len(payloads) == len(SCENARIO)
    for event, payload in zip(SCENARIO, payloads, strict=True):
        blocks = payload["blocks"]
        assert isinstance(payload["text"], str) and "alert-run" in payload["text"]
        assert blocks[0]["type"] == "header" and blocks[0]["text"]["type"] == "plain_text"
        assert header(payload).startswith(EMOJI[event])
        assert blocks[1]["type"] == "section" and blocks[1]["text"]["type"] == "mrkdwn"
        assert blocks[-1]["type"] == "context"
        assert "run *alert-run* · rank 0" in blocks[-1]["elements"][0]["text"]
        assert len(blocks) <= 50 and len(header(payload)) <= 150
    nan = payloads[1]["blocks"]
    assert {"type": "mrkdwn", "text": "*nan/first_bad_batch:* 2"} in [b.get("text") for b in nan]


def test_finish_alert_carries_the_final_metrics_read_off_the_training_thread(server, monkeypatch):
    dest = make("json", server, monkeypatch, include_keys=["loss/"])
    held = {}

    class Peek(Callback):
        def fit_end(self, state, logger):
            held.update(dest._latest)  # what the destination holds when training ends

    train(dest, batches=3, callbacks=[Peek()])
    started, finished = server.payloads
    assert started["event"] == "run_started" and finished["event"] == "run_finished"
    assert finished["metrics"] == {"loss/train/total": pytest.approx(0.3)}  # the last loss
    assert "Finished at batch 3, epoch" in finished["text"]
    # Held as tensors until the writer thread read them: no .item() on the training thread.
    assert isinstance(held["loss/train/total"], torch.Tensor)


@pytest.mark.parametrize("kind", ["slack", "json"])
def test_each_alert_is_switchable(server, monkeypatch, tmp_path, kind):
    dest = make(
        kind,
        server,
        monkeypatch,
        on_start=False,
        on_nan=False,
        on_loss_spike=False,
        on_hang=False,
        on_failure=False,
        on_upload_failure=False,
    )
    run_every_event(dest, tmp_path)
    assert server.payloads == []


def test_slack_metrics_beyond_max_logs_per_message_go_in_further_messages(server, monkeypatch):
    dest = make("slack", server, monkeypatch, on_start=False, max_logs_per_message=2)
    train(dest, batches=1, during=lambda run, i: run.log_metrics({"a": 1.0, "b": 2.0, "c": 3.0}))
    first, second = server.payloads
    assert header(first).endswith("(1/2)") and header(second).endswith("(2/2)")
    lines = [
        [
            b["text"]["text"]
            for b in p["blocks"]
            if b["type"] == "section" and b["text"]["text"].startswith("*")
        ]
        for p in (first, second)
    ]
    assert [len(m) for m in lines] == [2, 2]  # the finish alert's 4 metrics, 2 a message
    assert {"*a:* 1.0000", "*b:* 2.0000", "*c:* 3.0000"} < set(lines[0] + lines[1])


def test_composer_formatter_func_makes_the_metric_blocks(server, monkeypatch):
    def formatter(data, **kwargs):
        return [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"{kwargs['header']}|{sorted(data)}"},
            }
        ]

    dest = make(
        "slack",
        server,
        monkeypatch,
        on_start=False,
        formatter_func=formatter,
        include_keys=["loss/train"],
    )
    train(dest, batches=2)
    [finished] = server.payloads
    texts = [b["text"]["text"] for b in finished["blocks"] if b["type"] == "section"]
    assert "Run finished: alert-run|['loss/train/total']" in texts


def test_metrics_summary_every_log_interval_and_every_n_minutes(server, monkeypatch):
    dest = make("json", server, monkeypatch, on_start=False, on_finish=False, log_interval="2ba")
    train(dest, batches=4)
    assert [(p["event"], p["step"]) for p in server.payloads] == [
        ("metrics_summary", 2),
        ("metrics_summary", 4),
    ]
    assert "loss/train/total" in server.payloads[0]["metrics"]

    server.requests.clear()
    clock = [0.0]
    monkeypatch.setattr(_alert_destination, "_now", lambda: clock[0])
    dest = make("json", server, monkeypatch, on_start=False, on_finish=False, summary_interval=5)

    def tick(run, i):
        clock[0] += 2 * 60  # two minutes a batch: a summary every third batch

    train(dest, batches=6, during=tick)
    assert [p["step"] for p in server.payloads] == [3, 6]


def test_summaries_are_off_by_default_and_cost_no_batch_end_dispatch(server, monkeypatch):
    dest = make("json", server, monkeypatch)
    assert "batch_end" in vars(dest) and "epoch_end" in vars(dest)  # the base's no-ops
    train(dest, batches=3)
    assert [p["event"] for p in server.payloads] == ["run_started", "run_finished"]


def test_rank_zero_only_but_failures_from_every_rank(server, monkeypatch):
    dest = make("json", server, monkeypatch)
    run = Run(max_duration="1ba", loggers=[dest], run_name="r")
    monkeypatch.setattr(type(run.state), "rank", property(lambda self: 1))
    with pytest.raises(ValueError, match="boom"), run:
        for x in run.train([torch.tensor([1.0])]):
            run.loss(torch.mean, x)
            dest.alert("Hang", "stuck", level="error")
            raise ValueError("boom")
    assert [(p["event"], p["rank"]) for p in server.payloads] == [
        ("hang_detected", 1),
        ("run_failed", 1),
    ]


# ------------------------------------------------------------ a dead endpoint
@pytest.mark.parametrize("server", ["down"], indirect=True)
def test_server_down_training_finishes_retries_happen_and_close_reports(
    server, monkeypatch, caplog
):
    opened = []
    real = urllib.request.urlopen
    monkeypatch.setattr(
        urllib.request,
        "urlopen",
        lambda *a, **k: (opened.append(threading.current_thread()), real(*a, **k))[1],
    )
    dest = make(
        "slack",
        server,
        monkeypatch,
        retry_backoff=0.5,
        max_backoff=5.0,
        max_attempts=6,
        close_timeout=1.0,
    )
    record = Record(dest)
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        train(dest, batches=20, callbacks=[record])
    assert record.batches == 20
    # Training ended while the start alert was still being retried: nothing waited for it.
    assert record.pending_at_fit_end >= 1
    assert len(opened) >= 2  # retries happened
    assert threading.main_thread() not in opened  # never on the training thread
    assert dest.undelivered == {"run_started": 1, "run_finished": 1}
    [report] = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert "2 alert(s) were not delivered (1 run finished, 1 run started)" in report
    assert "ConnectionRefusedError" in report and "$SLACK_WEBHOOK_URL" in report
    assert slack_url(server) not in caplog.text and TOKEN not in caplog.text


@pytest.mark.parametrize("server", [("flaky", {"failures": 2})], indirect=True)
def test_transient_errors_are_retried_until_delivered(server, monkeypatch):
    dest = make("json", server, monkeypatch, on_finish=False)
    train(dest, batches=1)
    bodies = [r["body"] for r in server.requests]
    assert len(bodies) == 3 and len(set(bodies)) == 1  # two 503s, then the same alert, delivered
    assert dest.attempts == 3 and dest.undelivered == {}


@pytest.mark.parametrize("server", ["error"], indirect=True)
def test_retries_stop_after_max_attempts(server, monkeypatch):
    dest = make("json", server, monkeypatch, on_finish=False, max_attempts=3)
    train(dest, batches=1)
    assert len(server.requests) == 3
    assert dest.undelivered == {"run_started": 1}


@pytest.mark.parametrize("server", [("slow", {"delay": 10.0})], indirect=True)
def test_slow_server_holds_no_step_and_close_is_bounded(server, monkeypatch, caplog):
    opened = []
    real = urllib.request.urlopen
    monkeypatch.setattr(
        urllib.request,
        "urlopen",
        lambda *a, **k: (opened.append(threading.current_thread()), real(*a, **k))[1],
    )
    dest = make("slack", server, monkeypatch, timeout=30.0, close_timeout=0.5)
    record = Record(dest, server)
    with caplog.at_level(logging.ERROR, logger="obsbus"):
        train(dest, batches=20, callbacks=[record])
    assert record.batches == 20
    assert record.pending_at_fit_end >= 1  # the loop finished with the start alert unanswered
    assert opened and threading.main_thread() not in opened
    # close gave up after close_timeout (the server holds requests 10 s) and said what was lost
    assert dest.undelivered == {"run_started": 1, "run_finished": 1}
    for _ in range(200):  # the start request reaches the server (close did not wait for it)
        if server.requests:
            break
        threading.Event().wait(0.05)
    assert server.in_flight == 1  # still held by the server after close returned
    assert any("2 alert(s) were not delivered" in r.getMessage() for r in caplog.records)


def test_a_full_queue_drops_and_counts_instead_of_waiting(monkeypatch):
    srv = WebhookServer("slow", delay=10.0).start()
    try:
        dest = make("json", srv, monkeypatch, max_queue_size=1, close_timeout=0.2)
        results = [dest.alert("Hang", f"number {i}") for i in range(5)]
        assert results[0] and not all(results)  # some were dropped, none waited for room
        dest.post_close()
        assert sum(dest.undelivered.values()) == 5
    finally:
        srv.stop()


# --------------------------------------------------------------------- secrets
@pytest.mark.parametrize("server", ["error"], indirect=True)
def test_the_webhook_url_is_in_no_file_of_the_run_folder_and_no_log_line(
    server, monkeypatch, tmp_path, caplog, capsys
):
    from obsbus.log import setup_logging

    token = uuid.uuid4().hex[:12] + "QxZ" + uuid.uuid4().hex[:9].upper()  # this test's own
    ids = (f"T{uuid.uuid4().hex[:8].upper()}", f"B{uuid.uuid4().hex[:8].upper()}")
    url = slack_url(server, token, ids)  # parts no earlier test registered
    folder = tmp_path / "run"
    setup_logging(folder, stderr=True)
    dest = make("slack", server, monkeypatch, max_attempts=2, url=url)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
        warnings.simplefilter("always")
        run = Run(
            max_duration="3ba",
            loggers=[dest, FileLogger(capture_stderr=True)],
            run_name="secret-run",
            run_folder=folder,
            hparams={"alerts": url},
        )
        with pytest.raises(RuntimeError), run:
            for x in run.train([torch.tensor([0.5])] * 3):
                run.loss(torch.mean, x)
                logging.getLogger("obsbus").error("posting to %s failed", url)
                raise RuntimeError(f"could not reach {url}")
    assert dest.undelivered  # the server answered 500: errors were logged, and the report
    assert server.requests  # the alerts went out (and were refused)
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "env.json" for p in files)  # SLACK_WEBHOOK_URL's value is in there...
    for path in files:
        data = path.read_bytes()
        assert url.encode() not in data and token.encode() not in data, path  # ...masked
    out, err = capsys.readouterr()
    text = "\n".join([caplog.text, out, err, *(str(w.message) for w in caught)])
    logged = text + "".join(p.read_text(errors="replace") for p in files if p.suffix == ".log")
    assert "posting to *** failed" in logged  # the planted line was logged, masked
    assert url not in text and token not in text
    for request in server.requests:  # the failure alert quotes the error, masked
        assert token not in request["body"]
    assert token not in pickle.dumps(dest).decode("latin-1")


def test_secret_arguments_are_refused_without_showing_them(monkeypatch):
    monkeypatch.setenv("SLACK_WEBHOOK_URL", f"https://hooks.slack.com/services/T1/B1/{TOKEN}")
    cases = [
        (lambda: SlackLogger(slack_logging_api_key=f"xoxb-{TOKEN}"), "slack_logging_api_key"),
        (lambda: SlackLogger(webhook_url=f"https://hooks.slack.com/x/{TOKEN}"), "webhook_url"),
        (lambda: WebhookLogger("SLACK_WEBHOOK_URL", url=f"https://h/{TOKEN}"), "url"),
        (lambda: WebhookLogger("SLACK_WEBHOOK_URL", token=TOKEN), "token"),
        (
            lambda: SlackLogger(webhook_url_env=f"https://hooks.slack.com/{TOKEN}"),
            "name of an environment variable",
        ),
    ]
    for build, words in cases:
        with pytest.raises(ValueError, match=words) as info:
            build()
        assert TOKEN not in str(info.value)
    with pytest.raises(ValueError, match="does not take channel_id"):
        SlackLogger(channel_id="C1234")


def test_the_url_comes_from_the_environment_and_must_be_http(monkeypatch):
    monkeypatch.delenv("SLACK_WEBHOOK_URL", raising=False)
    with pytest.raises(ValueError, match=r"environment variable SLACK_WEBHOOK_URL is not set"):
        SlackLogger()
    monkeypatch.setenv("SLACK_WEBHOOK_URL", f"file:///etc/{TOKEN}")
    with pytest.raises(ValueError, match="is not an http") as info:
        SlackLogger()
    assert TOKEN not in str(info.value)
    monkeypatch.setenv("ALERT_URL", "https://alerts.example.com/hook")
    with pytest.raises(ValueError, match=r"ALERT_TOKEN .*is not set"):
        WebhookLogger("ALERT_URL", token_env="ALERT_TOKEN")
    with pytest.raises(ValueError, match="include_keys must be regular expressions"):
        WebhookLogger("ALERT_URL", include_keys=["loss/("])
    with pytest.raises(ValueError, match="format must be 'json' or 'slack'"):
        WebhookLogger("ALERT_URL", format="xml")


def test_a_token_goes_in_the_authorization_header_only(server, monkeypatch):
    monkeypatch.setenv("ALERT_URL", server.url())
    monkeypatch.setenv("ALERT_TOKEN", TOKEN)
    dest = WebhookLogger("ALERT_URL", token_env="ALERT_TOKEN", on_finish=False, **FAST)
    train(dest, batches=1)
    [request] = server.requests
    assert request["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in request["body"]


def test_pickles_without_secrets_and_works_after(server, monkeypatch):
    dest = make("json", server, monkeypatch, on_start=False)
    blob = pickle.dumps(dest)
    assert slack_url(server).encode() not in blob and TOKEN.encode() not in blob
    copy = pickle.loads(blob)
    train(copy, batches=1)
    assert [p["event"] for p in server.payloads] == ["run_finished"]


def test_two_fits_close_twice_and_flush_under_trainer(server, monkeypatch):
    import torch.nn.functional as F

    from obsbus import Trainer

    from ..helpers import regression_data, tiny_model

    dest = make("json", server, monkeypatch)
    trainer = Trainer(
        tiny_model(),
        regression_data(3),
        "1ep",
        loss_fn=F.mse_loss,
        loggers=[dest],
        device="cpu",
        strict=True,
    )
    from obsbus import masking

    def held():
        return any(dest._secrets.pattern == p.pattern for p in masking.secret_patterns())

    assert held()  # from construction: config/env.json is written before init
    trainer.fit()
    assert dest.flush(5.0)  # what a watchdog does before it ends the process
    assert [p["event"] for p in server.payloads] == ["run_started", "run_finished"]
    trainer.fit(duration="2ba")
    trainer.close()
    assert not held()  # released at post_close
    trainer.close()
    assert [p["event"] for p in server.payloads] == ["run_started", "run_finished"] * 2
    assert [p["step"] for p in server.payloads] == [0, 3, 3, 5]
    assert dest.undelivered == {} and pickle.loads(pickle.dumps(dest.state_dict())) == {}
