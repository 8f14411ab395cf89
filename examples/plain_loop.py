"""Keep your own PyTorch loop; get obsbus's events, State and destinations.

The loop below is an ordinary training loop. The obsbus lines are marked
``# obsbus``: a ``with Run(...)`` around it, ``run.train(loader)`` instead of
iterating epochs by hand, and ``run.forward``/``run.loss``/``run.backward``
around the three calls every loop has. Any monitor or destination that works
under obsbus's Trainer works here too.

Usage:
    python examples/plain_loop.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from obsbus import Run
from obsbus.loggers import ConsoleLogger, InMemoryLogger


def main() -> InMemoryLogger:
    torch.manual_seed(0)
    x = torch.randn(1024, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.randn(1024, 1)
    train = DataLoader(TensorDataset(x[:896], y[:896]), batch_size=64, shuffle=True)
    val = DataLoader(TensorDataset(x[896:], y[896:]), batch_size=64)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    memory = InMemoryLogger()

    with Run(model=model, optimizers=optimizer, max_duration="3ep",  # obsbus
             loggers=[ConsoleLogger(log_interval="1ep", stream="stdout"), memory]) as run:
        for inputs, targets in run.train(train):  # obsbus: epochs, batches, stop
            optimizer.zero_grad()
            outputs = run.forward(model, inputs)  # obsbus: model(inputs)
            loss = run.loss(F.mse_loss, outputs, targets)  # obsbus: F.mse_loss(outputs, targets)
            run.backward(loss)  # obsbus: loss.backward()
            optimizer.step()
        with torch.no_grad():
            for inputs, targets in run.eval(val):  # obsbus: logs metrics/eval/loss
                run.loss(F.mse_loss, run.forward(model, inputs), targets)
    return memory


if __name__ == "__main__":
    main()
