"""``at_interval``: the engine calls a hook only when its plug-in's interval is due, and
``Run`` skips the events nobody handles, without changing what any plug-in sees."""

from __future__ import annotations

import pytest

from obsbus import Callback, Event, LogInterval, Run, State
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.interval import at_interval
from obsbus.logger import LoggerDestination
from obsbus.loggers import InMemoryLogger


class Gated(Callback):
    """Records every call of its hooks, with the count each saw."""

    def __init__(self, every: str, journal: list | None = None, name: str = "gated") -> None:
        self.log_interval = LogInterval(every, "Gated log_interval")
        self.journal = [] if journal is None else journal
        self.name = name

    @at_interval("log_interval")
    def batch_end(self, state, logger):
        self.journal.append((self.name, "batch_end", state.timestamp._batch))

    @at_interval("log_interval")
    def after_train_batch(self, state, logger):
        self.journal.append((self.name, "after_train_batch", state.timestamp._batch + 1))

    @at_interval("log_interval")
    def epoch_end(self, state, logger):
        self.journal.append((self.name, "epoch_end", state.timestamp._epoch))


class Always(Callback):
    def __init__(self, journal: list, name: str) -> None:
        self.journal, self.name = journal, name

    def batch_end(self, state, logger):
        self.journal.append((self.name, "batch_end", state.timestamp._batch))


def train(plugins, batches=10, per_epoch=5, loggers=()):
    with Run(
        max_duration=f"{batches}ba", run_name="t", callbacks=list(plugins), loggers=list(loggers)
    ) as run:
        for _ in run.train([[i] for i in range(per_epoch)]):
            pass
    return run


def test_a_batch_interval_hook_runs_only_on_due_batches():
    cb = Gated("3ba")
    train([cb])
    assert [(h, n) for _, h, n in cb.journal] == [
        ("after_train_batch", 3),
        ("batch_end", 3),
        ("after_train_batch", 6),
        ("batch_end", 6),
        ("after_train_batch", 9),
        ("batch_end", 9),
    ]  # no epoch_end: a batch interval is never due at an epoch


def test_an_epoch_interval_hook_runs_at_due_epochs_and_never_at_a_batch():
    cb = Gated("2ep")
    train([cb], batches=20, per_epoch=5)
    assert cb.journal == [("gated", "epoch_end", 2), ("gated", "epoch_end", 4)]


def test_order_among_gated_and_plain_callbacks_is_kept():
    journal: list = []
    train([Always(journal, "a"), Gated("2ba", journal, "g"), Always(journal, "c")], batches=4)
    at_four = [name for name, hook, n in journal if hook == "batch_end" and n == 4]
    at_three = [name for name, hook, n in journal if hook == "batch_end" and n == 3]
    assert at_four == ["a", "g", "c"] and at_three == ["a", "c"]


def test_two_periods_call_each_hook_exactly_when_due_in_order():
    # On a batch no period divides, only the every-time hooks run; where one does, every
    # due hook runs, in the order given.
    journal: list = []
    plugins = [Gated("2ba", journal, "g2"), Always(journal, "a"), Gated("3ba", journal, "g3")]
    train(plugins, batches=12, per_epoch=12)
    for n in range(1, 13):
        want = [name for name, every in (("g2", 2), ("a", 1), ("g3", 3)) if n % every == 0]
        got = [name for name, hook, at in journal if hook == "batch_end" and at == n]
        assert got == want, n


def test_a_direct_call_is_not_gated():
    cb = Gated("3ba")
    state = State(run_name="t")
    cb.batch_end(state, None)  # the decorator changes nothing about the method itself
    assert cb.journal == [("gated", "batch_end", 0)]


def test_an_interval_of_none_leaves_the_hook_called_every_time():
    cb = Gated("3ba")
    cb.log_interval = None
    train([cb], batches=4)
    assert [n for _, h, n in cb.journal if h == "batch_end"] == [1, 2, 3, 4]


def test_a_subclass_override_without_the_decorator_is_called_every_time():
    class Plain(Gated):
        def batch_end(self, state, logger):
            self.journal.append(("plain", "batch_end", state.timestamp._batch))

    cb = Plain("3ba")
    train([cb], batches=4)
    assert [n for _, h, n in cb.journal if h == "batch_end"] == [1, 2, 3, 4]


def test_a_gated_destination_is_called_only_when_due_and_its_failure_is_contained():
    class Dest(LoggerDestination):
        def __init__(self):
            self.log_interval = LogInterval("2ba", "Dest log_interval")
            self.seen = []

        @at_interval("log_interval")
        def batch_end(self, state, logger):
            self.seen.append(state.timestamp._batch)
            raise RuntimeError("boom")

    dest = Dest()
    run = train([], batches=5, loggers=[dest])
    assert dest.seen == [2, 4]
    assert run.logger.failures.counts  # contained, counted, the run went on


def test_a_missing_attribute_fails_when_the_run_is_built():
    class Typo(Callback):
        @at_interval("log_intervall")
        def batch_end(self, state, logger):
            pass

    with pytest.raises(TypeError, match=r"Typo.batch_end.*no attribute 'log_intervall'"):
        Run(max_duration="1ba", callbacks=[Typo()])


