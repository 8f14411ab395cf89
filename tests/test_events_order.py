"""Every event fires the exact number of times, in order, under Trainer and Run."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Event, Run, Trainer

from .helpers import EventCounter, regression_data, tiny_model

BATCHES, EPOCHS, EVAL_BATCHES, MICRO = 4, 2, 2, 2


def expected_fit_counts() -> Counter:
    b, e, eb, m = BATCHES, EPOCHS, EVAL_BATCHES, MICRO
    per_micro = [Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS,
                 Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD]
    per_batch = [Event.AFTER_DATALOADER, Event.BATCH_START, Event.BEFORE_TRAIN_BATCH,
                 Event.AFTER_TRAIN_BATCH, Event.BATCH_END, Event.BATCH_CHECKPOINT]
    per_eval = [Event.EVAL_BATCH_START, Event.EVAL_BEFORE_FORWARD, Event.EVAL_AFTER_FORWARD,
                Event.EVAL_BATCH_END]
    counts = Counter({Event.INIT: 1, Event.BEFORE_LOAD: 1, Event.AFTER_LOAD: 1, Event.FIT_START: 1,
                      Event.ITERATION_START: 1, Event.FIT_END: 1})  # no iteration_end: Composer's
    counts.update({ev: e for ev in (Event.EPOCH_START, Event.EPOCH_END, Event.EPOCH_CHECKPOINT)})
    counts[Event.BEFORE_DATALOADER] = e * (b + 1)  # the last call finds the epoch exhausted
    counts.update({ev: e * b for ev in per_batch})
    counts.update({ev: e * b * m for ev in per_micro})
    counts.update({ev: e for ev in (Event.EVAL_BEFORE_ALL, Event.EVAL_START, Event.EVAL_END,
                                    Event.EVAL_AFTER_ALL)})
    counts.update({ev: e * eb for ev in per_eval})
    return counts


def assert_counts(counter: EventCounter, expected: Counter) -> None:
    actual = {e: counter.counts[e] for e in Event}
    assert actual == {e: expected[e] for e in Event}


def assert_pairs_nest(order):
    """Every before/start event is closed by its after/end event before its parent closes.

    The documented exceptions: the ``before_dataloader`` that finds the epoch
    exhausted has no ``after_dataloader``, and ``iteration_start`` has no
    ``iteration_end`` (as in Composer without an iteration length).
    """
    stack = []
    for event in order:
        if event is Event.ITERATION_START:
            continue
        if event.is_before_event:
            stack.append(event.canonical_name)
        elif event.is_after_event:
            if stack[-1] == "dataloader" and event is Event.EPOCH_END:
                stack.pop()
            assert stack and stack[-1] == event.canonical_name, (event, stack)
            stack.pop()
    assert stack == []


def make_trainer(counter, **kwargs):
    data = regression_data(BATCHES)
    return Trainer(tiny_model(), data, f"{EPOCHS}ep", loss_fn=F.mse_loss,
                   eval_dataloader=regression_data(EVAL_BATCHES, seed=1), callbacks=[counter],
                   device="cpu", grad_accum=MICRO, **kwargs)


def test_trainer_fit_fires_every_event_the_documented_number_of_times():
    counter = EventCounter()
    with make_trainer(counter) as trainer:
        trainer.fit()
    assert_counts(counter, expected_fit_counts())
    assert_pairs_nest(counter.order)
    assert counter.order[:5] == [Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD, Event.FIT_START,
                                 Event.ITERATION_START]
    assert counter.order[-2:] == [Event.EPOCH_CHECKPOINT, Event.FIT_END]
    # eval in fit runs after epoch_end and before epoch_checkpoint
    i = counter.order.index(Event.EPOCH_END)
    assert counter.order[i + 1] == Event.EVAL_BEFORE_ALL
    assert counter.order[counter.order.index(Event.EVAL_AFTER_ALL) + 1] == Event.EPOCH_CHECKPOINT
    assert trainer.state.timestamp.batch == BATCHES * EPOCHS
    assert trainer.state.timestamp.sample == BATCHES * EPOCHS * 8
    assert trainer.state.timestamp.epoch == EPOCHS


def test_standalone_eval_and_predict_events():
    counter = EventCounter()
    with make_trainer(counter) as trainer:
        metrics = trainer.eval()
        outputs = trainer.predict(regression_data(3))
    c = counter.counts
    assert c[Event.EVAL_STANDALONE_START] == c[Event.EVAL_STANDALONE_END] == 1
    assert c[Event.EVAL_BEFORE_ALL] == 0
    assert c[Event.EVAL_START] == c[Event.EVAL_END] == 1
    assert c[Event.EVAL_BATCH_START] == c[Event.EVAL_BEFORE_FORWARD] == EVAL_BATCHES
    assert c[Event.PREDICT_START] == c[Event.PREDICT_END] == 1
    assert c[Event.PREDICT_BATCH_START] == c[Event.PREDICT_BEFORE_FORWARD] == 3
    assert c[Event.PREDICT_AFTER_FORWARD] == c[Event.PREDICT_BATCH_END] == 3
    assert c[Event.FIT_START] == 0 and c[Event.BEFORE_FORWARD] == 0
    assert set(metrics) == {"eval"} and float(metrics["eval"]["loss"]) > 0
    assert len(outputs) == 3 and outputs[0].shape == (8, 1)
    assert_pairs_nest(counter.order)


def test_run_driven_loop_fires_the_same_events_as_trainer():
    counter = EventCounter()
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data, eval_data = regression_data(BATCHES), regression_data(EVAL_BATCHES, seed=1)

    def evaluate(run):
        with torch.no_grad():
            for x, y in run.eval(eval_data):
                run.loss(F.mse_loss, run.forward(model, x), y)

    with Run(model=model, optimizers=opt, max_duration=f"{EPOCHS}ep", callbacks=[counter],
             eval_interval="1ep", eval_fn=evaluate) as run:
        for x, y in run.train(data):
            opt.zero_grad()
            for xm, ym in zip(x.chunk(MICRO), y.chunk(MICRO), strict=True):
                out = run.forward(model, xm)
                loss = run.loss(F.mse_loss, out, ym, weight=1 / MICRO)
                run.backward(loss / MICRO)
            opt.step()
    assert_counts(counter, expected_fit_counts())
    assert_pairs_nest(counter.order)


def test_trainer_and_run_orders_are_identical():
    trainer_counter, run_counter = EventCounter(), EventCounter()
    with make_trainer(trainer_counter) as trainer:
        trainer.fit()
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    eval_data = regression_data(EVAL_BATCHES, seed=1)

    def evaluate(run):
        for x, y in run.eval(eval_data):
            run.loss(F.mse_loss, run.forward(model, x), y)

    with Run(model=model, optimizers=opt, max_duration=f"{EPOCHS}ep", callbacks=[run_counter],
             eval_interval="1ep", eval_fn=evaluate) as run:
        for x, y in run.train(regression_data(BATCHES)):
            for xm, ym in zip(x.chunk(MICRO), y.chunk(MICRO), strict=True):
                run.backward(run.loss(F.mse_loss, run.forward(model, xm), ym))
    assert run_counter.order == trainer_counter.order


def test_max_duration_in_batches_cuts_the_epoch_without_epoch_end():
    counter = EventCounter()
    with Trainer(tiny_model(), regression_data(4), "6ba", loss_fn=F.mse_loss, callbacks=[counter],
                 device="cpu") as trainer:
        trainer.fit()
    assert counter.counts[Event.BATCH_END] == 6
    assert counter.counts[Event.EPOCH_START] == 2
    assert counter.counts[Event.EPOCH_END] == 1  # the second epoch was cut at batch 2 of 4
    assert counter.counts[Event.FIT_END] == 1
    assert trainer.state.timestamp.epoch == 1


def test_stop_training_from_a_callback_ends_after_the_current_batch():
    class StopAt3(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch >= "3ba":
                state.stop_training()

    counter = EventCounter()
    with Trainer(tiny_model(), regression_data(4), "5ep", loss_fn=F.mse_loss,
                 callbacks=[StopAt3(), counter], device="cpu") as trainer:
        trainer.fit()
    assert counter.counts[Event.BATCH_END] == 3
    assert counter.counts[Event.BATCH_CHECKPOINT] == 3
    assert counter.counts[Event.FIT_END] == 1


def test_exception_event_fires_and_the_error_reaches_the_caller():
    class Boom(Callback):
        def after_backward(self, state, logger):
            if state.timestamp.batch >= "2ba":
                raise RuntimeError("boom at batch 2")

    counter = EventCounter()
    seen = []

    class Watch(Callback):
        def exception(self, state, logger):
            seen.append(state.exception)

    trainer = Trainer(tiny_model(), regression_data(4), "1ep", loss_fn=F.mse_loss,
                      callbacks=[Boom(), counter, Watch()], device="cpu")
    with pytest.raises(RuntimeError, match="boom at batch 2"):
        trainer.fit()
    trainer.close()
    assert counter.counts[Event.EXCEPTION] == 1
    assert counter.counts[Event.FIT_END] == 0
    assert isinstance(seen[0], RuntimeError)


def test_second_fit_continues_with_a_longer_duration():
    counter = EventCounter()
    with Trainer(tiny_model(), regression_data(4), "1ep", loss_fn=F.mse_loss, callbacks=[counter],
                 device="cpu") as trainer:
        trainer.fit()
        trainer.fit(duration="2ba")
        trainer.fit()  # already done: fit_start/fit_end only
    assert counter.counts[Event.FIT_START] == 3
    assert counter.counts[Event.FIT_END] == 3
    assert counter.counts[Event.BATCH_END] == 6
    assert trainer.state.timestamp.batch == "6ba"


@pytest.mark.parametrize(
    ("max_duration", "batches"),
    [("3ba", 3), ("40sp", 5), ("2ep", 8), (1, 4)],
    ids=["batches", "samples", "epochs", "bare-int-epochs"],
)
def test_max_duration_units(max_duration, batches):
    counter = EventCounter()
    with Trainer(tiny_model(), regression_data(4), max_duration, loss_fn=F.mse_loss,
                 callbacks=[counter], device="cpu") as trainer:
        trainer.fit()
    assert counter.counts[Event.BATCH_END] == batches


def test_tokens_are_counted_with_a_user_function():
    data = [{"input_ids": torch.randint(0, 10, (4, 16)), "y": torch.randn(4, 1)} for _ in range(3)]

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.EmbeddingBag(10, 1)

        def forward(self, batch):
            return self.emb(batch["input_ids"])

        def loss(self, outputs, batch):
            return F.mse_loss(outputs, batch["y"])

    with Trainer(Model(), data, "1ep", device="cpu") as trainer:
        trainer.fit()
    assert trainer.state.timestamp.token == 3 * 4 * 16  # default: input_ids.numel()
    with Trainer(Model(), data, "1ep", device="cpu", num_tokens_fn=lambda b: 10) as trainer:
        trainer.fit()
    assert trainer.state.timestamp.token == 30
    assert trainer.state.timestamp.sample == 12


@pytest.mark.parametrize("where", ["eval", "predict"])
def test_exception_event_fires_outside_fit_too(where):
    class Boom(Callback):
        def eval_after_forward(self, state, logger):
            raise ValueError("bad eval batch")

        def predict_after_forward(self, state, logger):
            raise ValueError("bad predict batch")

    counter = EventCounter()
    trainer = make_trainer(counter)
    trainer.engine.add_callback(Boom())
    with pytest.raises(ValueError, match=f"bad {where} batch"):
        trainer.eval() if where == "eval" else trainer.predict(regression_data(2))
    trainer.close()
    assert counter.counts[Event.EXCEPTION] == 1


def test_exception_inside_fit_eval_fires_the_event_once():
    class Boom(Callback):
        def eval_batch_end(self, state, logger):
            raise ValueError("eval broke")

    counter = EventCounter()
    trainer = make_trainer(counter)
    trainer.engine.add_callback(Boom())
    with pytest.raises(ValueError, match="eval broke"):
        trainer.fit()
    trainer.close()
    assert counter.counts[Event.EXCEPTION] == 1


def test_eval_time_counts_in_total_but_not_in_the_next_batch():
    import time as _time

    seen = []

    class Watch(Callback):
        def batch_end(self, state, logger):
            seen.append((state.timestamp.batch_wct, state.timestamp.total_wct))

    def slow_eval(run):
        _time.sleep(0.3)

    with Run(max_duration="3ba", callbacks=[Watch()], eval_interval="1ba", eval_fn=slow_eval) as run:
        for _ in run.train([[1], [2], [3]]):
            pass
    assert all(batch_wct < 0.2 for batch_wct, _ in seen), seen
    assert seen[-1][1] >= 0.6  # two evals happened before the third batch ended
    assert run.state.timestamp.total_wct >= 0.9


def test_a_second_fit_continues_the_iteration_as_in_composer():
    """Composer fires ``iteration_start`` at the start of an iteration only (its trainer.py
    ``_train_loop``): a second ``fit(duration=...)`` continues the run's one iteration."""
    counter = EventCounter()
    with make_trainer(counter) as trainer:
        trainer.fit()
        trainer.fit(duration="1ep")
    assert counter.counts[Event.FIT_START] == 2 and counter.counts[Event.EPOCH_START] == 3
    assert counter.counts[Event.ITERATION_START] == 1
    assert counter.counts[Event.ITERATION_END] == counter.counts[Event.ITERATION_CHECKPOINT] == 0
