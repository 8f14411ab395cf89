"""``obsbus collect-env``: the facts to attach to a bug report, as text or JSON.

What Composer's ``composer_collect_env`` prints (torch's
:mod:`torch.utils.collect_env` report, the package version, CPU model and
count, nodes, GPU model and count, CUDA devices), plus the installed version
of every tracker and store library obsbus works with, what ``nvidia-smi`` or
``rocm-smi``/``amd-smi`` report when they are on ``PATH`` (each with a 5 s
timeout), and the launcher and communication variables (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``NCCL_*``, ``RCCL_*``, ``HIP_*``, ``HSA_*``,
``SLURM_*``, ``TORCHELASTIC_*``, ...). Secret-named variables show ``***``
and every value goes through :func:`obsbus.masking.mask_secrets`.

Usage::

    obsbus collect-env [--json] [--no-torch]
    python -m obsbus.collect_env [--json] [--no-torch]

torch's report runs compilers and package managers and takes seconds;
``--no-torch`` skips it (the rest takes well under a second).

JSON layout (:func:`collect`), every section always present::

    {"created": "2026-01-01T00:00:00Z",
     "obsbus": {"version", "python", "platform"},
     "torch": {"version", "cuda", "hip", "cuda_available", "report"},  # report: str or null
     "hardware": {"cpu_model", "cpu_cores", "cpu_threads", "nodes", "gpu_model",
                  "gpus_per_node", "gpu_count", "cuda_device_count", "devices"},
     "gpu_tools": [{"tool": "nvidia-smi", "gpus": [{...}]} or {"tool": ..., "error": ...}],
     "libraries": {"core"|"trackers"|"object_stores"|"gpu"|"extras": {name: version or null}},
     "distributed": {NAME: value}}

Example:
    >>> data = collect(torch_report=False)
    >>> sorted(data)
    ['created', 'distributed', 'gpu_tools', 'hardware', 'libraries', 'obsbus', 'torch']
    >>> "== Libraries ==" in format_report(data)
    True
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from obsbus import _collect_env_probes as probes
from obsbus.masking import mask_secrets

__all__ = ["add_arguments", "collect", "configure_excepthook", "format_report", "main", "print_env"]


def _torch_facts(report: bool) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"version": None, "cuda": None, "hip": None, "cuda_available": False, "report": None}
    text = None
    if report:
        try:
            from torch.utils import collect_env as torch_env

            text = mask_secrets(str(torch_env.get_pretty_env_info()))  # type: ignore[no-untyped-call]
        except Exception as exc:  # torch's report runs tools that may be broken
            text = f"torch.utils.collect_env failed: {mask_secrets(str(exc))}"
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cuda_available": bool(torch.cuda.is_available()),
        "report": text,
    }


def _cpu_count(logical: bool) -> int | None:
    try:
        import psutil

        count = psutil.cpu_count(logical=logical)
        return int(count) if count is not None else None
    except Exception:  # psutil missing, or broken in a container
        return os.cpu_count() if logical else None


def _hardware(cuda: bool, probe_devices: bool) -> dict[str, Any]:
    from obsbus import dist

    devices: list[str] = []
    if cuda:
        import torch

        # Naming a device initialises CUDA: at run start only where the run did that already.
        if probe_devices or torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    local = max(dist.get_local_world_size(), 1)
    return {
        "cpu_model": probes.cpu_model(),
        "cpu_cores": _cpu_count(logical=False),
        "cpu_threads": _cpu_count(logical=True),
        "nodes": max(dist.get_world_size() // local, 1),
        "gpu_model": devices[0] if devices else None,
        "gpus_per_node": local if devices else 0,
        "gpu_count": dist.get_world_size() if devices else 0,
        "cuda_device_count": len(devices),
        "devices": devices,
    }


def collect(*, torch_report: bool = True, probe_devices: bool = True) -> dict[str, Any]:
    """Every section of the report as JSON data (layout in the module docstring).

    ``probe_devices=False`` (the run record at run start) runs no GPU tool and does not
    initialise CUDA: ``gpu_tools`` is then empty and device names are those of a CUDA the
    process initialised already.
    """
    from obsbus import __version__

    torch_facts = _torch_facts(torch_report)
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "obsbus": {
            "version": __version__,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "torch": torch_facts,
        "hardware": _hardware(torch_facts["cuda_available"], probe_devices),
        "gpu_tools": probes.gpu_tools() if probe_devices else [],
        "libraries": probes.library_versions(),
        "distributed": probes.distributed_variables(),
    }


def _lines(title: str, items: dict[str, Any]) -> list[str]:
    width = max((len(k) for k in items), default=0)
    body = [f"{k:<{width}}  {'-' if v is None else v}" for k, v in items.items()]
    return [f"== {title} ==", *(body or ["(none)"]), ""]


def format_report(data: dict[str, Any]) -> str:
    """The human report of :func:`collect`'s data, one ``== Section ==`` per part."""
    torch_facts = dict(data["torch"])
    report = torch_facts.pop("report")
    out = [f"obsbus environment report, created {data['created']}", ""]
    out += _lines("obsbus", data["obsbus"])
    out += _lines("PyTorch", torch_facts)
    if report:
        out += ["== PyTorch collect_env ==", report.rstrip(), ""]
    hardware = dict(data["hardware"])
    devices = hardware.pop("devices")
    out += _lines("Hardware", hardware)[:-1]
    out += [f"  cuda:{i}  {name}" for i, name in enumerate(devices)] + [""]
    out.append("== GPU tools ==")
    for tool in data["gpu_tools"] or [{"tool": "(no nvidia-smi, rocm-smi or amd-smi on PATH)"}]:
        out.append(tool["tool"] + (f": {tool['error']}" if "error" in tool else ""))
        for gpu in tool.get("gpus", []):
            out.append("  " + ", ".join(f"{k}={v}" for k, v in gpu.items()))
        for key, value in tool.get("system", {}).items():
            out.append(f"  {key}: {value}")
    out.append("")
    out.append("== Libraries ==")
    for group, versions in data["libraries"].items():
        found = ", ".join(f"{n}=={v}" for n, v in versions.items() if v)
        out.append(f"{group}: {found or '(none installed)'}")
    out.append("")
    out += _lines("Distributed", data["distributed"])
    return "\n".join(out)


