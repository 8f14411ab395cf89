"""What the two trace writers share: the traces kept, a folder that already holds some. Not API.

:class:`~obsbus.profiler.JSONTraceHandler` and
:class:`~obsbus.profiler.TorchProfiler` both write trace files into a folder,
prune the oldest to ``num_traces_to_keep`` and refuse, without
``overwrite``, a folder that already holds traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from obsbus._check import check_int


def check_keep(owner: str, value: object) -> int:
    """``num_traces_to_keep``: ``-1`` (keep all) or a count ``>= 1``.

    0 (Composer's "delete once uploaded") is refused: uploads run in the
    background, so a trace deleted at once could be lost.

    Example:
        >>> check_keep("TorchProfiler", 0)
        Traceback (most recent call last):
        ...
        ValueError: TorchProfiler num_traces_to_keep must be -1 (keep all) or a positive int, ...
    """
    keep = check_int(owner, "num_traces_to_keep", value, minimum=-1)
    if keep == 0:
        raise ValueError(
            f"{owner} num_traces_to_keep must be -1 (keep all) or a positive int, got 0. "
            "(0, Composer's 'delete once uploaded', is not accepted: uploads run in the "
            "background, so a trace deleted at once could be lost. To fix, pass 1 to keep "
            "only the newest.)"
        )
    return keep


def refuse_held_traces(
    owner: str, folder: Path, patterns: Sequence[str], overwrite: str = "overwrite"
) -> None:
    """A ``FileExistsError`` if ``folder`` holds a file matching one of ``patterns``.

    ``overwrite`` is the argument that allows it, as the user passes it.
    """
    held = (
        [path for pattern in patterns for path in folder.glob(pattern)] if folder.is_dir() else []
    )
    if held:
        raise FileExistsError(
            f"{owner}: {str(folder)!r} already holds traces ({held[0].name}, ...). To fix, pass "
            f"{overwrite}=True, use another run name, or another folder."
        )
