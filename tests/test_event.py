"""The Event enum and its agreement with the Callback hooks."""

from __future__ import annotations

import inspect

import pytest

from obsbus import Callback, Event

NON_HOOKS = {"run_event", "close", "post_close", "state_dict", "load_state_dict", "metric_units"}

DESIGN_ORDER = """init before_load after_load fit_start iteration_start epoch_start
before_dataloader after_dataloader batch_start before_train_batch before_forward after_forward
before_loss after_loss before_backward after_backward after_train_batch batch_end
batch_checkpoint epoch_end epoch_checkpoint iteration_end iteration_checkpoint fit_end
eval_before_all eval_start eval_batch_start eval_before_forward eval_after_forward eval_batch_end
eval_end eval_after_all eval_standalone_start eval_standalone_end predict_start
predict_batch_start predict_before_forward predict_after_forward predict_batch_end predict_end
exception""".split()


def test_callback_hooks_equal_event_values():
    hooks = {
        name
        for name, member in inspect.getmembers(Callback, inspect.isfunction)
        if not name.startswith("_") and name not in NON_HOOKS
    }
    assert hooks == {e.value for e in Event}


def test_events_follow_design_order():
    assert [e.value for e in Event] == DESIGN_ORDER
    assert len(Event) == 41


@pytest.mark.parametrize("event", list(Event), ids=lambda e: e.value)
def test_hooks_share_one_signature(event):
    params = list(inspect.signature(getattr(Callback, event.value)).parameters)
    assert params == ["self", "state", "logger"]


@pytest.mark.parametrize(
    ("event", "before", "after", "canonical"),
    [
        (Event.BEFORE_FORWARD, True, False, "forward"),
        (Event.AFTER_FORWARD, False, True, "forward"),
        (Event.EVAL_BEFORE_FORWARD, True, False, "eval_forward"),
        (Event.EVAL_START, True, False, "eval"),
        (Event.EVAL_END, False, True, "eval"),
        (Event.PREDICT_BATCH_END, False, True, "predict_batch"),
        (Event.BATCH_CHECKPOINT, False, False, "batch_checkpoint"),
        (Event.INIT, False, False, "init"),
        (Event.EXCEPTION, False, False, "exception"),
    ],
    ids=lambda v: v.value if isinstance(v, Event) else None,
)
def test_pairs(event, before, after, canonical):
    assert event.is_before_event is before
    assert event.is_after_event is after
    assert event.canonical_name == canonical


def test_every_before_event_has_a_matching_after_event():
    befores = [e for e in Event if e.is_before_event]
    afters = {e.canonical_name for e in Event if e.is_after_event}
    assert befores
    for event in befores:
        assert event.canonical_name in afters, event


def test_eval_and_predict_flags():
    assert {e for e in Event if e.is_eval} == {e for e in Event if e.value.startswith("eval_")}
    assert Event.PREDICT_START.is_predict and not Event.PREDICT_START.is_eval
    assert not Event.BATCH_END.is_eval and not Event.BATCH_END.is_predict


def test_event_is_a_str():
    assert Event("batch_end") is Event.BATCH_END
    assert Event.BATCH_END == "batch_end"
