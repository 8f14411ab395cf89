"""Bad input: every public constructor refuses wrong values when it is built.

The constructors are found automatically: every class in the public
``__all__`` of ``obsbus``, ``obsbus.callbacks``, ``obsbus.loggers``,
``obsbus.profiler`` and ``obsbus.object_store`` whose ``__init__`` takes
parameters, and every public factory function there that returns one of
those classes (the profiler schedules, ``build_object_store``). Each
parameter gets wrong values by its kind, read from its annotation, default
and name (negative, zero, nan/inf, wrong type, bool for an int, str for a
bool, a bad time string, a file where a folder is needed, a bad URI ...).
Every case must raise ``TypeError`` or ``ValueError`` at construction, and
the message must quote the value (its ``repr``). A constructor added to an
``__all__`` joins the table without editing this file; one that needs
arguments to be built at all gets a row in ``BASE_KWARGS``, and a wrong value
that a parameter legitimately accepts gets a commented row in ``ALLOWED``.
Parameters of modules the author of this suite could not change are listed in
``PENDING`` with what is wrong; a test fails as soon as one of them is fixed,
so the row goes with the fix.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import math
import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import obsbus
import obsbus.callbacks
import obsbus.loggers
import obsbus.object_store
import obsbus.profiler
from obsbus.loggers._tracker import TrackerDestination

MODULES = (obsbus, obsbus.callbacks, obsbus.loggers, obsbus.profiler, obsbus.object_store)
#: The table may grow; it must not silently shrink (it had 1345 cases when written).
MIN_CASES = 1300


class _Junk:
    """A value of no type any parameter accepts."""

    def __repr__(self) -> str:
        return "<junk>"


JUNK = _Junk()


class _Placeholder(enum.Enum):
    """A value only known inside the test (it needs the test's tmp dir)."""

    A_FILE = "an existing file"


A_FILE = _Placeholder.A_FILE
NAN, INF = float("nan"), float("inf")


def _noop(*args: Any) -> None:
    return None


def _tiny_model():
    import torch

    return torch.nn.Linear(2, 1)


def _one_batch():
    import torch

    return [(torch.zeros(1, 2), torch.zeros(1, 1))]


def _state():
    return obsbus.State(run_name="bad-input")


def _profiler():
    return obsbus.profiler.Profiler(schedule=obsbus.profiler.cyclic_schedule())


#: The least each constructor needs to be built (name -> kwargs factory). Trackers run in
#: their offline modes; none of them may start its client at construction.
BASE_KWARGS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "Trainer": lambda tmp: {
        "model": _tiny_model(), "train_dataloader": _one_batch(), "max_duration": "1ba",
        "device": "cpu",
    },
    "Engine": lambda tmp: {"state": (s := _state()), "logger": obsbus.Logger(s)},
    "Logger": lambda tmp: {"state": _state()},
    "BackgroundWriter": lambda tmp: {"name": "bad-input"},
    "RunFolder": lambda tmp: {"root": str(tmp / "run")},
    "Time": lambda tmp: {"value": 1, "unit": "ba"},
    "LogInterval": lambda tmp: {"value": "1ba", "what": "LogInterval value"},
    "build_callback": lambda tmp: {"name": "lr_monitor"},
    "build_logger": lambda tmp: {"name": "in_memory"},
    "ThresholdStopper": lambda tmp: {
        "monitor": "loss", "dataloader_label": "eval", "threshold": 0.0,
    },
    "CometMLLogger": lambda tmp: {"online": False},
    "NeptuneLogger": lambda tmp: {"mode": "debug"},
    "WandBLogger": lambda tmp: {"mode": "offline"},
    "MLFlowLogger": lambda tmp: {"tracking_uri": (tmp / "mlruns").as_uri()},
    "RemoteUploaderDownloader": lambda tmp: {"bucket_uri": "memory://bad-input"},
    "Marker": lambda tmp: {"profiler": _profiler(), "name": "m"},
    "Profiler": lambda tmp: {"schedule": obsbus.profiler.cyclic_schedule()},
    "ObjectStore": lambda tmp: {"uri": obsbus.object_store.parse_bucket_uri("memory://b")},
    "build_object_store": lambda tmp: {"bucket_uri": "memory://bad-input"},
    "parse_bucket_uri": lambda tmp: {"uri": "memory://bad-input"},
    "maybe_create_remote_uploader_downloader_from_uri": lambda tmp: {
        "uri": "memory://bad-input", "loggers": [],
    },
}  # fmt: skip

