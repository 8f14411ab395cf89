from __future__ import annotations

import io
import re

import pytest
import torch
import torch.nn.functional as F
import tqdm

import obsbus.loggers._progress_bars as bars
import obsbus.loggers.progress_bar_logger as pbl
from obsbus import Callback, Engine, Event, Logger, Run, State, Timestamp, Trainer
from obsbus.loggers.console_logger import format_value
from obsbus.loggers.in_memory_logger import InMemoryLogger
from obsbus.loggers.progress_bar_logger import ProgressBarLogger

from ..helpers import regression_data, tiny_model


class Terminal(io.StringIO):
    """A stream that says it is a TTY, so the logger draws a live tqdm bar into it."""

    def isatty(self):
        return True


class Unsized:
    """A re-iterable dataloader without a length."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Tick(Callback):
    """Moves the fake clock on by ``seconds`` at every batch."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, seconds

    def batch_start(self, state, logger):
        self.clock.now += self.seconds


@pytest.fixture(autouse=True)
def _no_bar_outlives_a_test():
    yield
    for bar in open_bars():  # a failed test must not leave bars that fail the next one
        bar.close()


@pytest.fixture
def conversions(monkeypatch):
    """Every to_host call the progress bar makes, with the values it was handed."""
    calls = []
    real = pbl.to_host

    def counting(values):
        calls.append(dict(values))
        return real(values)

    monkeypatch.setattr(pbl, "to_host", counting)
    return calls


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(bars, "_clock", fake)  # the clock the bars read
    return fake


def trainer(pb, data=None, duration="2ep", *, mem=None, callbacks=(), **kwargs):
    loggers = [pb] if mem is None else [mem, pb]
    return Trainer(
        tiny_model(),
        regression_data(4) if data is None else data,
        duration,
        loss_fn=F.mse_loss,
        loggers=loggers,
        callbacks=list(callbacks),
        device="cpu",
        **kwargs,
    )


def fit(pb, data=None, duration="2ep", **kwargs):
    with trainer(pb, data, duration, **kwargs) as t:
        t.fit()
    return t