def print_env(file: TextIO | None = None, *, torch_report: bool = True) -> None:
    """Print the report (Composer's ``print_env``) to ``file`` (default ``sys.stdout``)."""
    print(format_report(collect(torch_report=torch_report)), file=file or sys.stdout)


_Hook = Callable[[type[BaseException], BaseException, types.TracebackType | None], Any]
_previous_hook: _Hook | None = None


def configure_excepthook(*, torch_report: bool = True) -> None:
    """Print the report to stderr after an uncaught exception (opt-in, as Composer's).

    The report is printed on rank 0 only, then the hook that was installed
    before runs (the traceback comes last, where a terminal shows it).
    ``KeyboardInterrupt`` prints no report. Calling it again changes nothing.
    """
    global _previous_hook
    if _previous_hook is not None:
        return
    _previous_hook = sys.excepthook

    def hook(
        kind: type[BaseException], value: BaseException, tb: types.TracebackType | None
    ) -> None:
        try:
            from obsbus import dist

            if not issubclass(kind, KeyboardInterrupt) and dist.get_rank() == 0:
                print("\nobsbus: an uncaught exception ended the program; environment report:\n",
                      file=sys.stderr)  # fmt: skip
                print_env(sys.stderr, torch_report=torch_report)
        except Exception as exc:  # the traceback must still be printed
            print(f"obsbus: the environment report failed: {exc!r}", file=sys.stderr)
        assert _previous_hook is not None
        _previous_hook(kind, value, tb)

    sys.excepthook = hook


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``collect-env`` options, for ``obsbus collect-env`` and ``python -m``."""
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="skip torch.utils.collect_env's report (it runs tools and takes seconds)",
    )


def run(args: argparse.Namespace) -> int:
    """Print the report for parsed :func:`add_arguments` options; 0 on success."""
    data = collect(torch_report=not args.no_torch)
    print(json.dumps(data, indent=2) if args.json else format_report(data))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m obsbus.collect_env [--json] [--no-torch]``."""
    parser = argparse.ArgumentParser(
        prog="obsbus collect-env", description="Print the environment to attach to a bug report."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
