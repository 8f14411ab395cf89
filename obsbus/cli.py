"""The ``obsbus`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _events(args: argparse.Namespace) -> int:
    from obsbus.event import Event

    if args.order:
        print((Event.__doc__ or "").split("Example:")[0].rstrip())
        return 0
    for event in Event:
        print(event.value)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from obsbus import __version__

    parser = argparse.ArgumentParser(prog="obsbus", description="obsbus command line tools.")
    parser.add_argument("--version", action="version", version=f"obsbus {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    events = sub.add_parser("events", help="list the events, or show the loop they follow")
    events.add_argument("--order", action="store_true", help="show the documented event order")
    events.set_defaults(func=_events)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
