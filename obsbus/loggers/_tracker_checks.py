"""An argument check the trackers share that :mod:`obsbus._check` has no form of."""

from __future__ import annotations

from obsbus._check import check_optional_str

__all__ = ["check_optional_name"]


def check_optional_name(owner: str, name: str, value: object) -> str | None:
    """``None`` or a non-empty str (a project, run or workspace name).

    As :func:`~obsbus._check.check_optional_str`, but an empty str is a
    ``TypeError``, as the trackers have always raised for it.
    """
    try:
        return check_optional_str(owner, name, value)
    except ValueError as exc:
        raise TypeError(str(exc)) from None
