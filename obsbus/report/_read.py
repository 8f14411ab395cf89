"""Read what obsbus wrote into a run folder: FileLogger's files, the status files, ``config/``."""

from __future__ import annotations

import json
import math
import mmap
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsbus.errors import ObsbusError
from obsbus.masking import mask_secrets, mask_value

__all__ = ["NotARunError", "RankData", "RunData", "input_files", "read_run"]

#: The columns every JSON Lines row has besides the metrics.
_ROW_FIELDS = frozenset({"step", "epoch", "batch", "wall_time"})
#: A metric named like a column is written as ``metric:<name>`` (FileLogger): read as ``<name>``.
_METRIC_PREFIX = "metric:"
#: Strict JSON's non-finite floats (the protobuf JSON mapping's strings), read back as floats.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_RANK = re.compile(r"rank[-_]?(\d+)")
_PLACEHOLDER = re.compile(r"\{[^}]*\}")
#: Lines of the loguru logs kept per file (the first ones: a failure is reported once).
_MAX_LOG_LINES = 50
#: Status files RunReport writes next to the report, one per rank.
STATUS_GLOB = "run-status-rank*.json"


class NotARunError(ObsbusError, NotADirectoryError, ValueError):
    """The report's path is missing, is a file, or is a folder no run wrote into.

    A ``NotADirectoryError`` (what :func:`read_run` said before) and a ``ValueError``: the
    command line's bad input (exit status 2).
    """


@dataclass
class RankData:
    """One rank's metrics and what its files say about how it ended."""

    rank: int
    source: Path
    #: key -> (steps, values), in the order written; only numbers (NaN and inf kept).
    series: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    rows: int = 0
    #: The last line was cut short (a kill mid-write): it is left out.
    torn: bool = False
    #: Lines that were not JSON objects, besides a torn last one.
    bad_lines: int = 0
    first_wall: float | None = None
    last_wall: float | None = None
    last_step: float | None = None
    last_epoch: float | None = None
    #: ``[exception]`` lines of the FileLogger text log, masked.
    exceptions: list[str] = field(default_factory=list)
    #: The status file RunReport wrote for this rank, if any.
    status: dict[str, Any] | None = None


@dataclass
class RunData:
    """Everything the report shows, read from one run folder."""

    root: Path
    ranks: dict[int, RankData] = field(default_factory=dict)
    #: ``config/`` files by name (JSON parsed; ``packages.txt`` as text), masked.
    config: dict[str, Any] = field(default_factory=dict)
    #: (file, line) of the loguru warning/error logs that name obsbus, masked.
    log_lines: list[tuple[str, str]] = field(default_factory=list)
    #: Files that could not be read, with why.
    unreadable: list[str] = field(default_factory=list)

    @property
    def units(self) -> dict[str, str]:
        """The units the run declared (``config/units.json``): key or pattern -> unit; ``{}``
        for a run made before units were recorded (then no unit is shown)."""
        record = self.config.get("units.json")
        units = record.get("units") if isinstance(record, dict) else None
        if not isinstance(units, dict):
            return {}
        return {k: v for k, v in units.items() if isinstance(k, str) and isinstance(v, str)}

    @property
    def run_name(self) -> str:
        for data in self.ranks.values():
            if data.status and isinstance(data.status.get("run_name"), str):
                return str(data.status["run_name"])
        run = self.config.get("run.json")
        if isinstance(run, dict) and isinstance(run.get("run_name"), str) and run["run_name"]:
            return str(run["run_name"])
        return self.root.name


def _rank_of(path: Path, fallback: int) -> int:
    found = _RANK.findall(path.name)
    return int(found[-1]) if found else fallback


