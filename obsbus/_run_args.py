"""What :class:`~obsbus.Run` and :class:`~obsbus.Trainer` accept, checked before the first event.

Plug-ins, optimizers, the duration and the device: each of them, when wrong,
would fail as a raw Python error inside the loop (``'int' object is not
iterable``, a model moved to a device that is not there) or, for a duration of
``0``, not fail at all and train nothing. The messages name the argument,
quote the value and say what is accepted; the generic checks are in
:mod:`obsbus._check`.
"""

from __future__ import annotations

from typing import Any

from obsbus._check import check_instance, check_iterable_of, short
from obsbus.callback import Callback
from obsbus.logger import LoggerDestination
from obsbus.time import Time, TimeUnit

__all__ = [
    "check_callbacks",
    "check_device",
    "check_duration",
    "check_loggers",
    "check_optimizers",
    "check_profiler",
]


def check_objects_with(
    owner: str, name: str, value: object, attribute: str, *, accepted: str
) -> list[Any]:
    """``value`` as a list of objects that have ``attribute``: ``None`` is ``[]``, one is ``[it]``.

    For duck-typed plug-ins such as optimizers (``param_groups``) and LR
    schedulers (``step``), which come from many libraries.
    """
    if value is None:
        return []
    if hasattr(value, attribute) and not isinstance(value, (list, tuple)):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner} {name} must be {accepted}, got {value!r}.")
    for item in value:
        if not hasattr(item, attribute):
            raise TypeError(
                f"{owner} {name} must be {accepted}, got {item!r} among {short(list(value))}."
            )
    return list(value)


def check_callbacks(owner: str, value: object) -> list[Any]:
    """``callbacks``: a :class:`~obsbus.Callback`, a list of them, or ``None``."""
    return check_iterable_of(
        owner,
        "callbacks",
        value,
        Callback,
        accepted="a Callback, a list of Callback (monitors) or None",
        allow_none=True,
        allow_single=True,
    )


def check_loggers(owner: str, value: object) -> list[Any]:
    """``loggers``: a :class:`~obsbus.LoggerDestination`, a list of them, or ``None``."""
    return check_iterable_of(
        owner,
        "loggers",
        value,
        LoggerDestination,
        accepted="a LoggerDestination, a list of LoggerDestination or None",
        allow_none=True,
        allow_single=True,
    )


def check_optimizers(owner: str, optimizers: object, schedulers: object) -> None:
    """Optimizers have ``param_groups`` and LR schedulers ``step``, whatever their library."""
    check_objects_with(
        owner,
        "optimizers",
        optimizers,
        "param_groups",
        accepted="an optimizer (a torch.optim.Optimizer or anything with param_groups), "
        "a list of them or None",
    )
    check_objects_with(
        owner,
        "schedulers",
        schedulers,
        "step",
        accepted="an LR scheduler (anything with step()), a list of them or None",
    )


def check_profiler(owner: str, value: object) -> None:
    """``profiler``: an :class:`obsbus.profiler.Profiler` or ``None``."""
    if value is None:
        return
    from obsbus.profiler.profiler import Profiler

    if not isinstance(value, Profiler):
        raise TypeError(
            f"{owner} profiler must be an obsbus.profiler.Profiler or None, got {value!r}. "
            "To fix, build one: Profiler(schedule=cyclic_schedule(...), trace_handlers=[...])."
        )


def check_duration(owner: str, name: str, value: object) -> Time:
    """``value`` as a positive :class:`~obsbus.Time` (a bare number is epochs).

    ``-1``, ``0`` and ``'0ba'`` would end training before its first batch,
    silently; they are refused here instead.
    """
    accepted = (
        "a positive time such as '2ep', '100ba', '10000sp', '1e6tok' or '1h30m' "
        "(a bare int is epochs)"
    )
    try:
        duration = Time.from_input(value, default_unit=TimeUnit.EPOCH)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{owner} {name} must be {accepted}, got {value!r} ({exc})") from None
    if duration.value <= 0:
        raise ValueError(
            f"{owner} {name} must be {accepted}, got {value!r}: it would end the run before "
            "its first batch. To fix, give a positive duration, or leave it out where the loop "
            "decides when to stop."
        )
    return duration


def check_device(owner: str, name: str, value: object) -> Any:
    """``value`` as a ``torch.device`` this machine has (``None`` stays ``None``).

    An unknown name or a device that is not there would fail at the first
    ``.to(device)``, inside the loop; this says so when the run is built.
    """
    if value is None:
        return None
    import torch  # only when a device is given: ``import obsbus`` stays light

    accepted = "a device such as 'cpu', 'cuda', 'cuda:1', 'gpu' or a torch.device"
    given: str | int | torch.device = check_instance(
        owner, name, value, (str, int, torch.device), accepted=accepted
    )
    try:
        device = torch.device("cuda" if given == "gpu" else given)  # Composer's name for CUDA
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"{owner} {name} must be {accepted}, got {value!r} ({exc}).") from None
    backend = getattr(torch, device.type, None) if device.type not in ("cpu", "meta") else None
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and not is_available():
        raise ValueError(
            f"{owner} {name} {value!r}: this machine has no {device.type} device. "
            "To fix, pass device='cpu' or leave device out."
        )
    count = getattr(backend, "device_count", None)
    if device.index is not None and callable(count) and device.index >= count():
        raise ValueError(
            f"{owner} {name} {value!r}: this machine has {count()} {device.type} device(s), "
            f"numbered from 0. To fix, pass a device index below {count()}."
        )
    return device