def test_an_attribute_that_is_not_a_log_interval_is_refused():
    class Wrong(Callback):
        log_interval = "10ba"

        @at_interval()
        def batch_end(self, state, logger):
            pass

    with pytest.raises(TypeError, match=r"Wrong.log_interval must be a LogInterval.*'10ba'"):
        Run(max_duration="1ba", callbacks=[Wrong()])


@pytest.mark.parametrize("bad", ["fit_end", "on_batch_end"])
def test_only_batch_and_epoch_hooks_can_be_gated(bad):
    def hook(self, state, logger):
        pass

    hook.__name__ = bad
    with pytest.raises(ValueError, match=rf"got '{bad}'.*batch_end"):
        at_interval()(hook)


@pytest.mark.parametrize("bad", [3, "", "log interval"])
def test_the_attribute_name_is_checked(bad):
    with pytest.raises(TypeError, match=r"at_interval attribute must name"):
        at_interval(bad)


def test_run_skips_unhandled_events_but_fires_every_handled_one():
    seen: list = []

    class Forward(Callback):
        def after_forward(self, state, logger):
            seen.append("after_forward")

    with Run(max_duration="2ba", callbacks=[Forward()]) as run:
        assert not run.engine.handles[Event.BEFORE_FORWARD]
        assert run.engine.handles[Event.AFTER_FORWARD]
        for (x,) in run.train([[1], [2]]):
            run.forward(lambda v: v, x)
    assert seen == ["after_forward", "after_forward"]


def test_a_callback_added_mid_run_gets_the_events_nobody_handled_before():
    seen: list = []

    class Late(Callback):
        def before_train_batch(self, state, logger):
            seen.append(state.timestamp._batch)

    with Run(max_duration="3ba") as run:
        for i, _ in enumerate(run.train([[1], [2], [3]])):
            if i == 0:
                run.engine.add_callback(Late())
    assert seen == [1, 2]


def _keys_by_step(mem: InMemoryLogger) -> dict[str, list[int]]:
    return {key: list(steps) for key, steps in sorted(mem.steps.items())}


def test_the_default_monitors_log_the_same_keys_at_the_same_steps_gated_or_not(monkeypatch):
    """The gate is an optimization only: with the engine calling every hook (no gate),
    the five monitors log exactly what they log gated."""
    import torch

    def run_stack(gate: bool):
        if not gate:
            monkeypatch.setattr("obsbus.engine.hook_period", lambda *a: None)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        mem = InMemoryLogger()
        monitors = [
            SpeedMonitor(log_interval="3ba", window_size=2),
            MemoryMonitor(log_interval="3ba"),
            NaNMonitor(check_interval="3ba"),
            LRMonitor(log_interval="1ep"),
            OptimizerMonitor(log_interval="3ba"),
        ]
        data = [(torch.randn(2, 4), torch.randn(2, 2)) for _ in range(4)]
        with Run(
            model=model, optimizers=opt, max_duration="10ba", callbacks=monitors, loggers=[mem]
        ) as run:
            for x, y in run.train(data):
                opt.zero_grad()
                loss = run.loss(torch.nn.functional.mse_loss, run.forward(model, x), y)
                run.backward(loss)
                opt.step()
        monkeypatch.undo()
        return _keys_by_step(mem)

    gated, plain = run_stack(True), run_stack(False)
    assert gated == plain
    assert gated["lr-SGD/group0"] == [4, 8]  # "1ep" over 4-batch epochs
    for key in ("l2_norm/grad/global", "memory/host_rss_mem", "throughput/samples_per_sec"):
        assert gated[key] == [3, 6, 9], key
    assert gated["loss/train/total"] == list(range(1, 11))


@pytest.mark.parametrize("interval", ["3ba", "1ep"])
def test_console_and_loguru_loggers_are_gated_and_print_the_same_gated_or_not(
    monkeypatch, interval
):
    """ConsoleLogger and LoguruLogger act only every log_interval: the engine skips their
    batch_end/epoch_end on the other batches, and what they print is what they print ungated."""
    import io

    from obsbus.interval import hook_period
    from obsbus.loggers import ConsoleLogger, LoguruLogger

    def run_once(gate: bool):
        if not gate:
            monkeypatch.setattr("obsbus.engine.hook_period", lambda *a: None)
        stream, lines = io.StringIO(), []
        console = ConsoleLogger(log_interval=interval, stream=stream)
        text = LoguruLogger(log_interval=interval)
        text._emit = lambda line, **extra: lines.append(line)  # what it would write
        with Run(max_duration="7ba", loggers=[console, text]) as run:
            for _ in run.train([[1], [2], [3]]):
                run.log_metrics({"m": float(run.state.timestamp._batch)})
        monkeypatch.undo()
        return (console, text), stream.getvalue(), lines

    (console, text), gated_out, gated_lines = run_once(True)
    _, plain_out, plain_lines = run_once(False)
    assert gated_out == plain_out and "m: " in gated_out
    assert gated_lines == plain_lines and gated_lines
    expected = (3, 0) if interval == "3ba" else (0, 1)
    for plugin in (console, text):
        assert hook_period(plugin, "batch_end", plugin.batch_end) == expected[0]
        assert hook_period(plugin, "epoch_end", plugin.epoch_end) == expected[1]