#: Arguments that must come with the one under test, or the error would be about them.
COMPANIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("Run", "eval_interval"): {"eval_fn": _noop},
    ("Run", "eval_fn"): {"eval_interval": "1ep"},
}

#: Whole constructors left out, and why.
SKIPPED_CONSTRUCTORS = {
    # A frozen record that parse_bucket_uri builds from a checked URI; users never build one
    # (parse_bucket_uri, which is, is in the table).
    "BucketURI": "built only by parse_bucket_uri",
}

#: (constructor, parameter, case id) -> why that "wrong" value is right there.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("MemorySnapshot", "skip_batches", "zero=0"): "0: snapshot from the first batch on",
    ("RuntimeEstimator", "skip_batches", "zero=0"): "0: time the first batch as well",
    ("cyclic_schedule", "warmup", "zero=0"): "a cycle without warmup batches",
    ("cyclic_schedule", "repeat", "zero=0"): "0 repeats the cycle forever (torch's meaning)",
    ("step_window_schedule", "profile_step_start", "zero=0"): "the window may start at step 0",
    ("step_window_schedule", "warmup", "zero=0"): "a window without warmup batches",
    ("ThresholdStopper", "threshold", "negative=-1.0"): "any finite metric value is a threshold",
    ("EarlyStopper", "patience", "zero='0ba'"): "0: stop at the first eval without improvement",
    ("EarlyStopper", "patience", "zero=0"): "0 epochs: the same, a bare int being epochs",
    ("Time", "value", "negative=-5"): "a Time is an amount: Time('1ep') - '3ep' is -2ep",
    ("Time", "value", "negative=-1.0"): "the same, in a unit that takes fractions",
    ("RunningAverage", "skip", "zero=0"): "0: no warm-up value is left out",
    **{
        (alert, param, "zero=0.0"): why
        for alert in ("SlackLogger", "WebhookLogger")
        for param, why in (
            ("close_timeout", "0: close does not wait for alerts still being sent"),
            ("retry_backoff", "0: retry at once"),
            ("max_backoff", "0: retry at once"),
        )
    },
    ("RunningAverage", "reset_interval", "zero=0"): "0 never restarts the window (Primus's)",
}

#: (constructor, parameter) -> why it is not fixed yet. Only parameters of modules this
#: suite's author could not change; each row's fix is described in issue 13's hand-off, and
#: test_a_pending_gap_is_still_open fails once the gap is closed, so the row must go.
PENDING: dict[tuple[str, str], str] = {}

#: Parameters that take no value at all, because what they would take is a secret (a URL
#: or token that would land in configs and logs): every value is refused, and the message
#: must NOT quote it (it says to use the environment instead).
SECRET_PARAMS: dict[tuple[str, str], str] = {
    ("SlackLogger", "slack_logging_api_key"): "Composer's token: use webhook_url_env",
    ("SlackLogger", "channel_id"): "a webhook is bound to its channel",
    ("SlackLogger", "webhook_url"): "use webhook_url_env",
    ("WebhookLogger", "url"): "use url_env",
    ("WebhookLogger", "token"): "use token_env",
}

# ----------------------------------------------------------------------------- discovery


