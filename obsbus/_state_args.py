"""What :class:`~obsbus.State` accepts beyond the run arguments: precision, device, counts."""

from __future__ import annotations

from typing import Any

from obsbus import _check

__all__ = ["PRECISIONS", "check_optional_int", "check_precision", "check_state_device"]

#: The precisions a run may declare (Composer's ``Precision`` values but ``amp_fp8``).
PRECISIONS = ("fp32", "amp_fp16", "amp_bf16")


def check_precision(owner: str, value: object) -> str | None:
    """``value`` as one of :data:`PRECISIONS` (a ``Precision``-like enum gives its value)."""
    if value is None:
        return None
    raw = getattr(value, "value", value)  # Composer's Precision is a str enum
    if not isinstance(raw, str):
        raise TypeError(
            f"{owner} precision must be one of {', '.join(map(repr, PRECISIONS))} or None, "
            f"got {value!r}."
        )
    if raw.lower() not in PRECISIONS:
        hint = ""
        if raw.lower() == "amp_fp8":
            hint = " amp_fp8 needs TransformerEngine, which obsbus's Trainer does not drive."
        else:
            hint = _check.did_you_mean(raw, PRECISIONS)
        raise ValueError(
            f"{owner} precision {value!r} is not supported; accepted: "
            f"{', '.join(map(repr, PRECISIONS))} or None.{hint}"
        )
    return raw.lower()


def check_state_device(value: object) -> Any:
    """``value`` if it names a device: a str or index torch parses, a ``torch.device``, None.

    No availability check: a state describes the device of a loop that may run
    elsewhere; :class:`~obsbus.Run` and :class:`~obsbus.Trainer` check that.
    """
    if value is None:
        return None
    accepted = "a device such as 'cpu', 'cuda', 'cuda:1', a torch.device or None"
    if type(value).__name__ == "device" and hasattr(value, "type"):  # a torch.device
        return value
    name: str | int = _check.check_instance("State", "device", value, (str, int), accepted=accepted)
    import torch  # only for a device given by name: ``import obsbus`` stays light

    try:
        torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"State device must be {accepted}, got {value!r} ({exc}).") from None
    return value


def check_optional_int(name: str, value: object, *, minimum: int) -> int | None:
    """``None`` or an int ``>= minimum``: :func:`obsbus._check.check_optional_int` for State."""
    return _check.check_optional_int("State", name, value, minimum=minimum)
