"""Callbacks written the Composer way work (issue 14, item 1).

``run_event`` overrides get every event; methods named almost like a hook
warn at construction; ``Logger.upload_file`` reaches every destination that
overrides ``upload_file``.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Engine, Event, Logger, LoggerDestination, ObsbusWarning, Run, State
from obsbus.loggers import InMemoryLogger

from .helpers import EventCounter, regression_data, tiny_model
from .test_events_order import (
    BATCHES,
    EPOCHS,
    EVAL_BATCHES,
    MICRO,
    assert_pairs_nest,
    expected_fit_counts,
    make_trainer,
)


class RunEventCounter(Callback):
    """Composer's second way to write a callback: one ``run_event``, no hook methods."""

    def __init__(self) -> None:
        self.counts: Counter[Event] = Counter()
        self.order: list[Event] = []

    def run_event(self, event, state, logger):
        self.counts[event] += 1
        self.order.append(event)


class RunEventDestination(LoggerDestination):
    def __init__(self, journal) -> None:
        self.journal = journal

    def run_event(self, event, state, logger):
        self.journal.append(("dest", event))


def run_loop(callbacks, loggers=()):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    eval_data = regression_data(EVAL_BATCHES, seed=1)

    def evaluate(run):
        with torch.no_grad():
            for x, y in run.eval(eval_data):
                run.loss(F.mse_loss, run.forward(model, x), y)

    with Run(
        model=model,
        optimizers=opt,
        max_duration=f"{EPOCHS}ep",
        callbacks=callbacks,
        loggers=loggers,
        eval_interval="1ep",
        eval_fn=evaluate,
    ) as run:
        for x, y in run.train(regression_data(BATCHES)):
            opt.zero_grad()
            for xm, ym in zip(x.chunk(MICRO), y.chunk(MICRO), strict=True):
                run.backward(run.loss(F.mse_loss, run.forward(model, xm), ym))
            opt.step()
    return run


# ------------------------------------------------------------------ run_event


#: Where obsbus's counts for this fit differ from Composer's: nowhere. (composer/trainer/trainer.py
#: at commit 6405188: ``_increment_iteration`` fires ``iteration_end`` and ``iteration_checkpoint``
#: only when ``state._iteration_length`` is set and reached; it is unset by default, so a plain
#: fit fires neither, and obsbus, which has no iteration length, fires neither either.)
#: event -> (obsbus's count, Composer's count).
ITERATION_DIFFERENCE: dict[Event, tuple[int, int]] = {}


def composer_fit_counts() -> dict[Event, int]:
    """Composer's count of each event for test_events_order's fit: 2 epochs of 4 batches,
    grad_accum 2, eval of 2 batches after each epoch."""
    counts = {e: expected_fit_counts()[e] for e in Event}
    counts.update({e: composer for e, (_, composer) in ITERATION_DIFFERENCE.items()})
    return counts


def assert_composers_counts(counts: Counter[Event]) -> None:
    differences = {e: (counts[e], n) for e, n in composer_fit_counts().items() if counts[e] != n}
    assert differences == ITERATION_DIFFERENCE  # every other event: Composer's exact count


def test_run_event_override_sees_composers_counts_under_trainer():
    counter, hooks = RunEventCounter(), EventCounter()
    for callback in (counter, hooks):
        with make_trainer(callback) as trainer:
            trainer.fit()
    assert_composers_counts(counter.counts)
    assert_pairs_nest(counter.order)
    assert counter.order == hooks.order


def test_run_event_override_sees_composers_counts_under_run():
    counter, hooks = RunEventCounter(), EventCounter()
    run_loop([counter, hooks])
    assert_composers_counts(counter.counts)
    assert counter.order == hooks.order


def test_run_event_override_reaches_hooks_only_through_super():
    seen = []

    class Filtering(Callback):
        def run_event(self, event, state, logger):
            if event in (Event.FIT_START, Event.BATCH_END):
                super().run_event(event, state, logger)

        def batch_end(self, state, logger):
            seen.append("batch_end")

        def epoch_end(self, state, logger):  # filtered out by run_event: never called
            seen.append("epoch_end")

    with Run(max_duration="1ep", callbacks=[Filtering()]) as run:
        for _ in run.train([[1], [2]]):
            pass
    assert seen == ["batch_end", "batch_end"]  # once each: not also called directly


