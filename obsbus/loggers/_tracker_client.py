"""What a tracker destination needs from a tracker: the client protocol.

:class:`~obsbus.loggers._tracker.TrackerDestination` owns every logging
method and the whole policy (holding values, hand-overs, the writer thread,
drop accounting, close deadlines). A tracker brings a :class:`TrackerClient`:
a handful of calls into its library, each made on the destination's writer
thread, one at a time, already with host numbers. Every method is a no-op
here, so a client implements only what its tracker stores. A sixth tracker
is one module with one client class::

    class PrintClient(TrackerClient):
        def start(self, info: RunInfo) -> None:
            print("start", info.run_name)

        def log_metrics(self, values: dict[str, Any], step: int) -> None:
            print(step, values)

    destination = TrackerDestination(PrintClient(), log_interval="10ba")

Also here: :class:`ClientAttribute`, which shows a client's setting as the
destination's attribute, so a tracker's public class keeps its settings with
its client. The options every tracker shares are in
:mod:`obsbus.loggers._shared_options`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from obsbus.logger import Logger
    from obsbus.loggers._tracker import TrackerDestination
    from obsbus.state import State

__all__ = ["ClientAttribute", "RunInfo", "TrackerClient", "skip_not_a_number"]

log = logging.getLogger("obsbus")


def _no_report(what: str, exc: BaseException) -> None:
    """Where a client's own background errors go when no destination said."""


def _no_skip(key: object, reason: str) -> None:
    """Where a client's skipped values go when no destination said."""


@dataclass(frozen=True)
class RunInfo:
    """What a tracker client needs to start, copied from the state at ``init``."""

    run_name: str
    project: str
    rank: int
    world_size: int
    run_folder: Path
    start_step: int
    #: Every rank logs, each to a run of its own (``rank_zero_only=False``).
    every_rank: bool = False
    #: Reports an error a client hits on a thread of its own (a timer), as the writer's are.
    report: Callable[[str, BaseException], None] = _no_report


class TrackerClient:
    """The calls a tracker destination makes into one tracker's library.

    All but :meth:`prepare`, :meth:`check_credentials` and
    :meth:`can_upload_files` run on the destination's writer thread, after
    :meth:`start` and before :meth:`finish`, and only on the rank that logs. What they raise is
    reported (once per kind) and counted by the destination; training goes on.
    """

    #: How a 3-D image is read when ``log_images`` is not told ``channels_last``
    #: (``None``: guessed from the shape), and whether images come as ``uint8``.
    channels_last: bool | None = None
    uint8_images: bool = False
    #: Metric keys the tracker uses for columns of its own (W&B's ``_step``): a metric of
    #: one of these names reaches :meth:`log_metrics` as ``metric:<name>``, warned once.
    reserved_keys: frozenset[str] = frozenset()
    #: ``skip(key, reason)`` counts a value the client could not write, by key (warned once
    #: per key, listed at close, in ``run-status-rank*.json`` and the report's Failures);
    #: the destination sets it at ``init``.
    skip: Callable[[object, str], None] = staticmethod(_no_skip)

    # ------------------------------------------------------- training thread
    def prepare(self, state: State, logger: Logger) -> None:
        """At ``init``, on every rank: resolve and check folders (raise on a bad one)."""

    def check_credentials(self) -> None:
        """At ``init``, on the rank that logs: warn (never print a token) about missing ones."""

    def can_upload_files(self) -> bool:
        """Whether :meth:`upload_file` stores files (``git_metadata.json`` goes that way too)."""
        return False

    # --------------------------------------------------------- writer thread
    def start(self, info: RunInfo) -> None:
        """Start the tracker's run."""

    def log_metrics(self, values: dict[str, Any], step: int) -> None:
        """Write the values (host numbers, or what was logged that is not a number) at ``step``."""

    def metrics_done(self) -> None:
        """All rows of one hand-over were given to :meth:`log_metrics` (a batching client sends)."""

    def log_params(self, params: dict[str, Any]) -> None:
        """Write flat hyperparameters (and the environment, ``env__NAME``)."""

    def set_tags(self, tags: dict[str, str]) -> None:
        """Write run tags (git: ``git.commit``, ``git.branch``, ``git.dirty``)."""

    def log_table(self, columns: list[str], rows: list[list[Any]], name: str, step: int) -> None:
        """Write a table (its cells are host values)."""

    def log_images(self, images: list[Any], name: str, step: int) -> None:
        """Write images: numpy arrays, each ``HW`` or ``HWC`` (:mod:`obsbus.loggers._images`)."""

    def log_traces(self, traces: dict[str, Any], step: int) -> None:
        """Write traces (which algorithm or branch ran). Not overridden: not sent at all."""

    def upload_file(self, remote_file_name: str, file_path: Path) -> None:
        """Store a file with the run (only called when :meth:`can_upload_files`)."""

    def flush(self) -> None:
        """Push what the library buffers, at fit end and on ``exception``. Not overridden:
        never queued."""

    def finish(self, failed: bool, exception: BaseException | None) -> None:
        """End the run; ``failed`` when the run ended with an exception (``exception``, when
        the state holds it)."""


class ClientAttribute:
    """A tracker's attribute that is its client's: the settings live with the client.

    Example:
        >>> from obsbus.loggers._tracker import TrackerDestination
        >>> class Demo(TrackerDestination):
        ...     project = ClientAttribute()
        >>> client = TrackerClient()
        >>> client.project = "p"
        >>> Demo(client).project
        'p'
    """

    def __init__(self, name: str = "") -> None:
        self.attr = name

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = self.attr or name

    def __get__(self, obj: TrackerDestination | None, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj.client, self.attr)

    def __set__(self, obj: TrackerDestination, value: Any) -> None:
        setattr(obj.client, self.attr, value)


def skip_not_a_number(
    skip: Callable[[object, str], None], who: str, key: str, value: object
) -> None:
    """Count ``key``'s value as skipped by a client that stores numbers only.

    ``who`` is the tracker and its verb, e.g. ``"TensorboardLogger writes"``;
    ``skip`` is the client's :attr:`TrackerClient.skip` (warned once per key).
    """
    skip(key, f"{who} numbers only, and this value is a {type(value).__name__}")
