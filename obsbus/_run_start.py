"""How a run starts: it claims its files first, and writes nothing until every claim holds.

A run whose name is taken is refused (a ``FileExistsError`` that says to pass
``resume=True``), and a refused run writes nothing into the folder of the
run that owns the name: not its run record (``config/``), not a status file,
not a log line. So the decision comes before anything is written:

1. **Claim.** Every plug-in (destinations first, then callbacks and the
   profiler's trace handlers, in the order of ``state.callbacks``) that has
   a ``claim_files(state, logger)`` method is asked, in turn, to take the
   files it will write: it raises if they belong to another run, and may
   create them (only new ones, atomically, as FileLogger's ``open(path,
   "x")``), so that of two runs started at the same instant exactly one
   gets them. If one refuses, the plug-ins that already claimed give their
   files back (``release_files()``: the files they created are removed) and
   the refusal is raised.
2. **Start.** ``init``, ``before_load`` and ``after_load`` run, then the run
   record is written (:func:`obsbus._run_record.write_run_record`) and the
   hyperparameters are logged. If ``init`` raises (a plug-in that can not set
   itself up), the claims are given back too, so trying again with the
   mistake fixed is not refused over empty files of the failed try.

On several ranks each rank claims its own files (``{rank}`` in their names),
then the ranks agree, in one collective at start (none when
``torch.distributed`` is not initialized, or on one process): if any rank
was refused, every rank gives its claims back and is refused too, naming the
rank and its reason. So a run started again on more ranks than the run that
owns the name (whose new ranks find no files of their own) writes nothing
either.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from obsbus._run_record import write_run_record
from obsbus.errors import ObsbusWarning
from obsbus.event import Event
from obsbus.masking import mask_secrets

if TYPE_CHECKING:
    from obsbus.engine import Engine
    from obsbus.logger import Logger
    from obsbus.state import State

__all__ = ["claim_files", "release_files", "start_run"]

_START_EVENTS = (Event.INIT, Event.BEFORE_LOAD, Event.AFTER_LOAD)


def claim_files(plugins: Iterable[object], state: State, logger: Logger) -> list[object]:
    """Ask every plug-in with ``claim_files`` to take its files; returns those that did.

    Raises:
        Whatever a plug-in raises to refuse the run (``FileExistsError`` for
        files of another run), after the plug-ins before it gave theirs back.
    """
    claimed: list[object] = []
    try:
        for plugin in plugins:
            claim = getattr(plugin, "claim_files", None)
            if callable(claim):
                claim(state, logger)
                claimed.append(plugin)
    except BaseException:
        release_files(claimed)
        raise
    return claimed


def release_files(claimed: Iterable[object]) -> None:
    """Give back what ``claimed`` plug-ins took (newest first); a failure is a warning."""
    for plugin in reversed(list(claimed)):
        release = getattr(plugin, "release_files", None)
        if not callable(release):
            continue
        try:
            release()
        except Exception as exc:  # the refusal being raised matters more
            warnings.warn(
                f"obsbus could not give back the files {type(plugin).__name__} claimed for a "
                f"run that did not start: {mask_secrets(f'{type(exc).__name__}: {exc}')}.",
                ObsbusWarning,
                stacklevel=3,
            )


def start_run(state: State, engine: Engine, logger: Logger, profiler: Any = None) -> None:
    """Claim the run's files, fire ``init``/``before_load``/``after_load``, write the record.

    ``state.callbacks`` must list the run's destinations and callbacks (the
    profiler's trace handlers included), as :class:`~obsbus.Run` sets it.
    """
    plugins = list(state.callbacks)
    try:
        claimed = claim_files(plugins, state, logger)
    except Exception as exc:
        _refusals(exc)  # the other ranks must hear of it before this one leaves
        raise
    refused = _refusals(None)
    if refused:
        release_files(claimed)
        rank, reason = refused[0]
        raise FileExistsError(
            f"obsbus: this run was refused on rank {rank}, so on every rank: {reason} "
            "(no rank writes into a folder another rank was refused)."
        )
    try:
        for event in _START_EVENTS:
            engine.run_event(event)
    except BaseException:
        release_files(claimed)
        raise
    write_run_record(state, plugins, profiler=profiler)
    if state.hparams:
        logger.log_hyperparameters(state.hparams)


def _refusals(exc: BaseException | None) -> list[tuple[int, str]]:
    """``(rank, reason)`` of every rank whose claim was refused, this one's ``exc`` too.

    One ``all_gather_object`` when ``torch.distributed`` runs several ranks, else only this
    rank's own answer: called once by every rank at start, refused or not.
    """
    from obsbus import dist

    mine = None if exc is None else mask_secrets(f"{type(exc).__name__}: {exc}")
    answers = dist.all_gather_object(mine) if dist.is_initialized() else [mine]
    return [(rank, reason) for rank, reason in enumerate(answers) if reason is not None]
