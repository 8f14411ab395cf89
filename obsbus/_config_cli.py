"""``obsbus config check|show|keys``: the config commands of the command line.

``keys`` reads each argument's text from the ``Args:`` section of the plug-in's
docstring (class or ``__init__``) and its default from the signature, so the
listing can not drift from the code.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["add_arguments", "docstring_args"]

_ENTRY = re.compile(r"^(?P<name>\*{0,2}\w+)\s*(?:\([^)]*\))?:\s*(?P<text>.*)$")


def docstring_args(doc: str | None) -> dict[str, str]:
    r"""``{argument: text}`` from a Google-style ``Args:`` section (continuations joined).

    Example:
        >>> doc = "Hi.\n\nArgs:\n    size: batches,\n        at least 1.\n    unit: hours.\n"
        >>> docstring_args(doc + "\nReturns:\n    nothing.\n")
        {'size': 'batches, at least 1.', 'unit': 'hours.'}
    """
    out: dict[str, str] = {}
    inside, base, entry, current = False, 0, -1, ""
    for line in inspect.cleandoc(doc or "").splitlines():
        indent = len(line) - len(line.lstrip())
        if not inside:
            if line.strip() in ("Args:", "Arguments:", "Parameters:"):
                inside, base, entry, current = True, indent, -1, ""
            continue
        if not line.strip():
            continue
        if indent <= base:
            inside = False
            continue
        match = _ENTRY.match(line.strip())
        if match and (entry < 0 or indent <= entry):
            entry, current = indent, match["name"].lstrip("*")
            out[current] = match["text"].strip()
        elif current:
            out[current] = f"{out[current]} {line.strip()}".strip()
    return out


def _docs(target: Callable[..., Any]) -> dict[str, str]:
    docs = docstring_args(getattr(target, "__doc__", None))
    init = getattr(target, "__init__", None) if inspect.isclass(target) else None
    if init is not None:
        docs = {**docstring_args(getattr(init, "__doc__", None)), **docs}
    return docs


def _summary(target: Callable[..., Any]) -> str:
    doc = inspect.getdoc(target) or ""
    return doc.splitlines()[0] if doc else ""


def _targets() -> list[tuple[str, str, Callable[..., Any] | None, str]]:
    from obsbus import registry

    rows: list[tuple[str, str, Callable[..., Any] | None, str]] = []
    for kind in registry.KINDS:
        for name in registry.names(kind):
            path = registry.import_path(kind, name) or ""
            try:
                target: Callable[..., Any] | None = registry.load(kind, name)
            except Exception:
                target = None
            rows.append((kind, name, target, path))
    return rows


def _keys(args: argparse.Namespace) -> int:
    from obsbus._config_check import parameters
    from obsbus.profiler import Profiler

    rows = _targets()
    rows.append(("profiler", "profiler", Profiler, "obsbus.profiler.profiler:Profiler"))
    if args.name is None:
        for kind in dict.fromkeys(r[0] for r in rows):
            print(f"{kind}:")
            for k, name, target, path in rows:
                if k == kind:
                    what = _summary(target) if target is not None else f"({path}: not importable)"
                    print(f"  {name:<28} {what}")
        return 0
    chosen = [r for r in rows if r[1] == args.name]
    if not chosen:
        from obsbus.registry import suggest

        hint = suggest(args.name, [r[1] for r in rows])
        print(f"obsbus config keys: error: no plug-in named {args.name!r}{hint or '.'}",
              file=sys.stderr)  # fmt: skip
        return 2
    for kind, name, target, path in chosen:
        print(f"{name} ({kind}, {path})")
        if target is None:
            print("  (can not be imported)")
            continue
        summary = _summary(target)
        if summary:
            print(f"  {summary}")
        docs = _docs(target)
        for pname, param in parameters(target).items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                head = f"**{pname}"
            elif param.default is inspect.Parameter.empty:
                head = f"{pname} (required)"
            else:
                head = f"{pname} = {param.default!r}"
            ann = param.annotation
            if ann is not inspect.Parameter.empty:
                head += f"  [{ann if isinstance(ann, str) else inspect.formatannotation(ann)}]"
            print(f"  {head}")
            text = docs.get(pname)
            if text:
                print(f"      {text}")
    return 0


def _load_built(args: argparse.Namespace, prog: str) -> tuple[Any, int]:
    from obsbus import config

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = (config.resolve if args.command_action == "show" else config.build)(
                args.file, dialect=args.dialect
            )
            status = 0
        except config.ConfigError as err:
            result, status = err, 1
        except (OSError, ValueError, TypeError) as err:
            result, status = err, 2
    for warning in caught:
        print(f"{prog}: warning: {warning.message}", file=sys.stderr)
    return result, status


def _check(args: argparse.Namespace) -> int:
    from obsbus.masking import mask_secrets

    prog = "obsbus config check"
    result, status = _load_built(args, prog)
    if status:
        print(f"{prog}: error: {mask_secrets(str(result))}", file=sys.stderr)
        return status
    parts = [f"{len(result.callbacks)} callbacks", f"{len(result.loggers)} loggers"]
    parts.append("a profiler" if result.profiler is not None else "no profiler")
    print(f"{args.file}: OK ({', '.join(parts)})")
    return 0


def _show(args: argparse.Namespace) -> int:
    from obsbus.config import dump
    from obsbus.masking import mask_secrets

    prog = "obsbus config show"
    result, status = _load_built(args, prog)
    if status:
        print(f"{prog}: error: {mask_secrets(str(result))}", file=sys.stderr)
        return status
    sys.stdout.write(dump(result))
    return 0


_EPILOG = """\
exit status: 0 the config builds; 1 it has problems (all listed, each with its
path in the file); 2 bad arguments or a file that can not be read.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``check``, ``show`` and ``keys`` subcommands of ``obsbus config``."""
    from obsbus.config import DIALECTS

    sub = parser.add_subparsers(dest="command_action", metavar="ACTION")
    for action, func, text in (
        ("check", _check, "check a config file: every problem, or OK"),
        ("show", _show, "print the resolved config: every plug-in with all its arguments"),
    ):
        one = sub.add_parser(action, help=text, description=text, epilog=_EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        one.add_argument("file", metavar="FILE", help="the YAML config")
        one.add_argument(
            "--dialect",
            choices=DIALECTS,
            default=None,
            help="translate this dialect's keys first (primus: Primus/TorchTitan)",
        )
        one.set_defaults(func=func)
    keys = sub.add_parser(
        "keys", help="list the plug-in names, or one plug-in's arguments with defaults and docs"
    )
    keys.add_argument("name", nargs="?", metavar="NAME", help="a plug-in name (speed_monitor)")
    keys.set_defaults(func=_keys)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2