def _is_constructor(obj: object, exported: set[str]) -> bool:
    if inspect.isclass(obj):
        if issubclass(obj, (BaseException, enum.Enum)):
            return False  # errors are raised by obsbus, not built by users; enums take values
        params = [p for p in inspect.signature(obj).parameters.values() if p.name != "self"]
        return any(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
    if inspect.isfunction(obj):
        ret = inspect.signature(obj).return_annotation
        names = {part.strip() for part in str(ret).split("|")}
        return bool(names & exported)  # a factory: it returns a public class or alias
    return False


def constructors() -> list[tuple[str, Callable[..., Any]]]:
    """Every public constructor and factory, found from the ``__all__`` lists."""
    objects = {name: getattr(module, name) for module in MODULES for name in module.__all__}
    exported = set(objects)
    found = {
        name: obj
        for name, obj in objects.items()
        if name not in SKIPPED_CONSTRUCTORS and _is_constructor(obj, exported)
    }
    return sorted(found.items())


# ----------------------------------------------------------------------------- the table


def _split_union(annotation: str) -> set[str]:
    """``"Iterable[int] | int | None"`` -> ``{"Iterable[int]", "int", "None"}``."""
    parts, depth, current = [], 0, ""
    for char in annotation:
        depth += char in "[("
        depth -= char in "])"
        if char == "|" and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return {p for p in parts if p}


_FOLDER = re.compile(r"(^|_)(dir|folder|directory)$")
_TEMPLATE = re.compile(r"(filename|file_name|_path|format_string)$")
#: Floats of seconds that must be > 0 (a write period or a refresh interval may be 0).
_SECONDS = re.compile(r"(timeout|backoff|_s|_seconds)$")
_NAMED_ANY = {
    # Parameters typed Any (they take a family of types) whose wrong values are known.
    "device": [("wrong type", 5), ("bad device", "no-such-device")],
    "profiler": [("wrong type", 5)],
    "optimizers": [("wrong type", 5)],
    "schedulers": [("wrong type", 5)],
    "comp": [("wrong type", 5), ("bad choice", "bogus")],
}


def _element(parts: set[str], prefixes: tuple[str, ...]) -> str | None:
    """The first type argument of the first part that starts with one of ``prefixes``."""
    for part in sorted(parts):
        if part.startswith(prefixes):
            return _split_union(part[part.index("[") + 1 : -1].split(",")[0]).pop()
    return None


def wrong_values(param: inspect.Parameter) -> list[tuple[str, Any]]:
    """``(kind, value)`` for each wrong value of ``param``'s kind."""
    annotation = param.annotation if isinstance(param.annotation, str) else ""
    parts = _split_union(annotation)
    default = param.default
    name = param.name
    element = _element(parts, ("Iterable[", "Sequence["))
    key = _element(parts, ("Mapping[", "dict["))
    takes = {
        "any": "Any" in parts,
        "none": "None" in parts or default is None,
        "bool": "bool" in parts,
        "int": bool(parts & {"int", "Number"}),
        "float": bool(parts & {"float", "Number"}),
        "str": "str" in parts,
        "time": bool(parts & {"TimeLike", "EvalInterval"}),
        "literal": any(p.startswith("Literal[") for p in parts),
        "iterable": element is not None,
        "mapping": key is not None,
        "callable": any(p.startswith("Callable") for p in parts),
    }
    numbers = takes["int"] or takes["float"] or takes["time"]
    nonzero_default = isinstance(default, (int, float)) and not isinstance(default, bool) and (
        default != 0
    )
    cases: list[tuple[str, Any]] = []
    if takes["any"]:
        return list(_NAMED_ANY.get(name, []))
    cases.append(("wrong type", JUNK))
    if not numbers and not takes["bool"]:
        cases.append(("wrong type", 5))
    if not takes["none"]:
        cases.append(("wrong type", None))
    if takes["bool"]:
        cases.append(("str for bool", "false"))
        if not takes["int"]:
            cases.append(("int for bool", 2))
    if takes["int"] and not takes["bool"]:
        cases.append(("bool for int", True))
        if not takes["float"]:
            cases.append(("wrong type", 2.5))
        if not takes["str"] and not takes["time"]:
            cases.append(("wrong type", "3"))
        cases.append(("negative", -5))
        if nonzero_default:
            cases.append(("zero", 0))
    if takes["float"]:
        cases += [("nan", NAN), ("inf", INF), ("negative", -1.0)]
        if not takes["bool"]:
            cases.append(("bool for float", True))
        if not takes["str"] and not takes["time"]:
            cases.append(("wrong type", "1.0"))
        if _SECONDS.search(name) or (default is None and not takes["int"]):
            cases.append(("zero", 0.0))
    if takes["time"]:
        cases += [("bad time string", "5xyz"), ("negative", "-1ba"), ("nan", NAN)]
        if not takes["bool"]:
            cases.append(("bool for time", True))
        if not takes["int"]:
            cases.append(("negative", -1))
        if isinstance(default, str) or default is None or name == "max_duration":
            cases += [("zero", "0ba"), ("zero", 0)]
    if takes["literal"]:
        cases.append(("bad choice", "bogus"))
    if takes["iterable"] and not takes["int"]:
        cases.append(("not iterable", 5))
    if takes["iterable"] and element != "Any":
        cases.append(("bad element", [JUNK]))
    if takes["mapping"] and key != "Any":
        cases.append(("bad key", {JUNK: 1}))
    if _FOLDER.search(name):
        cases.append(("file for folder", A_FILE))
    if _TEMPLATE.search(name) and takes["str"]:
        cases.append(("bad placeholder", "{no_such_placeholder}.txt"))
    if "uri" in name and takes["str"]:
        cases.append(("bad uri", "bogus-scheme://host/path"))
    # One value per (kind, value): a union can reach the same case twice.
    unique: dict[str, tuple[str, Any]] = {}
    for kind, value in cases:
        unique.setdefault(f"{kind}:{value!r}", (kind, value))
    return list(unique.values())


def _case_id(kind: str, value: Any) -> str:
    shown = value.value if isinstance(value, _Placeholder) else repr(value)
    return f"{kind}={shown}"


def build_table() -> list[tuple[str, str, str, str, Any]]:
    """``(constructor, parameter, kind, case id, value)`` for every case."""
    table = []
    for owner, obj in constructors():
        for param in inspect.signature(obj).parameters.values():
            if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            for kind, value in wrong_values(param):
                table.append((owner, param.name, kind, _case_id(kind, value), value))
    return table


TABLE = build_table()
CONSTRUCTORS = dict(constructors())
CASES = [
    case
    for case in TABLE
    if (case[0], case[1], case[3]) not in ALLOWED and (case[0], case[1]) not in PENDING
]


# ----------------------------------------------------------------------------- tests


@pytest.fixture(autouse=True)
def _trackers_offline_in_tmp(tmp_path, monkeypatch):
    for var, sub in (("WANDB_DIR", "wandb"), ("WANDB_CACHE_DIR", "wandb-cache"),
                     ("WANDB_CONFIG_DIR", "wandb-config"), ("WANDB_DATA_DIR", "wandb-data"),
                     ("MPLCONFIGDIR", "mpl"), ("NEPTUNE_DATA_DIRECTORY", "neptune"),
                     ("COMET_CONFIG", "comet.config")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    for var, value in (("WANDB_MODE", "offline"), ("WANDB_SILENT", "true"),
                       ("MLFLOW_DISABLE_TELEMETRY", "true"), ("DO_NOT_TRACK", "1"),
                       ("COMET_DISABLE_AUTO_LOGGING", "1"),
                       ("COMET_ERROR_TRACKING_ENABLE", "false"),
                       ("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri()),
                       ("MLFLOW_ALLOW_FILE_STORE", "true"),
                       ("SLACK_WEBHOOK_URL", "http://127.0.0.1:9/hooks/bad-input"),
                       ("OBSBUS_WEBHOOK_URL", "http://127.0.0.1:9/hooks/bad-input")):
        monkeypatch.setenv(var, value)


def _close(obj: Any) -> None:
    """Release what a built object holds (a writer thread, a temp folder)."""
    if isinstance(obj, obsbus.Callback):
        state = _state()
        obj.close(state, obsbus.Logger(state))
    elif callable(getattr(obj, "close", None)):
        obj.close()


def _base(owner: str, tmp_path: Path) -> dict[str, Any]:
    factory = BASE_KWARGS.get(owner)
    return factory(tmp_path) if factory is not None else {}


def test_the_table_covers_every_constructor_and_kind():
    kinds = Counter(kind for _, _, kind, _, _ in CASES)
    owners = {owner for owner, *_ in CASES}
    print(f"\n{len(CASES)} bad-input cases over {len(owners)} constructors "
          f"({len(TABLE) - len(CASES)} allowed): {dict(sorted(kinds.items()))}")
    assert len(CASES) >= MIN_CASES
    assert owners | {owner for owner, _ in PENDING} == set(CONSTRUCTORS)
    assert {"negative", "zero", "nan", "inf", "wrong type", "bool for int", "str for bool",
            "bad time string", "file for folder", "bad uri", "not iterable"} <= set(kinds)
    for name in ("Trainer", "Run", "FileLogger", "WandBLogger", "Profiler", "cyclic_schedule",
                 "build_object_store", "RemoteUploaderDownloader", "SpeedMonitor"):
        assert name in owners


def test_a_new_constructor_joins_the_table_and_its_gaps_are_found(monkeypatch, tmp_path):
    class NewMonitor(obsbus.Callback):
        def __init__(self, every: int = 5, verbose: bool = False, wait_s: float = 1.0) -> None:
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise ValueError(f"NewMonitor every must be an int >= 1, got {every!r}.")
            self.verbose, self.wait_s = verbose, wait_s  # unchecked: the table must say so

    monkeypatch.setattr(obsbus.callbacks, "NewMonitor", NewMonitor, raising=False)
    monkeypatch.setattr(obsbus.callbacks, "__all__", [*obsbus.callbacks.__all__, "NewMonitor"])
    found = dict(constructors())
    assert found["NewMonitor"] is NewMonitor
    monkeypatch.setitem(CONSTRUCTORS, "NewMonitor", NewMonitor)
    cases = {
        (param.name, kind, value)
        for param in inspect.signature(NewMonitor).parameters.values()
        for kind, value in wrong_values(param)
    }
    assert {("every", "negative", -5), ("every", "zero", 0), ("verbose", "str for bool", "false"),
            ("wait_s", "inf", INF), ("wait_s", "zero", 0.0)} <= cases
    problems = {(param, kind) for param, kind, value in cases
                if _check_refused("NewMonitor", param, kind, value, tmp_path)}
    assert ("verbose", "str for bool") in problems and ("wait_s", "zero") in problems
    assert not {p for p in problems if p[0] == "every"}


def test_every_allowed_entry_names_a_case_and_says_why():
    ids = {(owner, param, case_id) for owner, param, _, case_id, _ in TABLE}
    for key, why in ALLOWED.items():
        assert key in ids, f"ALLOWED entry {key} matches no case: remove it"
        assert len(why) > 10


@pytest.mark.parametrize("owner", sorted(CONSTRUCTORS))
def test_the_base_arguments_build_it(owner, tmp_path):
    """Without this, a base that fails would make every bad value 'raise'."""
    built = CONSTRUCTORS[owner](**_base(owner, tmp_path))
    _close(built)


TRACKERS = sorted(
    name
    for name, obj in CONSTRUCTORS.items()
    if inspect.isclass(obj) and issubclass(obj, TrackerDestination)
)


@pytest.mark.parametrize("owner", TRACKERS)
def test_no_tracker_starts_its_client_at_construction(owner, tmp_path):
    """Building one writes no file and starts no thread: its client starts at init."""
    threads = threading.active_count()
    built = CONSTRUCTORS[owner](**_base(owner, tmp_path))
    assert [p for p in tmp_path.rglob("*")] == []
    assert threading.active_count() == threads
    _close(built)


def _quoted(value: Any) -> str:
    """What the message must contain: the value's repr (the bad item's, in a container)."""
    if isinstance(value, list | dict):
        return repr(JUNK)
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return repr(value)


def _check_refused(owner: str, param: str, kind: str, value: Any, tmp_path: Path) -> str | None:
    """Why ``owner(param=value)`` breaks the contract, or ``None`` when it keeps it."""
    if value is A_FILE:
        path = tmp_path / "a-file.txt"
        path.write_text("not a folder")
        value = str(path)
    kwargs = {**_base(owner, tmp_path), **COMPANIONS.get((owner, param), {}), param: value}
    try:
        built = CONSTRUCTORS[owner](**kwargs)
    except (TypeError, ValueError) as exc:
        message = str(exc)
    except Exception as exc:
        return f"{owner}({param}={value!r}) raised {type(exc).__name__}: {exc}"
    else:
        with contextlib.suppress(Exception):  # what it was built with may not close
            _close(built)
        return f"{owner}({param}={value!r}) was accepted ({kind})"
    if (owner, param) in SECRET_PARAMS:
        if isinstance(value, str) and value and value in message:
            return f"{owner}({param}={value!r}): the message shows the secret: {message}"
        return None if "environment" in message or "_env" in message else (
            f"{owner}({param}={value!r}): the message does not say to use the environment: "
            f"{message}"
        )
    if _quoted(value) not in message:
        return f"{owner}({param}={value!r}): the message does not quote it: {message}"
    spelled = param.replace("_", "").lower()  # run_folder is named by "RunFolder root ..."
    named = param in message or owner in message or spelled in message.replace(" ", "").lower()
    if not named:
        return f"{owner}({param}={value!r}): the message names neither: {message}"
    return None


#: The cases by (constructor, parameter): one test each keeps the suite to seconds.
BY_PARAMETER: dict[tuple[str, str], list[tuple[str, Any]]] = {}
for _owner, _param, _kind, _, _value in CASES:
    BY_PARAMETER.setdefault((_owner, _param), []).append((_kind, _value))


@pytest.mark.parametrize(("owner", "param"), sorted(BY_PARAMETER),
                         ids=[f"{o}-{p}" for o, p in sorted(BY_PARAMETER)])
def test_bad_values_are_refused_at_construction(owner, param, tmp_path):
    problems = [_check_refused(owner, param, kind, value, tmp_path)
                for kind, value in BY_PARAMETER[(owner, param)]]
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("owner", "param"), sorted(PENDING),
                         ids=[f"{o}-{p}" for o, p in sorted(PENDING)])
def test_a_pending_gap_is_still_open(owner, param, tmp_path):
    """A PENDING row stays only while one of its cases still breaks the contract."""
    cases = [(k, v) for o, p, k, _, v in TABLE if (o, p) == (owner, param)]
    assert cases, f"PENDING {(owner, param)} matches no case: remove it"
    problems = [_check_refused(owner, param, k, v, tmp_path) for k, v in cases]
    assert any(problems), f"{owner}({param}=...) is fixed: remove its PENDING row"