def test_run_event_plugins_keep_the_engine_order():
    journal = []

    class Hooked(Callback):
        def init(self, state, logger):
            journal.append(("hooked", Event.INIT))

        def batch_end(self, state, logger):
            journal.append(("hooked", Event.BATCH_END))

    class Whole(Callback):
        def run_event(self, event, state, logger):
            journal.append(("whole", event))

    state = State(run_name="t")
    engine = Engine(state, Logger(state, [RunEventDestination(journal)]), [Whole(), Hooked()])
    engine.run_event(Event.INIT)
    engine.run_event(Event.BATCH_END)
    engine.run_event(Event.BEFORE_FORWARD)
    assert journal == [
        ("dest", Event.INIT),
        ("whole", Event.INIT),
        ("hooked", Event.INIT),  # destinations first
        ("whole", Event.BATCH_END),
        ("hooked", Event.BATCH_END),
        ("dest", Event.BATCH_END),
        ("whole", Event.BEFORE_FORWARD),
        ("dest", Event.BEFORE_FORWARD),
    ]


def test_destination_with_run_event_gets_every_event_and_its_logging_calls():
    journal = []
    mem = InMemoryLogger()
    run = run_loop([], [RunEventDestination(journal), mem])
    assert_composers_counts(Counter(event for _, event in journal))
    assert run.engine.closed and "loss/train/total" in mem.most_recent_values


def test_run_event_gets_the_exception_event_and_its_error_is_contained():
    got = []

    class Whole(Callback):
        def run_event(self, event, state, logger):
            got.append(event)
            if event is Event.EXCEPTION:
                raise OSError("flush failed")

    class Boom(Callback):
        def batch_end(self, state, logger):
            raise KeyError("original")

    with (
        pytest.raises(KeyError, match="original"),
        Run(max_duration="2ba", callbacks=[Whole(), Boom()]) as run,
    ):
        for _ in run.train([[1], [2]]):
            pass
    assert got[-1] is Event.EXCEPTION and Event.FIT_END not in got
    assert run.logger.failures.counts["Whole"] == 1


def test_only_run_event_overriders_join_every_event_of_the_table():
    state = State(run_name="t")
    whole, plain = RunEventCounter(), Callback()
    engine = Engine(state, Logger(state), [plain, whole])
    for event in Event:
        cbs, dests, canonical, gate = engine._table[event]
        assert [cb for cb, *_ in cbs] == [whole] and dests == () and canonical is event
        assert gate is None


def test_engine_takes_event_names_as_composer_does():
    state = State(run_name="t")
    counter = RunEventCounter()
    engine = Engine(state, Logger(state), [counter])
    engine.run_event("before_loss")
    assert counter.order == [Event.BEFORE_LOSS] and type(counter.order[0]) is Event
    with pytest.raises(
        ValueError,
        match=r"'on_batch_end' is not an obsbus Event; expected one "
        r"of: init, before_load, .*, exception\.",
    ):
        engine.run_event("on_batch_end")


def test_profiled_engine_runs_run_event_plugins_in_spans_and_takes_event_names():
    from obsbus.profiler import Profiler, ProfilerAction, TraceHandler

    class Names(TraceHandler):
        def __init__(self):
            self.names = set()

        def process_duration_event(self, name, categories, is_start, timestamp, wall_ns):
            self.names.add(name)

    counter, names = RunEventCounter(), Names()
    profiler = Profiler(lambda state: ProfilerAction.ACTIVE, [names])
    with Run(max_duration="1ba", callbacks=[counter], profiler=profiler) as run:
        for _ in run.train([[1]]):
            run.engine.run_event("after_loss")
            with pytest.raises(ValueError, match="'nope' is not an obsbus Event"):
                run.engine.run_event("nope")
    assert counter.counts[Event.BATCH_END] == counter.counts[Event.AFTER_LOSS] == 1
    assert {"callback/RunEventCounter/batch_end", "callback/RunEventCounter/after_loss"} <= (
        names.names
    )


@pytest.mark.parametrize("event", list(Event), ids=str)
def test_engine_without_callbacks_runs_state_callbacks_as_composers(event):
    """Source: Composer's tests/callbacks/test_callbacks.py::test_run_event_callbacks (commit
    6405188): ``dummy_state.callbacks = [callback]; Engine(state=dummy_state, logger=logger)``."""
    state = State(run_name="t")
    counter = EventCounter()
    state.callbacks = [counter]
    engine = Engine(state=state, logger=Logger(state))
    engine.run_event(event)
    assert counter.counts[event] == 1 and sum(counter.counts.values()) == 1


def test_state_callbacks_destinations_get_events_first_at_init_and_are_closed():
    journal = []

    class Dest(LoggerDestination):
        def init(self, state, logger):
            journal.append("dest init")

        def log_metrics(self, metrics, step=None):
            journal.append("dest log_metrics")

        def close(self, state, logger):
            journal.append("dest close")

    class Cb(Callback):
        def init(self, state, logger):
            journal.append("cb init")
            logger.log_metrics({"x": 1.0})

    state = State(run_name="t")
    mem = InMemoryLogger()
    state.callbacks = [Cb(), Dest(), mem]  # as Composer: the logger's destinations listed too
    engine = Engine(state, Logger(state, [mem]))
    engine.run_event(Event.INIT)
    engine.close()
    # Dest is not one of the logger's: events and close, not logging calls (as in Composer)
    assert journal == ["dest init", "cb init", "dest close"]
    assert mem.most_recent_values == {"x": 1.0}
    assert engine.destinations == (mem, state.callbacks[1])


