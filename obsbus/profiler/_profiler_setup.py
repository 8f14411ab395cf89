"""What :class:`~obsbus.profiler.Profiler`'s constructor builds from its arguments. Not API.

The ``sys_prof_*`` arguments make a :class:`~obsbus.profiler.SystemProfiler`
and the ``torch_prof_*`` ones a :class:`~obsbus.profiler.TorchProfiler`, as
Composer's ``Profiler`` does; here also live the checks of the values that
torch profiling being off would leave unused.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from obsbus._check import check_bool, check_seconds
from obsbus.errors import ObsbusWarning
from obsbus.profiler import _torch_trace
from obsbus.profiler.system_profiler import SystemProfiler
from obsbus.profiler.torch_profiler import TorchProfiler

#: The ``torch_prof_*`` switches: Composer runs ``torch.profiler`` when any is True.
FLAGS = (
    "torch_prof_record_shapes",
    "torch_prof_profile_memory",
    "torch_prof_with_stack",
    "torch_prof_with_flops",
)
#: Composer's Profiler defaults where they differ from obsbus's (the same meaning either way).
COMPOSER_DEFAULTS: Mapping[str, Any] = {
    "torch_prof_folder": "{run_name}/torch_traces",
    "torch_prof_memory_remote_file_name": (
        "{run_name}/torch_memory_traces/rank{rank}.{batch}.pt.memory_trace.html"
    ),
}
SYS_PROF = {
    "sys_prof_cpu": "profile_cpu",
    "sys_prof_memory": "profile_memory",
    "sys_prof_disk": "profile_disk",
    "sys_prof_net": "profile_net",
    "sys_prof_stats_thread_interval_seconds": "stats_thread_interval_seconds",
}


def build_system_profiler(settings: Mapping[str, Any]) -> SystemProfiler | None:
    """The SystemProfiler the ``sys_prof_*`` settings ask for (``None``: all four off)."""
    for key in ("sys_prof_cpu", "sys_prof_memory", "sys_prof_disk", "sys_prof_net"):
        check_bool("Profiler", key, settings[key])
    key = "sys_prof_stats_thread_interval_seconds"
    check_seconds("Profiler", key, settings[key])
    if not any(settings[k] for k in SYS_PROF if k != key):
        return None
    system = SystemProfiler(**{SYS_PROF[k]: v for k, v in settings.items()})
    system._built_by_profiler = True
    return system


def build_torch_profiler(
    settings: Mapping[str, Any], profiler_defaults: Mapping[str, Any]
) -> TorchProfiler | None:
    """The TorchProfiler the ``torch_prof_*`` settings ask for, or ``None``."""
    for key in FLAGS:
        check_bool("Profiler", key, settings[key])
    if settings["torch_prof_folder"] is None:
        check_unused(settings, profiler_defaults)
        if not settings["record_memory_history"]:
            return None
    elif not any(settings[key] for key in FLAGS):
        warnings.warn(
            f"Profiler(torch_prof_folder={settings['torch_prof_folder']!r}) with "
            + ", ".join(f"{key}=False" for key in FLAGS)
            + " runs torch.profiler, recording operator times only: in obsbus "
            "torch_prof_folder turns it on, while Composer's Profiler runs no torch.profiler "
            "when those four are False. To turn torch.profiler off, leave torch_prof_folder out.",
            ObsbusWarning,
            stacklevel=4,
        )
    args = _torch_trace.PROFILER_ARGS
    return TorchProfiler(**{args[key]: value for key, value in settings.items()})


def check_unused(settings: Mapping[str, Any], profiler_defaults: Mapping[str, Any]) -> None:
    """Raise if a ``torch_prof_*`` setting would be ignored because torch profiling is off.

    Ignored are the values that ask something of ``torch.profiler``: neither
    obsbus's default nor Composer's, and not a switch set to ``False`` (which is
    how Composer turns ``torch.profiler`` off, and what it is here already).
    """
    given = [
        f"{key}={value!r}"
        for key, value in settings.items()
        if key.startswith("torch_prof_")
        and not _same(value, profiler_defaults[key])
        and not _same(value, COMPOSER_DEFAULTS.get(key, profiler_defaults[key]))
        and not (key in FLAGS and value is False)
    ]
    if given:
        raise ValueError(
            f"Profiler({', '.join(given)}) has no effect without torch_prof_folder: in obsbus "
            "torch.profiler runs only when torch_prof_folder names where its traces go (Composer "
            "runs it by default, in '{run_name}/torch_traces'). To fix, also pass "
            "torch_prof_folder='torch_traces' (relative to the run folder), or leave those "
            "arguments out."
        )


def _same(value: object, default: object) -> bool:
    """``value == default``, with ``True``/``1`` and ``False``/``0`` kept apart."""
    return type(value) is type(default) and value == default
