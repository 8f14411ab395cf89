"""Rows a destination holds on the training thread, and their signal-safe hand-over.

A destination with a background writer (FileLogger, the trackers) appends
one row per ``log_metrics`` call and, when due, hands every held row to its
writer in one transfer (:func:`~obsbus.values.rows_to_host_async`). A signal
can raise into the training thread between any two bytecodes: SIGINT's
``KeyboardInterrupt``, or the ``TrainingTerminated`` obsbus raises for
SIGTERM. The hand-over is written so that such an exception never loses a
row:

- the held list is replaced only *after* its rows were queued, so a row is
  always either still held or already queued, and the ``exception`` path's
  hand-over takes whatever is still held;
- if the exception lands after the rows were queued but before the list was
  replaced, that hand-over queues the same list again; the writer remembers
  how many rows of each list it wrote (:attr:`HeldRows.written`) and writes
  every row once.

Any thread may log (a data-loader thread, a user's monitoring thread, an
async eval): :class:`RowHolder` appends under a lock, and a hand-over keeps
the rows another thread appended while it ran (they go to the next list), so
no row is appended to a list that was already handed over and then dropped.
The training thread pays one uncontended lock a ``log_metrics`` call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from obsbus.values import HostRows, rows_to_host_async

__all__ = ["MAX_HELD_ROWS", "Backpressure", "Handed", "HeldRows", "RowHolder"]

#: Rows held before a hand-over, whatever the write period says: it bounds the memory a run
#: that never reaches a batch boundary (a long eval, a loop without ``run.train``) holds.
MAX_HELD_ROWS = 1024


class HeldRows(list[Any]):
    """A destination's held rows (each a tuple whose last item is the metrics dict).

    A plain ``list`` to the training thread (``append`` costs what it always
    did); :attr:`written` belongs to the writer thread.
    """

    __slots__ = ("written",)

    def __init__(self) -> None:
        super().__init__()
        self.written = 0


class Handed:
    """Rows queued for a writer: the held list, how many of its rows, and their numbers."""

    __slots__ = ("count", "pending", "rows")

    def __init__(self, rows: HeldRows, count: int, pending: HostRows) -> None:
        self.rows = rows
        self.count = count
        self.pending = pending

    def claim(self) -> list[tuple[Any, dict[str, Any]]]:
        """On the writer: ``(row, numbers)`` for the rows not written yet, marked written.

        The rows are marked before they are written, so a write that fails
        (disk full) is reported once rather than repeated.
        """
        rows, start = self.rows, self.rows.written
        if start >= self.count:
            return []  # queued twice by an interrupted hand-over: written already
        rows.written = self.count
        numbers = self.pending.result()
        return list(zip(rows[start : self.count], numbers[start:], strict=True))


class RowHolder:
    """A destination's held rows, safe to add to from any thread.

    :meth:`add` appends under a lock; :meth:`hand_over` queues what is held
    and starts a new list, keeping the rows other threads added meanwhile.
    Hand-overs run one at a time. To the tests and the destination it reads
    like the list it replaces (``len``, ``bool``, iteration over a snapshot).
    """

    __slots__ = ("_handing", "_lock", "rows")

    def __init__(self) -> None:
        self.rows = HeldRows()
        self._lock = threading.Lock()  # the list: appends and the swap
        self._handing = threading.Lock()  # one hand-over at a time

    def __len__(self) -> int:
        return len(self.rows)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows[:])

    def add(self, row: Any) -> int:
        """Hold ``row`` (a tuple whose last item is the metrics dict); how many are held now."""
        with self._lock:
            rows = self.rows
            rows.append(row)
            held = len(rows)
        return held

    def hand_over(self, submit: Callable[[Handed], object]) -> int:
        """Queue every held row with ``submit`` (one transfer for all values); how many.

        Signal-safe (see the module): the list is replaced only after ``submit``
        returned, and a list queued twice is written once.
        """
        with self._handing:
            with self._lock:
                rows = self.rows
                count = len(rows)
                values = []
                # A plain loop, not a list comprehension: CPython 3.11 crashed (SIGSEGV) when a
                # signal's exception was raised at the start of the comprehension's own frame
                # (tests/loggers/test_hand_over_interrupt.py raises one at every line, CI
                # 2026-12-03).
                for row in rows:
                    values.append(row[-1])
            if count:
                submit(Handed(rows, count, rows_to_host_async(values)))
                with self._lock:
                    fresh = HeldRows()
                    fresh.extend(rows[count:])  # added by other threads since the count
                    self.rows = fresh
        return count


class Backpressure:
    """Keeps at most about two caps of one destination's rows in its writer's queue.

    A writer's queue is bounded in calls, not rows: a loop that logs faster
    than the writer writes (calls in a tight loop, hand-overs of a thousand
    rows at every ``flush_interval``) could fill it with a million rows.
    The destination reports each hand-over's rows with :meth:`handed`; once
    :data:`MAX_HELD_ROWS` rows have gone since the last marker, it queues a
    marker and waits for the previous one. A loop that outruns its writer
    then runs at the writer's pace, with one cap of rows being written while
    the next is queued; one that doesn't never waits (the previous marker
    was reached long ago).
    """

    __slots__ = ("_previous", "_rows")

    def __init__(self) -> None:
        self._previous: threading.Event | None = None
        self._rows = 0

    def handed(
        self, rows: int, queue: Callable[[Callable[[], None]], object], timeout: float
    ) -> bool:
        """Count ``rows`` just queued; at every :data:`MAX_HELD_ROWS` rows, :meth:`wait`.

        ``False`` when that wait timed out (a stuck writer).
        """
        self._rows += rows
        if self._rows < MAX_HELD_ROWS:
            return True
        self._rows = 0
        return self.wait(queue, timeout)

    def wait(self, queue: Callable[[Callable[[], None]], object], timeout: float) -> bool:
        """Queue a marker with ``queue(fn)``; wait at most ``timeout`` for the previous one.

        ``queue`` returns ``False`` when the marker found no room: the
        previous marker is then kept, so the next wait is for a marker that
        was queued. ``False`` when the previous marker was not reached in
        time (a stuck writer).
        """
        marker = threading.Event()
        previous = self._previous
        if queue(marker.set) is not False:
            self._previous = marker
        return previous is None or previous.wait(timeout)
