"""What the ported Composer material needs in place of Composer's own test fixtures.

Composer's tests train ``tests.common.SimpleModel`` (a ``ComposerClassifier``) on
``DataLoader(RandomClassificationDataset())``. A mechanical port keeps the module and
turns the ``ComposerModel`` into that module plus ``loss_fn=`` (``ComposerClassifier``'s
loss is a cross entropy over the module's outputs), and replaces the dataset with the
same random batches built in memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

# The Composer tree the tests were ported from (the mirror's HEAD).
COMPOSER_COMMIT = "6405188805a0054b4551ec49e4919c54c971d0e8"

# ComposerClassifier's default loss, with integer targets.
loss_fn = F.cross_entropy


def simple_model(
    num_features: int = 1, num_classes: int = 2, num_hidden: int = 8
) -> torch.nn.Module:
    """``tests.common.models.SimpleModel``'s module (Composer wraps it in a ComposerClassifier)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(num_features, num_hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(num_hidden, num_classes),
        torch.nn.Softmax(dim=-1),
    )


def random_classification_data(
    shape: Sequence[int] = (1, 1, 1),
    size: int = 100,
    num_classes: int = 2,
    batch_size: int = 1,
    seed: int = 0,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``DataLoader(RandomClassificationDataset(shape, size, num_classes), batch_size)`` as a list."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(size, *shape, generator=gen)
    y = torch.randint(0, num_classes, (size,), generator=gen)
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, size, batch_size)]


def tiny_classification_data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The smoke scripts' ``_build_loader()``: four fixed rows, batches of two."""
    features = torch.tensor(
        [[0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    )
    labels = torch.tensor([0, 1, 0, 1])
    return [(features[:2], labels[:2]), (features[2:], labels[2:])]