def _patterns(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Glob patterns of FileLogger's JSON Lines and text logs: those in plugins.json, else the
    defaults."""
    jsonl, text = {"metrics-rank*.jsonl"}, {"logs-rank*.txt"}
    plugins = config.get("plugins.json", {})
    rows = plugins.get("plugins", []) if isinstance(plugins, dict) else []
    for row in rows:
        if not isinstance(row, dict) or not str(row.get("class", "")).endswith("FileLogger"):
            continue
        args = row.get("args") or {}
        for name, into in (("jsonl_filename", jsonl), ("filename", text)):
            value = args.get(name) if isinstance(args, dict) else None
            if isinstance(value, str) and value and not Path(value).is_absolute():
                into.add(_PLACEHOLDER.sub("*", value))
    return sorted(jsonl), sorted(text)


def _glob(root: Path, patterns: list[str]) -> list[Path]:
    found: set[Path] = set()
    for pattern in patterns:
        found.update(p for p in root.glob(pattern) if p.is_file())
    return sorted(found)


def _number(value: Any) -> bool:
    kind = type(value)
    return kind is float or kind is int


#: Lines parsed by one ``json.loads`` (as one array): a call per line costs 3x as much.
_CHUNK = 20_000


def _rows(lines: list[bytes], data: RankData) -> list[Any]:
    """Parse ``lines`` (whole lines, no blank ones), a chunk at a time; bad lines are counted."""
    loads, rows = json.loads, []
    for start in range(0, len(lines), _CHUNK):
        chunk = lines[start : start + _CHUNK]
        try:
            rows.extend(loads(b"[" + b",".join(chunk) + b"]"))
        except ValueError:  # a bad line in the chunk: line by line
            for line in chunk:
                try:
                    rows.append(loads(line))
                except ValueError:
                    data.bad_lines += 1
    return rows


def _metric_name(key: str) -> str:
    """The metric a JSON Lines key holds: ``metric:epoch`` is the metric ``epoch`` (FileLogger
    moves a metric named like a column out of the column's way); other keys are themselves."""
    if key.startswith(_METRIC_PREFIX) and key[len(_METRIC_PREFIX) :] in _ROW_FIELDS:
        return key[len(_METRIC_PREFIX) :]
    return key


def read_jsonl(path: Path, rank: int) -> RankData:
    """Read FileLogger's JSON Lines; a torn last line (a crashed run) is dropped.

    Non-finite floats are read whether written as strict JSON's strings (``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``) or as the bare tokens older files hold; other strings
    are not plotted.
    """
    data = RankData(rank, path)
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    tail = lines.pop()  # after the last newline: b"" unless the last write was cut
    if tail.strip():
        try:
            json.loads(tail)
            lines.append(tail)  # whole, only its newline missing
        except ValueError:
            data.torn = True
    series = data.series
    # Per distinct set of keys (FileLogger repeats a few per run): its metric keys' lists.
    columns: dict[tuple[str, ...], list[tuple[str, list[Any], list[Any]]]] = {}
    numbers, non_finite = (float, int), _NON_FINITE
    parsed = _rows([line for line in lines if line], data)
    rows = [row for row in parsed if type(row) is dict]
    data.bad_lines += len(parsed) - len(rows)
    last_step: Any = None
    for row in rows:
        step = row.get("step")
        if type(step) not in numbers:
            continue
        signature = tuple(row)
        entries = columns.get(signature)
        if entries is None:
            entries = columns[signature] = []
            for key in signature:
                if key not in _ROW_FIELDS:
                    name = _metric_name(key)
                    found = series.get(name) or series.setdefault(name, ([], []))
                    entries.append((key, found[0], found[1]))
        for key, steps, values in entries:
            value = row[key]
            kind = type(value)
            if kind in numbers:
                steps.append(step)
                values.append(value)
            elif kind is str and value in non_finite:
                steps.append(step)
                values.append(non_finite[value])
        if last_step is None or step > last_step:
            last_step = step
    for key in [key for key, (steps, _) in series.items() if not steps]:
        del series[key]  # text, lists: nothing to plot
    data.rows = len(rows)
    data.last_step = last_step
    walls = [r["wall_time"] for r in (rows[:1] + rows[-1:]) if _number(r.get("wall_time"))]
    if walls:
        data.first_wall, data.last_wall = walls[0], walls[-1]
    if rows and _number(rows[-1].get("epoch")):
        data.last_epoch = rows[-1]["epoch"]
    return data


def read_exceptions(path: Path) -> list[str]:
    """The ``[exception]: ...`` lines FileLogger writes into its text log, masked."""
    marker, found = b"[exception]: ", list[str]()
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as text:
            at = text.find(marker)
            while at >= 0 and len(found) < 20:
                if at == 0 or text[at - 1 : at] == b"\n":
                    end = text.find(b"\n", at)
                    line = text[at + len(marker) : end if end >= 0 else len(text)]
                    found.append(mask_secrets(line.decode("utf-8", "replace")))
                at = text.find(marker, at + 1)
    return found


def _read_config(root: Path, data: RunData) -> None:
    folder = root / "config"
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.name.startswith("."):
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            value: Any = json.loads(text) if path.suffix == ".json" else text
        except (OSError, ValueError) as exc:
            data.unreadable.append(f"{path.name}: {exc}")
            continue
        # Written masked already; masked again, in case a file came from elsewhere.
        data.config[path.name] = (
            mask_secrets(value) if isinstance(value, str) else mask_value(value)
        )


def _log_files(root: Path) -> list[Path]:
    """Per folder of loguru logs (``setup_logging``), the one read: ``warning.log`` (it holds
    the errors too: each file has its level and above), else ``error.log``."""
    logs = root / "logs"
    if not logs.is_dir():
        return []
    found = []
    for folder in sorted({p.parent for p in logs.glob("**/*.log")}):
        path = next(
            (folder / n for n in ("warning.log", "error.log") if (folder / n).is_file()), None
        )
        if path is not None:
            found.append(path)
    return found


def _read_logs(root: Path, data: RunData) -> None:
    """obsbus's warnings and errors in the loguru logs (``setup_logging``), if the run had them."""
    for path in _log_files(root):
        kept = 0
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if "obsbus" in line.lower():
                        data.log_lines.append(
                            (str(path.relative_to(root)), mask_secrets(line.rstrip()))
                        )
                        kept += 1
                        if kept >= _MAX_LOG_LINES:
                            break
        except OSError as exc:
            data.unreadable.append(f"{path}: {exc}")


def read_status_files(root: Path) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for index, path in enumerate(sorted(root.glob(STATUS_GLOB))):
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # written whole by a rename: a bad one is not RunReport's
        if isinstance(value, dict):
            found[_rank_of(path, index)] = mask_value(value)
    return found


def _plugins(root: Path) -> dict[str, Any]:
    """``config/plugins.json`` alone, as ``_read_config`` files it (it names the files)."""
    try:
        value = json.loads((root / "config" / "plugins.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {"plugins.json": value}


def input_files(run_dir: str | Path) -> list[Path]:
    """Every file the report of ``run_dir`` is made of: ``config/``, the JSON Lines and text
    logs, the status files, the loguru logs, the traces :func:`read_traces` sums and the
    images. Cheap (no
    file is read but ``config/plugins.json``): RunReport compares their sizes and times to
    tell whether its last page is still up to date.
    """
    from obsbus.report._images import image_files
    from obsbus.report._traces import trace_files

    root = Path(run_dir).expanduser().absolute()
    config = _plugins(root)
    jsonl, text = _patterns(config)
    folder = root / "config"
    found = set(folder.iterdir()) if folder.is_dir() else set()
    found = {p for p in found if p.is_file() and not p.name.startswith(".")}
    found.update(_glob(root, jsonl), _glob(root, text), root.glob(STATUS_GLOB))
    found.update(_log_files(root), trace_files(root, config), image_files(root))
    return sorted(found)


def _folder(run_dir: str | Path) -> Path:
    root = Path(run_dir).expanduser().absolute()
    if root.is_dir():
        return root
    said = "is a file" if root.exists() else "does not exist"
    raise NotARunError(
        f"{str(root)!r} {said}: a run folder was expected. To fix, pass the folder a run "
        "wrote (its run_folder: the one holding metrics-rank0.jsonl and config/)."
    )


def _no_run(root: Path) -> NotARunError:
    return NotARunError(
        f"{str(root)!r} holds no run: none of metrics-rank0.jsonl (FileLogger), "
        "logs-rank0.txt, run-status-rank0.json (RunReport) or config/ is in it. To fix, pass "
        "the folder a run wrote (its run_folder), not its parent or another folder."
    )


def read_run(run_dir: str | Path) -> RunData:
    """Read the run folder ``run_dir``: every rank's JSON Lines, text log and status, and
    ``config/``.

    Raises:
        NotARunError: ``run_dir`` does not exist, is a file, or holds none of the files a
            run writes (a ``NotADirectoryError`` and a ``ValueError``).
    """
    root = _folder(run_dir)
    data = RunData(root)
    _read_config(root, data)
    jsonl, text = _patterns(data.config)
    jsonl_files, text_files = _glob(root, jsonl), _glob(root, text)
    for index, path in enumerate(jsonl_files):
        rank = _rank_of(path, index)
        try:
            data.ranks[rank] = read_jsonl(path, rank)
        except OSError as exc:
            data.unreadable.append(f"{path.name}: {exc}")
    for rank, status in read_status_files(root).items():
        data.ranks.setdefault(rank, RankData(rank, root)).status = status
    for index, path in enumerate(text_files):
        rank = _rank_of(path, index)
        try:
            exceptions = read_exceptions(path)
        except (OSError, ValueError) as exc:
            data.unreadable.append(f"{path.name}: {exc}")
            continue
        if exceptions:
            data.ranks.setdefault(rank, RankData(rank, path)).exceptions = exceptions
    if not (data.ranks or data.config or jsonl_files or text_files):
        raise _no_run(root)
    _read_logs(root, data)
    return data
