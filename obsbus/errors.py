"""Exceptions and warnings raised by obsbus.

Every error obsbus raises on purpose derives from :class:`ObsbusError` (or is a
plain ``TypeError``/``ValueError`` for bad arguments), so a caller can tell
obsbus's failures from their model's.
"""

from __future__ import annotations

__all__ = [
    "DestinationError",
    "MissingExtraError",
    "ObsbusError",
    "ObsbusWarning",
    "TrainingTerminated",
]


class ObsbusError(Exception):
    """Base class of the errors obsbus raises."""


class ObsbusWarning(UserWarning):
    """Base class of the warnings obsbus emits."""


class MissingExtraError(ObsbusError, ImportError):
    """An optional backend is not installed.

    Example:
        >>> err = MissingExtraError("tensorboard", "TensorboardLogger")
        >>> str(err).endswith("To fix, run: pip install 'obsbus[tensorboard]'")
        True
    """

    def __init__(self, extra: str, feature: str) -> None:
        self.extra = extra
        self.feature = feature
        super().__init__(
            f"{feature} needs the optional dependencies of the {extra!r} extra. "
            f"To fix, run: pip install 'obsbus[{extra}]'"
        )


class DestinationError(ObsbusError):
    """A logger destination failed; raised only when the engine is ``strict``.

    Attributes:
        destination: the name of the destination that failed.
        action: what it was doing (a hook or logging method name).
    """

    def __init__(self, destination: str, action: str, cause: BaseException) -> None:
        self.destination = destination
        self.action = action
        super().__init__(f"{destination}.{action} failed: {cause!r}")


class TrainingTerminated(SystemExit):
    """The process received a termination signal while a run was active.

    obsbus turns SIGTERM into this exception while ``Trainer.fit`` or a
    ``Run`` is active, so the ``exception`` event runs and every destination
    flushes before the process ends. It derives from ``SystemExit`` so that
    ``except Exception`` in user code does not swallow it, and the exit
    status is the conventional ``128 + signum`` (143 for SIGTERM).
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(128 + signum)

    def __str__(self) -> str:
        return f"received signal {self.signum}; the run was stopped"
