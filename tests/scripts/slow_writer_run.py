"""A run whose only destination writes slowly through a BackgroundWriter.

Used by tests/test_nothing_lost.py as a subprocess::

    python slow_writer_run.py OUT.jsonl MODE [BATCHES]

MODE is ``raise`` (a callback raises RuntimeError at the end of batch 30),
``sigterm`` (each batch sleeps a little so the parent can send SIGTERM
mid-run) or ``complete`` (a short run that ends normally).

stdout protocol, one line each, flushed as written:

- ``logged <step>`` right after ``run.log_metrics`` returned for that step;
- ``pending <n>`` from the destination's ``exception`` hook, before it flushes:
  the writes still queued when the run was stopped;
- ``handler restored <True|False>`` once the run is over: whether the SIGTERM
  handler installed before the run is back.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from obsbus import BackgroundWriter, Callback, LoggerDestination, Run

WRITE_DELAY_S = 0.02
RAISE_AT_BATCH = 30


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class JsonlDestination(LoggerDestination):
    """Appends ``{"step": ..., "values": ...}`` lines to a file, off the training thread."""

    name = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.writer = BackgroundWriter(self.name)

    def _write(self, step, values) -> None:
        time.sleep(WRITE_DELAY_S)  # slow I/O
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, "values": values}) + "\n")
            f.flush()

    def log_metrics(self, metrics, step=None) -> None:
        self.writer.submit(self._write, step, {k: float(v) for k, v in metrics.items()})

    def exception(self, state, logger) -> None:
        say(f"pending {self.writer.pending}")
        self.writer.flush()

    def fit_end(self, state, logger) -> None:
        self.writer.flush()

    def close(self, state, logger) -> None:
        self.writer.close()


class RaiseAt(Callback):
    def __init__(self, batch: int) -> None:
        self.batch = batch

    def batch_end(self, state, logger) -> None:
        if state.timestamp.batch.value == self.batch:
            raise RuntimeError(f"boom at batch {self.batch}")


def _previous_handler(signum, frame) -> None:  # pragma: no cover - only a sentinel
    raise SystemExit(99)


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    batches = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    # A recognizable handler, so the script can tell whether the run restored it.
    signal.signal(signal.SIGTERM, _previous_handler)
    callbacks = [RaiseAt(RAISE_AT_BATCH)] if mode == "raise" else []
    dest = JsonlDestination(out)
    try:
        with Run(
            max_duration=f"{batches}ba",
            loggers=[dest],
            callbacks=callbacks,
            num_samples_fn=lambda batch: 1,
        ) as run:
            for step, _ in enumerate(run.train(range(batches))):
                run.log_metrics({"metric": step * 0.5}, step=step)
                say(f"logged {step}")
                if mode == "sigterm":
                    time.sleep(0.005)
    finally:
        say(f"handler restored {signal.getsignal(signal.SIGTERM) is _previous_handler}")


if __name__ == "__main__":
    main()