def screen(text):
    """Each line as a terminal finally shows it: what follows the last carriage return."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


def open_bars():
    return list(getattr(tqdm.tqdm, "_instances", ()))


def train_lines(text):
    return [line for line in text.splitlines() if line.startswith("train")]


# --------------------------------------------------------------- units and totals
@pytest.mark.parametrize(
    ("duration", "data", "kwargs", "last"),
    [
        ("4ba", regression_data(4), {}, r"train epoch 1: 100% 4/4 \[.*ba/s"),
        ("2ep", regression_data(4), {}, r"train epoch 2/2: 100% 8/8 \[.*ba/s"),
        ("2ep", Unsized(regression_data(3)), {}, r"train epoch 2/2: 100% 2/2 \[.*(ep/s|s/ep)"),
        ("64sp", regression_data(8), {}, r"train epoch 1: 100% 64\.0/64\.0 \[.*sp/s"),
        (
            "4000tok",
            regression_data(4),
            {"num_tokens_fn": lambda b: 1000},
            r"train epoch 1: 100% 4\.00k/4\.00k \[.*tok/s",
        ),
    ],
    ids=["batches", "epochs-as-batches", "epochs-unsized", "samples", "tokens"],
)
def test_total_and_unit_follow_max_duration(duration, data, kwargs, last):
    out = io.StringIO()
    fit(ProgressBarLogger(stream=out, postfix_keys=()), data, duration, **kwargs)
    lines = train_lines(out.getvalue())
    assert re.match(last, lines[-1]), lines


def test_seconds_count_whole_seconds_of_wall_clock():
    out = io.StringIO()
    state = State(run_name="r", max_duration="30sec")
    engine = Engine(state, Logger(state, [ProgressBarLogger(stream=out, live=True)]))
    engine.run_event(Event.INIT)
    engine.run_event(Event.FIT_START)
    state.timestamp = Timestamp(batch=1, total_wct=12.7)
    engine.run_event(Event.BATCH_END)
    engine.run_event(Event.FIT_END)
    assert screen(out.getvalue())[-2].startswith("train epoch 1:  40%|####      | 12/30 [")


@pytest.mark.parametrize(
    ("more", "first_draw", "last_draw"),
    [("2ba", "3/5", "5/5"), ("1ep", "3/6", "6/6")],
    ids=["batches", "epochs"],
)
def test_a_second_fit_continues_the_count(more, first_draw, last_draw):
    out = Terminal()
    with trainer(ProgressBarLogger(stream=out), regression_data(3), "1ep") as t:
        t.fit()
        first = out.getvalue()
        t.fit(duration=more)
    second = out.getvalue()[len(first) :]
    assert f"| {first_draw} [" in second.split("\r")[1]  # the new bar opens where the last stopped
    assert "| 0/" not in second
    assert f"| {last_draw} [" in screen(second)[-2]


# ------------------------------------------------------------------------ eval
def test_eval_bar_opens_below_the_train_bar_and_closes():
    out = Terminal()
    seen = []

    class Probe(Callback):
        def eval_batch_end(self, state, logger):
            seen.append(sorted(abs(bar.pos) for bar in open_bars()))  # tqdm negates fixed positions

    t = trainer(
        ProgressBarLogger(stream=out),
        regression_data(3),
        "1ep",
        callbacks=[Probe()],
        eval_dataloader=regression_data(2, seed=1),
    )
    t.fit()
    assert open_bars() == []  # fit_end closed both, before close() ran
    t.close()
    assert seen == [[0, 1], [0, 1]]  # train bar and, below it, the eval bar
    assert "eval:   0%|          | 0/2 [" in out.getvalue()
    after = out.getvalue().rsplit("eval:", 1)[1]
    assert re.search(r"\n\r +\x1b\[A", after)  # its line was blanked as it closed: it vanished


def test_standalone_eval_bar_stays_and_plain_eval_prints_one_line():
    out = Terminal()
    with trainer(ProgressBarLogger(stream=out)) as t:
        t.eval(regression_data(2, seed=1))
    assert any(line.startswith("eval: 100%|##########| 2/2 [") for line in screen(out.getvalue()))

    plain = io.StringIO()
    fit(ProgressBarLogger(stream=plain), eval_dataloader=regression_data(2, seed=1))
    evals = [line for line in plain.getvalue().splitlines() if line.startswith("eval")]
    assert len(evals) == 2 and all(line.startswith("eval: 100% 2/2 [") for line in evals)


# --------------------------------------------------------------------- postfix
def test_postfix_shows_the_latest_loss_and_eval_loss_formatted():
    out, mem = io.StringIO(), InMemoryLogger()
    fit(ProgressBarLogger(stream=out), mem=mem, eval_dataloader=regression_data(2, seed=1))
    loss = mem.get_timeseries("loss/train/total")["loss/train/total"][-1]
    eval_loss = mem.get_timeseries("metrics/eval/loss")["metrics/eval/loss"][-1]
    last = train_lines(out.getvalue())[-1]
    assert last.endswith(f", loss={format_value(loss)}, eval/loss={format_value(eval_loss)}]")
    assert not re.search(r"\d{7}", last)  # formatted, not a wall of digits


def test_postfix_keys_pick_and_shorten_and_at_most_four_show():
    out = io.StringIO()
    keys = ["metrics/eval/", "throughput/", "loss/train/total"]
    with Run(max_duration="1ba", loggers=[ProgressBarLogger(stream=out, postfix_keys=keys)]) as run:
        for _ in run.train([[1]]):
            run.log_metrics(
                {
                    "throughput/samples_per_sec": 12345.678,
                    "memory/peak": 5.0,
                    "metrics/eval/acc": 0.5,
                    "metrics/val/acc": 0.25,
                    "throughput/batches_per_sec": 3,
                    "throughput/tokens_per_sec": 7,
                }
            )
            run.state.loss = 0.125
    last = train_lines(out.getvalue())[-1]
    assert last.endswith(
        ", eval/acc=0.5000, throughput/samples_per_sec=12,345.68, "
        "throughput/batches_per_sec=3, throughput/tokens_per_sec=7]"
    )


def test_names_that_would_clash_keep_their_full_key():
    out = io.StringIO()
    with Run(max_duration="1ba", loggers=[ProgressBarLogger(stream=out)]) as run:
        for _ in run.train([[1]]):
            run.log_metrics({"metrics/loss": 0.75, "metrics/train/acc": 0.5})
            run.state.loss = 0.125
    assert train_lines(out.getvalue())[-1].endswith(
        ", loss/train/total=0.1250, metrics/loss=0.7500, acc=0.5000]"
    )


def test_live_postfix_converts_once_per_interval_not_every_batch(conversions, clock):
    out, mem = Terminal(), InMemoryLogger()
    fit(
        ProgressBarLogger(stream=out, postfix_interval=1.0),
        regression_data(20),
        "20ba",
        mem=mem,
        callbacks=[Tick(clock, 0.25)],
    )
    assert len(conversions) == 5  # at batches 4, 8, 12, 16, 20: one second of (fake) time apart
    assert all(torch.is_tensor(v) for call in conversions for v in call.values())  # held, unsynced
    loss = mem.get_timeseries("loss/train/total")["loss/train/total"][-1]
    assert screen(out.getvalue())[-2].endswith(f"loss={format_value(loss)}]")


@pytest.mark.parametrize(("interval", "expected"), [(3600.0, 1), (0, 20)], ids=["hour", "zero"])
def test_postfix_interval_bounds_the_conversions(conversions, interval, expected):
    out, mem = Terminal(), InMemoryLogger()
    fit(
        ProgressBarLogger(stream=out, postfix_interval=interval),
        regression_data(20),
        "20ba",
        mem=mem,
    )
    assert len(conversions) == expected  # an hour: only fit_end's; zero: every batch
    loss = mem.get_timeseries("loss/train/total")["loss/train/total"][-1]
    assert screen(out.getvalue())[-2].endswith(f"loss={format_value(loss)}]")


def test_no_postfix_keys_means_no_conversions(conversions):
    fit(ProgressBarLogger(stream=Terminal(), postfix_interval=0, postfix_keys=()), duration="4ba")
    assert conversions == []


# ----------------------------------------------------------------- not a TTY
def test_not_a_tty_prints_a_plain_line_every_tenth_and_converts_only_for_them(conversions):
    out = io.StringIO()
    with Run(max_duration="100ba", loggers=[ProgressBarLogger(stream=out)]) as run:
        for i, _ in enumerate(run.train([[1, 2]] * 100)):
            run.state.loss = torch.tensor(i / 100)
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert [int(re.match(r"train epoch 1: +\d+% (\d+)/100 \[", line)[1]) for line in lines] == list(
        range(10, 101, 10)
    )
    assert lines[-1].endswith(", loss=0.9900]")
    assert len(conversions) == len(lines)


def test_not_a_tty_without_a_total_prints_a_line_a_minute(clock):
    out = io.StringIO()
    with Run(loggers=[ProgressBarLogger(stream=out)], callbacks=[Tick(clock, 61.0)]) as run:
        for _ in run.train(Unsized([[1], [2], [3]])):
            run.state.loss = 0.5
    assert [
        re.match(r"train epoch 1: (\d)ba \[", line)[1] for line in out.getvalue().splitlines()
    ] == ["1", "2", "3"]


def test_stream_name_is_resolved_when_the_bar_opens(capsys):
    fit(ProgressBarLogger(), duration="2ba")
    err = capsys.readouterr().err  # pytest's capture is not a TTY: plain lines
    assert "train epoch 1: 100% 2/2 [" in err and "\r" not in err


# ------------------------------------------------------------ logging around bars
def test_a_tqdm_write_lands_on_its_own_line_while_the_bar_is_live():
    out = Terminal()

    class Say(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch == "2ba":
                tqdm.tqdm.write("hello from loguru", file=out)

    fit(ProgressBarLogger(stream=out), duration="4ba", callbacks=[Say()])
    shown = screen(out.getvalue())
    assert "hello from loguru" in shown  # the bar was cleared first, then redrawn below
    assert shown[shown.index("hello from loguru") + 1].startswith("train epoch 1: 100%|")


def test_traces_are_printed_when_asked():
    out = io.StringIO()
    with Run(max_duration="1ba", loggers=[ProgressBarLogger(stream=out, log_traces=True)]) as run:
        for _ in run.train([[1]]):
            run.logger.log_traces({"algorithm/ema": "on"})
    assert "[trace]: algorithm/ema: on\n" in out.getvalue()


def test_an_exception_closes_every_bar_before_close():
    out = Terminal()
    run = Run(max_duration="4ba", loggers=[ProgressBarLogger(stream=out)])
    with pytest.raises(RuntimeError, match="boom"), run.fitting():  # fitting() doesn't close
        for i, _ in enumerate(run.train([[1]] * 4)):
            if i == 2:
                raise RuntimeError("boom")
    assert open_bars() == []  # closed at the exception event
    run.close()
    assert re.match(r"train epoch 1:  50%\|#####     \| 2/4 \[", screen(out.getvalue())[-2])


# ------------------------------------------------------------------- ranks, env
@pytest.mark.parametrize(
    "env",
    [{"LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2"}, {"TQDM_DISABLE": "1"}],
    ids=["local_rank_1", "TQDM_DISABLE"],
)
def test_silent_off_local_rank_zero_and_with_tqdm_disable(monkeypatch, conversions, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = Terminal()
    fit(
        ProgressBarLogger(stream=out, postfix_interval=0, log_traces=True),
        duration="2ba",
        eval_dataloader=regression_data(2),
        eval_interval="1ba",
    )
    assert out.getvalue() == ""
    assert conversions == []


# ------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"stream": "stdlog"}, ValueError, r"ProgressBarLogger stream must be 'stdout', 'stderr' or a text stream \(an object with write\(\)\), got 'stdlog'\. Did you mean 'stdout'\?"),
        ({"stream": 3}, TypeError, r"stream must be .* got 3\."),
        ({"postfix_interval": "1s"}, TypeError, r"postfix_interval must be a finite number of seconds >= 0, got '1s'\. To fix, pass the number"),
        ({"postfix_interval": -1}, ValueError, r"postfix_interval must be a finite number of seconds >= 0, got -1\."),
        ({"postfix_interval": float("nan")}, ValueError, r"postfix_interval must be .* got nan\."),
        ({"postfix_keys": "loss"}, TypeError, r"postfix_keys must be a list .* got 'loss'"),
        ({"postfix_keys": ["loss", ""]}, ValueError, r"postfix_keys entry '' is not supported"),
        ({"postfix_keys": ["loss", 3]}, TypeError, r"postfix_keys entries must be str, got 3;"),
        ({"live": "yes"}, TypeError, r"live must be True, False or None, got 'yes'"),
        ({"log_traces": 1}, TypeError, r"log_traces must be True or False, got 1"),
    ],
    ids=[
        "stream-name",
        "stream-type",
        "interval-type",
        "interval-negative",
        "interval-nan",
        "keys-str",
        "keys-empty",
        "keys-int",
        "live",
        "log_traces",
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        ProgressBarLogger(**kwargs)
