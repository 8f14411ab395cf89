"""The ``obsbus`` command line."""

from __future__ import annotations

import argparse
import sys
import warnings
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


_MERGE_EPILOG = """\
Each input is a Chrome trace (.json or .json.gz; an object with "traceEvents"
or a bare array of events, whose closing "]" may be missing). Its rank comes
from, in order: an "obsbus_rank" metadata event, otherData.rank,
distributedInfo.rank (torch.profiler), a process_name "rank N", else the
lowest rank no other input claims. If two inputs claim one rank, every input
is numbered by its position on the command line, unless --combine-same-rank
puts them in that rank's row. Each rank's timestamps are shifted by the offset
in its "obsbus_clock" metadata, onto rank 0's clock; inputs that do not share
one torch.profiler baseTimeNanoseconds are moved onto the Unix epoch.

exit status: 0 merged, 2 bad arguments or an input that is not a trace,
1 a file that can not be read or written.
"""


def _merge_traces(args: argparse.Namespace) -> int:
    from obsbus.profiler.merge import merge_traces

    prog = "obsbus merge-traces"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trace = merge_traces(args.inputs, args.output, combine_same_rank=args.combine_same_rank)
            status = 0
        except (ValueError, TypeError) as err:
            message, status = str(err), 2
        except OSError as err:
            message, status = str(err), 1
    for warning in caught:
        print(f"{prog}: warning: {warning.message}", file=sys.stderr)
    if status:
        print(f"{prog}: error: {message}", file=sys.stderr)
        return status
    ranks = ", ".join(trace["otherData"]["ranks"])
    print(
        f"merged {len(args.inputs)} traces (ranks {ranks}), "
        f"{len(trace['traceEvents'])} events -> {args.output}"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from obsbus import __version__

    parser = argparse.ArgumentParser(prog="obsbus", description="obsbus command line tools.")
    parser.add_argument("--version", action="version", version=f"obsbus {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    events = sub.add_parser("events", help="list the events, or show the loop they follow")
    events.add_argument("--order", action="store_true", help="show the documented event order")
    events.set_defaults(func=_events)
    merge = sub.add_parser(
        "merge-traces",
        help="merge per-rank Chrome traces into one, a process row per rank",
        description="Merge per-rank Chrome traces into one trace where each rank is its own\n"
        "process row, with the ranks' clocks aligned.",
        epilog=_MERGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="the merged trace to write (.json, or .json.gz to compress)",
    )
    merge.add_argument(
        "--combine-same-rank",
        action="store_true",
        help="inputs that claim the same rank share its row (one rank's windows, or its "
        "obsbus and torch.profiler traces) instead of being numbered by position",
    )
    merge.add_argument("inputs", nargs="+", metavar="IN", help="a rank's trace (.json or .json.gz)")
    merge.set_defaults(func=_merge_traces)
    from obsbus import collect_env

    env = sub.add_parser(
        "collect-env", help="print the environment to attach to a bug report (text or --json)"
    )
    collect_env.add_arguments(env)
    env.set_defaults(func=collect_env.run)
    from obsbus import report

    report_parser = sub.add_parser(
        "report",
        help="write a run folder's report: one HTML file that opens offline",
        description="Write one self-contained HTML page that shows a run: status, failures,\n"
        "metrics by step, time per event and callback, and the run's config/.\n"
        "Needs the report extra: pip install 'obsbus[report]'.",
        epilog="exit status: 0 written; 2 a missing extra, a bad argument, or a RUN_DIR\n"
        "that does not exist, is a file or holds no run; 1 a file that can not be read\n"
        "or written.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_arguments(report_parser)
    report_parser.set_defaults(func=report.run)
    from obsbus import _config_cli

    config_parser = sub.add_parser(
        "config",
        help="check, show or list a run's observability config (YAML)",
        description="Check a YAML config before a job starts (check), print it resolved with\n"
        "every default (show), or list the plug-ins and their arguments (keys).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _config_cli.add_arguments(config_parser)
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
