"""Profiler schedules: which batches a :class:`~obsbus.profiler.Profiler` records.

A schedule is any callable ``state -> ProfilerAction``. The profiler calls it
once before each training batch (at ``before_dataloader``, where
``state.timestamp`` counts the batches already done, so
``timestamp.batch_in_epoch`` is the 0-based index of the batch about to run)
and records that batch according to the action returned. Two are built in:

- :func:`cyclic_schedule`: Composer's cyclic window, counted within each epoch.
- :func:`step_window_schedule`: one window of global steps on selected ranks,
  as Megatron and Primus configure it (``profile_step_start``,
  ``profile_step_end``, ``profile_ranks``).

Both return small picklable objects with a readable ``repr``; both check their
arguments when they are built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias

from obsbus._check import check_int, is_int
from obsbus.profiler.profiler_action import ProfilerAction

if TYPE_CHECKING:
    from obsbus.state import State

__all__ = ["Schedule", "cyclic_schedule", "step_window_schedule"]

Schedule: TypeAlias = Callable[["State"], ProfilerAction]
"""A profiler schedule: called with the run's state before each batch."""

_SKIP = ProfilerAction.SKIP
_WARMUP = ProfilerAction.WARMUP
_ACTIVE = ProfilerAction.ACTIVE
_ACTIVE_AND_SAVE = ProfilerAction.ACTIVE_AND_SAVE


class _CyclicSchedule:
    """The callable :func:`cyclic_schedule` returns (a class, so it pickles and reprs)."""

    __slots__ = (
        "_cycle_len",
        "_last_batch",
        "_resume_epoch",
        "_resume_offset",
        "active",
        "repeat",
        "skip_first",
        "wait",
        "warmup",
    )

    def __init__(self, skip_first: int, wait: int, warmup: int, active: int, repeat: int) -> None:
        self.skip_first = skip_first
        self.wait = wait
        self.warmup = warmup
        self.active = active
        self.repeat = repeat
        self._cycle_len = wait + warmup + active
        self._last_batch: int | None = None  # timestamp.batch at the previous call
        self._resume_epoch = 0
        self._resume_offset = 0

    def __call__(self, state: State) -> ProfilerAction:
        ts = state.timestamp
        batch = int(ts.batch)
        in_epoch = int(ts.batch_in_epoch)
        last = self._last_batch
        if last is None or not last <= batch <= last + 1:
            # The first call, or the count jumped: a run that starts (or resumes
            # from a checkpoint) here. Its first epoch is counted from this batch.
            self._resume_epoch = int(ts.epoch)
            self._resume_offset = in_epoch
        self._last_batch = batch

        position = in_epoch - self.skip_first
        if int(ts.epoch) == self._resume_epoch:
            position -= self._resume_offset
        if position < 0:
            return _SKIP
        cycle, in_cycle = divmod(position, self._cycle_len)
        if self.repeat and cycle >= self.repeat:
            return _SKIP
        if in_cycle < self.wait:
            return _SKIP
        if in_cycle < self.wait + self.warmup:
            return _WARMUP
        if in_cycle == self._cycle_len - 1:
            return _ACTIVE_AND_SAVE
        length = state.dataloader_len
        if length is not None and in_epoch == length.value - 1:
            return _ACTIVE_AND_SAVE
        return _ACTIVE

    def __repr__(self) -> str:
        return (
            f"cyclic_schedule(skip_first={self.skip_first}, wait={self.wait}, "
            f"warmup={self.warmup}, active={self.active}, repeat={self.repeat})"
        )


