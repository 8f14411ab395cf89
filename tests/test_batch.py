from __future__ import annotations

import pytest
import torch

from obsbus import Run
from obsbus._batch import default_num_samples, default_num_tokens, split_batch, to_device


def test_batches_already_on_the_device_are_not_copied():
    x, y = torch.randn(4, 2), torch.randn(4, 1)
    seen = []
    with Run(max_duration="1ba", device="cpu") as run:
        for batch in run.train([(x, y)]):
            seen.append(batch)
    assert seen[0][0] is x and seen[0][1] is y


def test_to_device_rebuilds_containers():
    batch = {"a": torch.zeros(2, dtype=torch.float64), "b": [torch.ones(2)], "c": "text"}
    out = to_device(batch, torch.device("cpu"))
    assert out["a"] is batch["a"] and out["b"][0] is batch["b"][0] and out["c"] == "text"


@pytest.mark.parametrize(
    ("batch", "samples", "tokens"),
    [((torch.zeros(5, 3), torch.zeros(5)), 5, 0),
     ({"input_ids": torch.zeros(3, 7, dtype=torch.long)}, 3, 21),
     ([1, 2, 3], 3, 0),
     (torch.zeros(9), 9, 0)],
    ids=["tuple", "dict-tokens", "list", "tensor"],
)
def test_counting(batch, samples, tokens):
    assert default_num_samples(batch) == samples
    assert default_num_tokens(batch) == tokens


def test_uncountable_batch_says_how_to_fix():
    with pytest.raises(TypeError, match="num_samples_fn=lambda batch"):
        default_num_samples(object())


def test_split_batch_into_microbatches():
    batch = (torch.arange(6), {"m": torch.arange(6) * 2})
    parts = split_batch(batch, 3)
    assert [p[0].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert parts[2][1]["m"].tolist() == [8, 10]
    with pytest.raises(TypeError, match="Cannot split a batch of type object"):
        split_batch(object(), 2)


class _Tensorish(torch.Tensor):
    """A tensor subclass: Run's inline count takes exact tensors only, the rest go through
    the counters."""


@pytest.mark.parametrize(
    "batch",
    [
        (torch.zeros(5, 3), torch.zeros(5)),
        [torch.zeros(4, 2), torch.zeros(4)],
        (torch.zeros(()), torch.zeros(3)),  # a 0-dim first tensor: not counted inline
        (torch.zeros(6, 1).as_subclass(_Tensorish), torch.zeros(6)),
        ({"input_ids": torch.zeros(3, 7, dtype=torch.long)}),
        [1, 2, 3],
        (),
    ],
    ids=["tuple", "list", "0-dim-first", "subclass", "dict", "ints", "empty"],
)
def test_run_counts_every_batch_as_the_default_counters_do(batch):
    """Run counts the common batch inline (its hot path); the count must be the counters'."""
    if isinstance(batch, tuple) and not batch:  # uncountable: the counters' error
        with pytest.raises(TypeError, match="num_samples_fn"), Run(max_duration="1ba") as run:
            for _ in run.train([batch]):
                pass
        return
    expected = (default_num_samples(batch), default_num_tokens(batch))
    with Run(max_duration="2ba") as run:
        for _ in run.train([batch, batch]):
            assert (run.state.batch_num_samples, run.state.batch_num_tokens) == expected
            assert run.state.batch is batch and run.state.batch_num_flops is None
    assert run.state.timestamp.sample == 2 * expected[0]
    assert run.state.timestamp.token == 2 * expected[1]


def test_run_uses_the_given_counters_and_device_over_the_inline_count():
    batch = (torch.zeros(5, 3), torch.zeros(5))
    with Run(max_duration="1ba", num_samples_fn=lambda b: 7, num_tokens_fn=lambda b: 11) as run:
        for _ in run.train([batch]):
            assert (run.state.batch_num_samples, run.state.batch_num_tokens) == (7, 11)
    with Run(max_duration="1ba", device="cpu") as run:  # already there: kept as it is
        for got in run.train([batch]):
            assert got[0] is batch[0] and got[1] is batch[1]
            assert run.state.batch_num_samples == 5


def test_run_moves_a_batch_that_is_not_all_on_the_device(monkeypatch):
    """The inline count keeps a batch only when every item is a tensor on the device;
    anything else goes through to_device."""
    import obsbus.run as run_module

    moved = []
    real = run_module.to_device

    def spy(batch, device):
        moved.append(batch)
        return real(batch, device)

    monkeypatch.setattr(run_module, "to_device", spy)
    on_device = (torch.zeros(5, 3), torch.zeros(5))
    mixed = (torch.zeros(5, 3), [1, 2, 3, 4, 5])
    with Run(max_duration="2ba", device="cpu") as run:
        for _ in run.train([on_device, mixed]):
            assert run.state.batch_num_samples == 5
    assert moved == [mixed]
