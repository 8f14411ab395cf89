"""The units of metric keys: what each plug-in declares, merged, looked up and written.

Every :class:`~obsbus.Callback` may declare the units of the keys it logs with
``metric_units()``: a mapping from an exact key or an :mod:`fnmatch` pattern
(``"memory/*_mem"``) to a short unit (``"s"``, ``"h"``, ``"GB"``, ``"%"``,
``"samples/s"``...). The run merges every plug-in's mapping and writes it to
``<run folder>/config/units.json`` as ``{"units": {key or pattern: unit}}``;
the console and the report read units from there or from the plug-ins, and
show no unit where none is declared: a unit is never guessed.

Lookup (:func:`unit_of`): an exact key wins over a pattern; among patterns
that match, the longest wins (the first declared on a tie). Merging
(:func:`collect_units`): two plug-ins that declare one key or pattern with
different units leave it out (with one warning): a unit shown must be true.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

__all__ = ["PluginUnits", "collect_units", "read_units", "unit_of", "units_record", "with_unit"]

_PATTERN_CHARS = frozenset("*?[")


def unit_of(key: str, units: Mapping[str, str]) -> str | None:
    """The unit of ``key`` in ``units`` (exact keys and fnmatch patterns), or ``None``.

    Example:
        >>> units = {"time/*": "h", "time/remaining_estimate": "s", "memory/*_mem": "GB",
        ...          "memory/host_*_mem": "GiB"}
        >>> [unit_of(k, units) for k in ("time/train", "time/remaining_estimate",
        ...                              "memory/host_rss_mem", "loss/train/total")]
        ['h', 's', 'GiB', None]
    """
    exact = units.get(key)
    if exact is not None:
        return exact
    best: str | None = None
    best_length = -1
    for pattern, unit in units.items():
        longer = len(pattern) > best_length and _PATTERN_CHARS.intersection(pattern)
        if longer and fnmatchcase(key, pattern):
            best, best_length = unit, len(pattern)
    return best


def _declared(plugin: object, warn: bool) -> dict[str, str]:
    """``plugin.metric_units()``, checked: a bad declaration warns and counts as none."""
    declare = getattr(plugin, "metric_units", None)
    if declare is None:
        return {}
    name = type(plugin).__name__
    try:
        units = declare()
    except Exception as exc:
        if not warn:
            return {}
        warnings.warn(
            f"obsbus: {name}.metric_units() raised {type(exc).__name__}: {exc}; "
            "its keys are shown without units.",
            _warning(),
            stacklevel=3,
        )
        return {}
    if not isinstance(units, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in units.items()
    ):
        if not warn:
            return {}
        warnings.warn(
            f"obsbus: {name}.metric_units() must return a dict of non-empty str key or "
            f"pattern -> non-empty str unit, e.g. {{'time/*': 'h'}}; got {units!r}. "
            "Its keys are shown without units.",
            _warning(),
            stacklevel=3,
        )
        return {}
    return dict(units)


def _warning() -> type[Warning]:
    from obsbus.errors import ObsbusWarning

    return ObsbusWarning


def collect_units(plugins: Iterable[object], *, warn: bool = True) -> dict[str, str]:
    """Every plug-in's declared units, merged in plug-in order.

    A key or pattern two plug-ins declare with different units is left out
    (warned once): neither unit can be shown as the truth.

    Example:
        >>> from obsbus.callbacks import SpeedMonitor
        >>> collect_units([SpeedMonitor(time_unit="seconds")])["time/train"]
        's'
    """
    merged: dict[str, str] = {}
    clashes: dict[str, set[str]] = {}
    for plugin in plugins:
        for key, unit in _declared(plugin, warn).items():
            if key in clashes:
                clashes[key].add(unit)
            elif merged.setdefault(key, unit) != unit:
                clashes[key] = {merged.pop(key), unit}
    if clashes and warn:
        listed = "; ".join(f"{k!r}: {', '.join(sorted(u))}" for k, u in sorted(clashes.items()))
        warnings.warn(
            f"obsbus: plug-ins declare different units for the same keys ({listed}); those "
            "keys are shown without a unit. To fix, give the monitors the same unit "
            "(e.g. the same time_unit).",
            _warning(),
            stacklevel=2,
        )
    return merged


def units_record(plugins: Iterable[object]) -> dict[str, Any]:
    """The ``config/units.json`` data for ``plugins``: ``{"units": {key or pattern: unit}}``."""
    from obsbus.masking import mask_value

    return {"units": mask_value(collect_units(plugins))}


def read_units(run_folder: str | Path) -> dict[str, str]:
    """The units a run wrote (``config/units.json``); ``{}`` when it wrote none.

    A run made before units were recorded has no file: its keys show no unit.
    A file that is not the expected shape reads as ``{}`` too (units are
    shown only when known).
    """
    path = Path(run_folder) / "config" / "units.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    units = data.get("units") if isinstance(data, dict) else None
    if not isinstance(units, dict):
        return {}
    return {k: v for k, v in units.items() if isinstance(k, str) and isinstance(v, str)}


def with_unit(text: str, unit: str | None) -> str:
    """A formatted value followed by its unit, if it has one: ``0.003056 h``."""
    return f"{text} {unit}" if unit else text


class PluginUnits:
    """The units of a run's plug-ins, looked up per key and cached, for the text destinations.

    :meth:`refresh` collects the mapping again only when the plug-in list
    changed (one added mid-run); :meth:`of` is then one dict access per key.

    Example:
        >>> from obsbus.callbacks import SpeedMonitor
        >>> units = PluginUnits()
        >>> units.refresh([SpeedMonitor()])
        >>> units.of("time/train"), units.of("loss/train/total")
        ('h', None)
    """

    __slots__ = ("_cache", "_seen", "_units")

    def __init__(self) -> None:
        self._seen: tuple[int, ...] = ()
        self._units: dict[str, str] = {}
        self._cache: dict[str, str | None] = {}

    def refresh(self, plugins: Iterable[object]) -> None:
        """Look at the run's plug-ins (``state.callbacks``) again."""
        listed = tuple(plugins)
        seen = tuple(map(id, listed))
        if seen != self._seen:
            self._seen, self._cache = seen, {}
            self._units = collect_units(listed, warn=False)  # the run record warns, once

    def of(self, key: str) -> str | None:
        """The unit of ``key`` among the plug-ins' declarations, or ``None``."""
        try:
            return self._cache[key]
        except KeyError:
            unit = self._cache[key] = unit_of(key, self._units)
            return unit