def cyclic_schedule(
    skip_first: int = 0,
    wait: int = 0,
    warmup: int = 1,
    active: int = 4,
    repeat: int = 1,
) -> Schedule:
    """A schedule that records a cyclic window of batches in every epoch (Composer's).

    Within each epoch, counted by ``state.timestamp.batch_in_epoch``, the
    schedule skips ``skip_first`` batches, then runs cycles of ``wait``
    skipped batches, ``warmup`` warm-up batches and ``active`` recorded
    batches, ``repeat`` cycles per epoch (``0``: until the epoch ends). The
    next epoch starts over. The last active batch of each cycle is
    ``active_and_save``, and so is an active batch that is the last of its
    epoch when ``state.dataloader_len`` is known, so a cycle cut short by the
    epoch's end is still saved. (When the length is unknown, a cut cycle is
    saved by whatever saves next; obsbus does not guess the length.)

    Resuming: the first batch the schedule sees is where the run started. If
    that is mid-epoch (a run resumed from a checkpoint at ``batch_in_epoch``
    ``k``), that epoch's cycles count from batch ``k``, so the resumed run
    skips ``skip_first`` batches and profiles the same window a fresh epoch
    would; later epochs count from 0. (Composer adds ``k`` to every later
    epoch as well, which only delays their windows.) A timestamp that moves
    backwards or skips batches between two calls is taken as a new start too,
    so one schedule may serve runs one after another, but not two runs at once.

    Args:
        skip_first: batches to skip at the start of each epoch.
        wait: batches to skip at the start of each cycle.
        warmup: warm-up batches after ``wait``, in each cycle.
        active: batches to record after the warm-up, in each cycle (at least 1).
        repeat: cycles per epoch; ``0`` repeats them until the epoch ends.

    Returns:
        A schedule to pass to :class:`~obsbus.profiler.Profiler`.

    Raises:
        TypeError: an argument is not an int.
        ValueError: an argument is negative, ``active`` is 0, or the cycle
            (``wait + warmup + active``) is empty.

    Example:
        >>> from obsbus.state import State
        >>> from obsbus.time import Time
        >>> schedule = cyclic_schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=1)
        >>> state = State(run_name="demo")
        >>> state.dataloader_len = Time(7, "ba")
        >>> actions = []
        >>> for _ in range(7):
        ...     actions.append(schedule(state).value)
        ...     state.timestamp = state.timestamp.to_next_batch()
        >>> actions
        ['skip', 'skip', 'warmup', 'active', 'active_and_save', 'skip', 'skip']
        >>> schedule
        cyclic_schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=1)
    """
    func = "cyclic_schedule"
    skip_first = check_int(func, "skip_first", skip_first)
    wait = check_int(func, "wait", wait)
    warmup = check_int(func, "warmup", warmup)
    active = check_int(func, "active", active)
    repeat = check_int(func, "repeat", repeat)
    if wait + warmup + active == 0:
        raise ValueError(
            f"cyclic_schedule has a zero-length cycle: wait={wait}, warmup={warmup}, "
            f"active={active} add up to 0 batches, so there is no cycle to repeat. "
            "Accepted: active >= 1, wait >= 0, warmup >= 0. To fix, pass e.g. active=1."
        )
    if active == 0:
        raise ValueError(
            f"cyclic_schedule(active=0): a cycle of wait={wait}, warmup={warmup} and no active "
            "batch never records or saves a trace. Accepted: active >= 1."
        )
    return _CyclicSchedule(skip_first, wait, warmup, active, repeat)


class _StepWindowSchedule:
    """The callable :func:`step_window_schedule` returns."""

    __slots__ = ("_warmup_start", "end", "ranks", "start", "warmup")

    def __init__(self, start: int, end: int, ranks: frozenset[int] | None, warmup: int) -> None:
        self.start = start
        self.end = end
        self.ranks = ranks
        self.warmup = warmup
        self._warmup_start = start - warmup

    def __call__(self, state: State) -> ProfilerAction:
        ranks = self.ranks
        if ranks is not None and state.rank_info.rank not in ranks:
            return _SKIP
        batch = int(state.timestamp.batch)
        if batch >= self.end:
            return _SKIP
        if batch >= self.start:
            return _ACTIVE_AND_SAVE if batch == self.end - 1 else _ACTIVE
        if batch >= self._warmup_start:
            return _WARMUP
        return _SKIP

    def __repr__(self) -> str:
        ranks = "'all'" if self.ranks is None else repr(sorted(self.ranks))
        return (
            f"step_window_schedule(profile_step_start={self.start}, "
            f"profile_step_end={self.end}, profile_ranks={ranks}, warmup={self.warmup})"
        )


