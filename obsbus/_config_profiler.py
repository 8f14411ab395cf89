"""The ``profiler:`` section of a config: a schedule and trace handlers by name.

Accepted shapes (the canonical one first; ``obsbus config show`` prints it)::

    profiler:
      schedule: {cyclic: {skip_first: 1, wait: 0, warmup: 1, active: 2, repeat: 1}}
      #   or     {step_window: {profile_step_start: 10, profile_step_end: 12}}
      trace_handlers: {json_trace_handler: {folder: traces}}
      sys_prof_cpu: false                  # and every other Profiler argument
      torch_prof_folder: torch_traces

    profiler:                              # llm-foundry's shape
      schedule: {wait: 0, warmup: 1, active: 4, repeat: 1}   # cyclic_schedule's arguments
      json_trace_handler: {folder: traces}
      torch_profiler: {with_stack: true}   # TorchProfiler's names: torch_prof_with_stack,
      system_profiler: {profile_cpu: true} # and torch_prof_folder defaults to "torch_traces"
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from obsbus import registry
from obsbus._config_check import Problem, check_arguments, parameters

__all__ = ["PlannedProfiler", "plan_profiler"]

_PARTS = {"torch_profiler": "TorchProfiler", "system_profiler": "SystemProfiler"}


@dataclass
class PlannedProfiler:
    """A checked ``profiler:`` section, ready to build."""

    schedule: tuple[str, Callable[..., Any], dict[str, Any]]
    handlers: list[tuple[str, Callable[..., Any], dict[str, Any]]] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self) -> tuple[Any, list[Problem]]:
        """The Profiler, or ``None`` and the constructors' problems (each with its path)."""
        from obsbus.config import construct
        from obsbus.profiler import Profiler

        problems: list[Problem] = []
        path, factory, kwargs = self.schedule
        schedule = construct(path, factory, kwargs, problems)
        handlers = [construct(p, f, kw, problems) for p, f, kw in self.handlers]
        if problems:
            return None, problems
        kwargs = {**self.kwargs, "schedule": schedule, "trace_handlers": handlers}
        return construct("profiler", Profiler, kwargs, problems), problems


def _named(
    path: str, kind: registry.Kind, value: Any
) -> tuple[list[tuple[str, Callable[..., Any], dict[str, Any]]], list[Problem]]:
    """``{name: args}`` (or ``{name: [args, ...]}``) of registered plug-ins, checked."""
    from obsbus.config import named_instances

    return named_instances(path, kind, value, log_interval=None)


def _part_names(part: str) -> dict[str, str]:
    from obsbus.profiler import _profiler_setup, _torch_trace

    table = _torch_trace.PROFILER_ARGS if part == "torch_profiler" else _profiler_setup.SYS_PROF
    return {own: profiler_arg for profiler_arg, own in table.items()}


def _parts(section: dict[str, Any], problems: list[Problem]) -> None:
    """Fold ``torch_profiler:``/``system_profiler:`` into the Profiler's own arguments."""
    from obsbus.profiler import TorchProfiler

    for part, owner in _PARTS.items():
        if part not in section:
            continue
        given = section.pop(part)
        if given is None:
            given = {}
        if not isinstance(given, Mapping):
            problems.append((f"profiler.{part}", f"expected a mapping of {owner} arguments"))
            continue
        table = _part_names(part)
        if part == "torch_profiler" and "folder" not in given:
            given = {"folder": parameters(TorchProfiler)["folder"].default, **given}
        for key, value in given.items():
            target = table.get(key)
            if target is None:
                hint = registry.suggest(str(key), sorted(table))
                problems.append(
                    (f"profiler.{part}.{key}", f"{owner} has no argument {key!r}{hint}")
                )
            elif target in section:
                problems.append(
                    (f"profiler.{part}.{key}", f"given twice: here and as profiler.{target}")
                )
            else:
                section[target] = value


def _schedule(
    value: Any, problems: list[Problem]
) -> tuple[str, Callable[..., Any], dict[str, Any]] | None:
    known = registry.names("schedules")
    if value is None:
        value = {"cyclic": {}}
    if not isinstance(value, Mapping):
        problems.append(("profiler.schedule", f"expected a mapping such as {{cyclic: {{}}}}; "
                                              f"accepted names: {', '.join(known)}"))  # fmt: skip
        return None
    if len(value) == 1 and next(iter(value)) in known:
        name, args = next(iter(value.items()))
    elif not any(k in known for k in value):
        name, args = "cyclic", value  # llm-foundry: cyclic_schedule's arguments, flat
    else:
        problems.append(("profiler.schedule", f"name one schedule, got {sorted(value)}; "
                                              f"accepted: {', '.join(known)}"))  # fmt: skip
        return None
    found, more = _named("profiler.schedule", "schedules", {name: args})
    problems += more
    return found[0] if found else None


def plan_profiler(value: Any) -> tuple[PlannedProfiler | None, list[Problem]]:
    """Check a ``profiler:`` section (``None``: no profiler)."""
    from obsbus.profiler import Profiler

    if value is None:
        return None, []
    if not isinstance(value, Mapping):
        return None, [("profiler", "expected a mapping with a schedule and trace_handlers")]
    section = dict(value)
    problems: list[Problem] = []
    handlers_cfg: dict[str, Any] = {}
    given = section.pop("trace_handlers", None) or {}
    if isinstance(given, Mapping):
        handlers_cfg.update(given)
    else:
        problems.append(("profiler.trace_handlers", "expected a mapping {name: arguments}"))
    for name in registry.names("trace_handlers"):
        if name in section:  # llm-foundry puts json_trace_handler beside the schedule
            handlers_cfg[name] = section.pop(name)
    handlers, more = _named("profiler.trace_handlers", "trace_handlers", handlers_cfg)
    problems += more
    schedule = _schedule(section.pop("schedule", None), problems)
    _parts(section, problems)
    for reserved in ("schedule", "trace_handlers"):
        section.pop(reserved, None)
    kwargs, more = check_arguments("profiler", "Profiler", Profiler, section)
    problems += [p for p in more if not p[0].endswith(".schedule")]
    if schedule is None or problems:
        return None, problems
    return PlannedProfiler(schedule, handlers, kwargs), problems