def test_explicit_callbacks_ignore_state_callbacks_and_added_ones_are_listed():
    state = State(run_name="t")
    listed, given, added = EventCounter(), EventCounter(), EventCounter()
    state.callbacks = [listed]
    engine = Engine(state, Logger(state), [given])
    engine.add_callback(added)
    engine.run_event(Event.FIT_START)
    assert [c.counts[Event.FIT_START] for c in (listed, given, added)] == [0, 1, 1]
    assert state.callbacks == [listed, added]


def test_state_callbacks_must_be_a_list():
    state = State(run_name="t")
    state.callbacks = "SpeedMonitor"
    with pytest.raises(
        TypeError, match=r"state\.callbacks must be a list of Callback, got 'SpeedMonitor'"
    ):
        Engine(state, Logger(state))


# ------------------------------------------------------------ near-miss names


def _class_with(name, base=Callback):
    return type("Mine", (base,), {name: lambda self, state, logger: None})


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("on_batch_end", "batch_end"),  # on_ prefix
        ("batch_ends", "batch_end"),  # plural
        ("after_backwards", "after_backward"),  # plural
        ("befor_loss", "before_loss"),  # a letter dropped
        ("fit_strat", "fit_start"),  # two letters swapped
        ("on_train_batch_end", "batch_end"),  # Lightning, Keras
        ("on_validation_batch_end", "eval_batch_end"),  # Lightning
        ("on_train_begin", "fit_start"),  # transformers, Keras
        ("on_step_end", "batch_end"),  # transformers
        ("on_epoch_begin", "epoch_start"),  # transformers, Keras
        ("on_after_backward", "after_backward"),  # Lightning
        ("pre_forward", "before_forward"),
        ("post_backward", "after_backward"),
        ("on_init_end", "init"),  # transformers
        ("on_exception", "exception"),  # Lightning
        ("state_dicts", "state_dict"),
        ("after_batch_end", "batch_end"),  # a prefix too many
        ("before_fit_start", "fit_start"),
    ],
)
def test_a_near_miss_hook_name_warns_at_construction_naming_the_hook(name, meant):
    cls = _class_with(name)
    state = State(run_name="t")
    with pytest.warns(
        ObsbusWarning,
        match=(
            rf"^Mine\.{name} is not an obsbus (hook|method), so nothing ever calls it; did you mean "
            rf"'{meant}'\? To fix, rename it to {meant} \(obsbus hooks are named after the Event "
            r"values, as in Composer: no 'on_' prefix\), or start its name with '_' if it is a "
            r"helper\.$"
        ),
    ):
        Engine(state, Logger(state), [cls()])


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("log_metric", "log_metrics"),
        ("log_hyperparams", "log_hyperparameters"),
        ("upload_files", "upload_file"),
        ("on_fit_end", "fit_end"),
    ],
)
def test_a_destination_near_miss_warns(name, meant):
    cls = _class_with(name, LoggerDestination)
    state = State(run_name="t")
    with pytest.warns(ObsbusWarning, match=rf"Mine\.{name} is not an obsbus .*'{meant}'"):
        Engine(state, Logger(state, [cls()]))