def _check_ranks(profile_ranks: object) -> frozenset[int] | None:
    accepted = "Accepted: None or 'all' (every rank), a rank, or a list of ranks such as [0, 8]."
    if profile_ranks is None or profile_ranks == "all":
        return None
    if is_int(profile_ranks):
        profile_ranks = (profile_ranks,)
    if isinstance(profile_ranks, (str, bytes)) or not isinstance(profile_ranks, Iterable):
        raise TypeError(
            f"step_window_schedule(profile_ranks={profile_ranks!r}): not a rank list. {accepted}"
        )
    ranks = list(profile_ranks)
    bad = [r for r in ranks if not is_int(r) or r < 0]
    if bad:
        raise ValueError(
            f"step_window_schedule(profile_ranks={ranks!r}): {bad!r} are not ranks "
            f"(ints >= 0). {accepted}"
        )
    if not ranks:
        raise ValueError(
            "step_window_schedule(profile_ranks=[]): no rank would be profiled. "
            f"{accepted} To fix, pass 'all' or leave out profile_ranks to profile rank 0."
        )
    return frozenset(ranks)


def step_window_schedule(
    profile_step_start: int = 10,
    profile_step_end: int = 12,
    profile_ranks: Iterable[int] | int | str | None = (0,),
    warmup: int = 1,
) -> Schedule:
    """A schedule that records one window of global steps on selected ranks (Megatron's).

    Steps are batches counted over the whole run: the batch about to run is
    recorded when ``profile_step_start <= state.timestamp.batch <
    profile_step_end``, where ``timestamp.batch`` counts the batches already
    done (0 before the first). That is Megatron's test on its ``iteration``
    counter, which Primus configures: it starts the profiler when
    ``iteration == profile_step_start`` before a step and stops it when
    ``iteration == profile_step_end`` after one. The defaults (10, 12) record
    the 11th and 12th batches, which Megatron's log numbers iterations 11 and
    12. Epochs do not matter, and a resumed run keeps counting from its
    checkpoint, so the window stays where it was.

    The ``warmup`` batches just before the window are ``warmup`` (Megatron's
    ``torch.profiler`` path warms up one step); the window's last batch is
    ``active_and_save``. On a rank not in ``profile_ranks`` every batch is
    ``skip``, decided by one set lookup.

    Args:
        profile_step_start: the first step recorded.
        profile_step_end: the step after the last one recorded (greater than
            ``profile_step_start``).
        profile_ranks: the global ranks that record; ``None`` or ``"all"`` for
            every rank.
        warmup: batches before the window to spend in ``warmup``.

    Returns:
        A schedule to pass to :class:`~obsbus.profiler.Profiler`.

    Raises:
        TypeError: a step or ``warmup`` is not an int, or ``profile_ranks`` is
            not a list of ranks.
        ValueError: a negative value, an empty window, or an empty rank list.

    Example:
        >>> from obsbus.dist import RankInfo
        >>> from obsbus.state import State
        >>> from obsbus.time import Timestamp
        >>> schedule = step_window_schedule(profile_step_start=3, profile_step_end=5)
        >>> state = State(run_name="demo")
        >>> def actions(rank):
        ...     state.rank_info = RankInfo(rank=rank, world_size=2)
        ...     out = []
        ...     for step in range(6):
        ...         state.timestamp = Timestamp(batch=step)
        ...         out.append(schedule(state).value)
        ...     return out
        >>> actions(0)
        ['skip', 'skip', 'warmup', 'active', 'active_and_save', 'skip']
        >>> actions(1)
        ['skip', 'skip', 'skip', 'skip', 'skip', 'skip']
    """
    func = "step_window_schedule"
    start = check_int(func, "profile_step_start", profile_step_start)
    end = check_int(func, "profile_step_end", profile_step_end)
    warmup = check_int(func, "warmup", warmup)
    if end <= start:
        raise ValueError(
            f"step_window_schedule(profile_step_start={start}, profile_step_end={end}): the "
            f"window records steps {start} <= step < {end}, which is empty. Accepted: "
            "profile_step_end > profile_step_start. To fix, pass e.g. "
            f"profile_step_end={start + 1}."
        )
    return _StepWindowSchedule(start, end, _check_ranks(profile_ranks), warmup)
