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
