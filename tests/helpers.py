"""Small real things tests share: an event-counting callback, tiny data and models."""

from __future__ import annotations

from collections import Counter

import torch

from obsbus import Callback, Event


class EventCounter(Callback):
    """Counts every event and records their order."""

    def __init__(self) -> None:
        self.counts: Counter[Event] = Counter()
        self.order: list[Event] = []


def _make_hook(event: Event):
    def hook(self, state, logger):
        self.counts[event] += 1
        self.order.append(event)

    hook.__name__ = event.value
    return hook


for _event in Event:
    setattr(EventCounter, _event.value, _make_hook(_event))


def regression_data(batches: int = 4, batch_size: int = 8, features: int = 4, seed: int = 0):
    """A list of ``(x, y)`` batches for a linear regression."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(features, 1, generator=gen)
    out = []
    for _ in range(batches):
        x = torch.randn(batch_size, features, generator=gen)
        out.append((x, x @ w + 0.01 * torch.randn(batch_size, 1, generator=gen)))
    return out


def tiny_model(features: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(features, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
