"""File-name placeholders, formatted by one function everyone shares."""

from __future__ import annotations

import string
from typing import TYPE_CHECKING, Any

from obsbus import dist

if TYPE_CHECKING:
    from obsbus.state import State
    from obsbus.time import Timestamp

__all__ = [
    "PLACEHOLDERS",
    "check_placeholders",
    "epoch_number",
    "format_name",
    "placeholder_values",
]

#: The placeholders every obsbus file name may use. Time placeholders take
#: the state's timestamp when one is known; ``{epoch}`` is :func:`epoch_number`.
PLACEHOLDERS = (
    "run_name",
    "rank",
    "local_rank",
    "world_size",
    "local_world_size",
    "node_rank",
    "epoch",
    "batch",
    "sample",
    "token",
    "iteration",
    "batch_in_epoch",
    "sample_in_epoch",
    "token_in_epoch",
)
_FORMATTER = string.Formatter()


def epoch_number(timestamp: Timestamp) -> int:
    """The epoch a moment of the run belongs to, counted from 1, as every output numbers it.

    During an epoch, the epoch in progress (``timestamp.epoch + 1``: the
    timestamp counts completed epochs, as Composer's); at its ``epoch_end``
    and after it (an evaluation at the epoch's end, ``fit_end``), until a
    batch of the next epoch ends, the epoch just completed. This is the
    number Composer's console prints (``[epoch=1][batch=4/4]``), and the
    one the console, the loguru lines, the JSON Lines ``epoch`` column and
    the ``{epoch}`` of file names (trace files) all show, so a row, a line
    and a trace of the same batch say the same epoch.

    Example:
        >>> from obsbus.time import Timestamp
        >>> epoch_number(Timestamp(epoch=0, batch=3, batch_in_epoch=3))  # in the first epoch
        1
        >>> epoch_number(Timestamp(epoch=1, batch=4, batch_in_epoch=0))  # at its epoch_end
        1
        >>> epoch_number(Timestamp(epoch=1, batch=5, batch_in_epoch=1))
        2
    """
    epoch = timestamp._epoch
    return epoch if epoch and not timestamp._batch_in_epoch else epoch + 1


def placeholder_values(state: State | None = None) -> dict[str, Any]:
    """The placeholder values of ``state`` (or only the rank ones without a state)."""
    info = state.rank_info if state is not None else dist.rank_info()
    values: dict[str, Any] = {
        "rank": info.rank,
        "local_rank": info.local_rank,
        "world_size": info.world_size,
        "local_world_size": info.local_world_size,
        "node_rank": info.node_rank,
    }
    if state is not None:
        values["run_name"] = state.run_name
        ts = state.timestamp
        for key in PLACEHOLDERS[7:]:
            values[key] = getattr(ts, key).value
        values["epoch"] = epoch_number(ts)
    return values


def format_name(template: str, state: State | None = None, **values: Any) -> str:
    """Fill the placeholders of ``template`` that are known; leave the rest as written.

    Values come from ``state`` (run name, rank info, timestamp) and then from
    ``values``, which win. Format specs work (``{rank:02d}``). An unknown
    placeholder stays in the result verbatim, so a later stage (or the user)
    can still fill it.

    Example:
        >>> template = "{run_name}/ep{epoch}-rank{rank:02d}-{unknown}.json"
        >>> format_name(template, run_name="r", epoch=3, rank=1)
        'r/ep3-rank01-{unknown}.json'
    """
    if not isinstance(template, str):
        raise TypeError(f"A file name template must be a str, got {template!r}.")
    known = placeholder_values(state)
    known.update(values)
    out: list[str] = []
    for literal, field, spec, conversion in _FORMATTER.parse(template):
        out.append(literal)
        if field is None:
            continue
        if field in known:
            value = known[field]
            if conversion:
                value = _FORMATTER.convert_field(value, conversion)
            out.append(format(value, spec or ""))
        else:
            conv = f"!{conversion}" if conversion else ""
            out.append("{" + field + conv + (f":{spec}" if spec else "") + "}")
    return "".join(out)


def check_placeholders(template: str, what: str, allowed: tuple[str, ...] = PLACEHOLDERS) -> str:
    """Return ``template`` if every placeholder in it is one of ``allowed``.

    Destinations call it at construction, so a typo fails before the run starts.

    Raises:
        TypeError: ``template`` is not a str.
        ValueError: an unknown placeholder; the message lists the accepted ones.

    Example:
        >>> check_placeholders("{run_name}/rank{rank}.txt", "FileLogger filename")
        '{run_name}/rank{rank}.txt'
        >>> check_placeholders("{rnak}.txt", "FileLogger filename")
        Traceback (most recent call last):
        ...
        ValueError: FileLogger filename '{rnak}.txt' uses unknown placeholder {rnak}; accepted: ...
    """
    if not isinstance(template, str) or not template:
        raise TypeError(f"{what} must be a non-empty str, got {template!r}.")
    from obsbus.masking import mask_secrets  # a template may hold a URI with its credentials

    shown = mask_secrets(template)
    try:
        fields = [field for _, field, _, _ in _FORMATTER.parse(template) if field is not None]
    except ValueError as exc:
        raise ValueError(f"{what} {shown!r} is not a valid template: {exc}.") from None
    for field in fields:
        if field not in allowed:
            raise ValueError(
                f"{what} {shown!r} uses unknown placeholder {{{field}}}; accepted: "
                + ", ".join("{" + name + "}" for name in allowed)
                + ". To fix, correct the name, or double the braces for a literal brace."
            )
    return template
