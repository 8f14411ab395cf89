"""How Run turns microbatch losses into the batch loss, and what it logs for it."""

from __future__ import annotations

import pytest
import torch

from obsbus import Run
from obsbus.loggers import InMemoryLogger


def _one_batch(*microbatch_losses, weights=None):
    """One batch of ``Run``, each microbatch's loss a function of a weight needing grad."""
    mem = InMemoryLogger()
    w = torch.ones((), requires_grad=True)
    with Run(max_duration="1ba", loggers=[mem]) as run:
        for _ in run.train([[0]]):
            for i, make in enumerate(microbatch_losses):
                run.loss(make, w, weight=None if weights is None else weights[i])
    values = {k: v for k, v in mem.most_recent_values.items() if k.startswith("loss/")}
    return run.state.loss, {k: float(v) for k, v in values.items()}


def test_microbatch_losses_are_averaged_or_weighted():
    loss, logged = _one_batch(lambda w: w * 1.0, lambda w: w * 3.0)
    assert logged == {"loss/train/total": 2.0} and loss.grad_fn is None
    _, logged = _one_batch(lambda w: w * 1.0, lambda w: w * 3.0, weights=[0.25, 1.0])
    assert logged == {"loss/train/total": 3.25}


def test_a_dict_loss_is_combined_key_by_key_and_each_key_is_logged():
    loss, logged = _one_batch(
        lambda w: {"ce": w * 1.0, "aux": w * 0.5}, lambda w: {"ce": w * 3.0, "aux": w * 1.5}
    )
    assert logged == {"loss/train/ce": 2.0, "loss/train/aux": 1.0, "loss/train/total": 3.0}
    assert all(t.grad_fn is None for t in loss.values())  # no autograd graph is kept


def test_a_dict_loss_with_a_total_entry_logs_that_total():
    _, logged = _one_batch(lambda w: {"total": w * 4.0, "ce": w * 3.0})
    assert logged == {"loss/train/total": 4.0, "loss/train/ce": 3.0}


def test_a_list_loss_is_combined_element_by_element():
    _, logged = _one_batch(lambda w: [w * 1.0, w * 2.0], lambda w: (w * 3.0, w * 4.0))
    assert logged == {"loss/train/0": 2.0, "loss/train/1": 3.0, "loss/train/total": 5.0}


def test_a_dict_loss_set_by_the_loop_is_detached_before_the_batch_ends():
    w = torch.ones((), requires_grad=True)
    with Run(max_duration="1ba") as run:
        for _ in run.train([[0]]):
            run.state.loss = {"ce": w * 2.0}
    assert run.state.loss["ce"].grad_fn is None


@pytest.mark.parametrize(
    ("second", "match"),
    [
        (lambda w: {"ce": w}, r"same keys; got \['aux', 'ce'\] and \['ce'\]"),
        (lambda w: w, r"same keys; got \['aux', 'ce'\] and tensor"),
    ],
    ids=["missing-key", "not-a-dict"],
)
def test_microbatch_dict_losses_with_different_keys_are_a_clear_error(second, match):
    with pytest.raises(ValueError, match=match):
        _one_batch(lambda w: {"ce": w, "aux": w}, second)


def test_a_tensor_loss_set_by_the_loop_is_detached_and_logged():
    mem = InMemoryLogger()
    w = torch.ones((), requires_grad=True)
    with Run(max_duration="1ba", loggers=[mem]) as run:
        for _ in run.train([[0]]):
            loss = w * 3.0
            loss.backward()
            run.state.loss = loss
    assert run.state.loss.grad_fn is None and not run.state.loss.requires_grad
    assert run.state.loss is not loss and float(run.state.loss) == 3.0
    assert float(mem.most_recent_values["loss/train/total"]) == 3.0
