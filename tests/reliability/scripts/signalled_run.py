"""Train a tiny model with FileLogger and TensorBoard until a signal stops the run.

Usage::

    signalled_run.py train RUN_FOLDER STEPS
    signalled_run.py forced RUN_FOLDER STEPS SIGNAL N

``train``: the parent sends the signal, at a moment of its choosing.
``forced``: the script sends ``SIGNAL`` (``SIGTERM`` or ``SIGINT``) to itself
from inside the ``N``-th hand-over of held rows (any destination's), after
the rows were moved to the host and before they reach the writer. The
wrapper's ``os.kill`` runs the handler at once, so the exception surfaces
right there, inside the hand-over, as a signal landing at that line would.

stdout protocol, one line each, flushed as written:

- ``started`` once the run is set up;
- ``logged <step>`` at ``batch_end`` (callbacks run before destinations), once
  the step's loss was handed to the destinations: every step printed must be
  on disk after the process ends, whatever signal ended it;
- ``signalled <N>`` (``forced``) just before the script signals itself.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import torch

import obsbus.values
from obsbus import Callback, Run
from obsbus.loggers import FileLogger, TensorboardLogger


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Report(Callback):
    def batch_end(self, state: Any, logger: Any) -> None:
        say(f"logged {state.timestamp.batch.value}")


def signal_inside_hand_over(sig: signal.Signals, n: int) -> None:
    """Wrap ``rows_to_host_async`` wherever obsbus imported it: the ``n``-th call signals."""
    original = obsbus.values.rows_to_host_async
    calls = 0

    def wrapped(rows: Any) -> Any:
        nonlocal calls
        pending = original(rows)
        calls += 1
        if calls == n:
            say(f"signalled {n}")
            os.kill(os.getpid(), sig)  # the handler runs before os.kill returns
        return pending

    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("obsbus") and getattr(module, "rows_to_host_async", None) is original:
            module.rows_to_host_async = wrapped  # type: ignore[attr-defined]


def main() -> None:
    mode, folder, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "forced":
        signal_inside_hand_over(signal.Signals[sys.argv[4]], int(sys.argv[5]))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    # write_period: rows are held for 50 ms (~20 steps) between hand-overs.
    loggers = [FileLogger(write_period=0.05), TensorboardLogger(write_period=0.05)]
    with Run(
        model=model,
        max_duration=f"{steps}ba",
        run_folder=folder,
        loggers=loggers,
        callbacks=[Report()],
    ) as run:
        say("started")
        for _ in run.train([(x, y)] * steps):
            loss = run.loss(torch.nn.functional.mse_loss, run.forward(model, x), y)
            run.backward(loss)
            with torch.no_grad():  # SGD by hand: torch.optim's first use imports dynamo (3 s)
                for p in model.parameters():
                    p -= 0.01 * p.grad
                    p.grad = None
            time.sleep(0.001)


if __name__ == "__main__":
    main()