@pytest.mark.parametrize(
    "name",
    [
        "forward",
        "loss",
        "load",
        "backward",
        "dataloader",
        "unit",
        "summary",
        "reset",
        "update",
        "compute",
        "setup",
        "teardown",
        "on_log",
        "on_save",
        "closed",
        "_on_batch_end",
        "_batch_ends",
        "log_metrics_now",
    ],
)
def test_ordinary_helper_names_do_not_warn(name):
    state = State(run_name="t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Engine(state, Logger(state), [_class_with(name)()])


def test_no_warning_when_the_class_also_has_the_hook_or_dispatches_itself():
    class Both(Callback):
        def batch_end(self, state, logger):
            self.batch_ends(state)

        def batch_ends(self, state):  # a helper of the real hook
            pass

    class Dispatches(Callback):  # its run_event calls its own on_* methods
        def run_event(self, event, state, logger):
            getattr(self, f"on_{event.value}", lambda: None)()

        def on_batch_end(self):
            pass

    state = State(run_name="t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Engine(state, Logger(state), [Both(), Dispatches()])


def test_the_warning_comes_before_training_and_points_at_the_users_line():
    class Typo(Callback):
        def __init__(self):
            self.calls = 0

        def on_batch_end(self, state, logger):
            self.calls += 1

    typo = Typo()
    with pytest.warns(
        ObsbusWarning, match=r"Typo\.on_batch_end .* did you mean 'batch_end'"
    ) as got:
        run = Run(max_duration="1ba", callbacks=[typo])
    assert got[0].filename == __file__
    with run:
        for _ in run.train([[1]]):
            pass
    assert typo.calls == 0  # as the warning said: nothing calls it


def test_a_callback_added_later_is_checked_too():
    state = State(run_name="t")
    engine = Engine(state, Logger(state))
    with pytest.warns(ObsbusWarning, match=r"Mine\.on_batch_end"):
        engine.add_callback(_class_with("on_batch_end")())


# ------------------------------------------------------------------ upload_file


class OnlyUploads(LoggerDestination):
    """Overrides ``upload_file`` and nothing else (no ``can_upload_files``), as Composer allows."""

    def __init__(self, journal) -> None:
        self.journal = journal

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        self.journal.append((remote_file_name, file_path.name, overwrite))


def test_upload_file_reaches_a_destination_that_only_overrides_upload_file(tmp_path):
    journal = []
    (tmp_path / "r-rank0.txt").write_text("x")
    logger = Logger(State(run_name="r"), [OnlyUploads(journal), InMemoryLogger()])
    logger.upload_file("{run_name}/a.txt", tmp_path / "a.txt", overwrite=True)
    logger.upload_file("b.txt", str(tmp_path / "{run_name}-rank{rank}.txt"))  # as Composer
    assert journal == [("r/a.txt", "a.txt", True), ("b.txt", "r-rank0.txt", False)]
    assert not logger.has_file_upload_destination()  # Composer's meaning: can_upload_files()


def test_a_path_with_braces_that_exists_is_taken_as_written(tmp_path):
    journal = []
    (tmp_path / "{literal}.txt").write_text("x")
    Logger(State(run_name="r"), [OnlyUploads(journal)]).upload_file(
        "c.txt", tmp_path / "{literal}.txt"
    )
    assert journal == [("c.txt", "{literal}.txt", False)]


def test_files_handed_over_at_close_reach_an_upload_file_only_destination():
    journal = []

    class Writer(LoggerDestination):
        def close(self, state, logger):
            logger.upload_file("final.txt", "final.txt")

    with Run(max_duration="1ba", loggers=[OnlyUploads(journal), Writer()]) as run:
        for _ in run.train([[0]]):
            pass
    assert journal == [("final.txt", "final.txt", False)]


# ------------------------------------------------------------------ log_images


class ComposerImages(LoggerDestination):
    """``log_images`` with Composer's LoggerDestination signature (channels_last third)."""

    def __init__(self, journal) -> None:
        self.journal = journal

    def log_images(
        self,
        images,
        name="Images",
        channels_last=False,
        step=None,
        masks=None,
        mask_class_labels=None,
        use_table=True,
    ):
        self.journal.append(("composer", name, channels_last, step, masks, use_table))


def test_log_images_takes_composers_positional_order_for_both_signatures():
    journal = []
    mem = InMemoryLogger()
    logger = Logger(State(run_name="r"), [ComposerImages(journal), mem])
    image = torch.zeros(3, 4, 4)
    logger.log_images(image, "samples", True, 7, {"pred": image}, {0: "bg"}, False)
    logger.log_images(image, name="default")
    assert journal == [
        ("composer", "samples", True, 7, {"pred": image}, False),
        ("composer", "default", False, 0, None, True),  # Composer's defaults, step 0
    ]
    assert [(n, s) for n, s, _ in mem.images] == [("samples", 7), ("default", 0)]


def test_log_images_step_in_channels_last_place_says_what_to_write():
    logger = Logger(State(run_name="r"), [InMemoryLogger()])
    with pytest.raises(
        TypeError,
        match=r"log_images channels_last must be a bool or None, got 5\. The third argument "
        r"is channels_last, as in Composer; to fix, pass the step as step=5\.",
    ):
        logger.log_images(torch.zeros(3, 4, 4), "samples", 5)


def test_logger_takes_none_or_one_destination_as_composers():
    state = State(run_name="r")
    mem = InMemoryLogger()
    assert Logger(state, None).destinations == ()
    assert Logger(state, mem).destinations == (mem,)
    with pytest.raises(TypeError, match="Logger destinations must be a list of LoggerDestination"):
        Logger(state, "console")


def test_the_trainer_warns_at_construction_too():
    from obsbus import Trainer

    class Typo(Callback):
        def after_backwards(self, state, logger):
            pass

    with pytest.warns(ObsbusWarning, match=r"Typo\.after_backwards .* 'after_backward'") as got:
        trainer = Trainer(
            tiny_model(),
            regression_data(1),
            "1ba",
            loss_fn=F.mse_loss,
            callbacks=Typo(),
            device="cpu",
            progress_bar=False,
        )
    assert got[0].filename == __file__
    trainer.close()
