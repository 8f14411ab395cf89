"""Probes for :mod:`obsbus.collect_env`: CPU, packages, GPU tools, launcher variables.

Each probe returns plain JSON data and never raises: a tool that is missing,
fails or hangs (every one runs with a timeout) is reported in the data.

Formats read:

* ``nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id
  --format=csv,noheader,nounits``: one line per GPU, fields joined by ``", "``
  (``[N/A]`` or ``[Not Supported]`` where a field is unknown);
* ``rocm-smi --showproductname --showdriverversion --json``: one object,
  ``{"card0": {"Card series": "...", ...}, "system": {"Driver version": "..."}}``
  (``formatJson`` in ROCm's ``rocm_smi.py``; values are strings, some with tabs);
* ``amd-smi static --asic --json``: a list of ``{"gpu": 0, "asic": {...}}``
  (ROCm 6.x; newer releases wrap it as ``{"gpu_data": [...]}``).
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from obsbus.masking import MASK, is_secret_name, mask_secrets

__all__ = [
    "DIST_VARIABLES",
    "LIBRARIES",
    "cpu_model",
    "distributed_variables",
    "gpu_tools",
    "library_versions",
    "run_tool",
]

TOOL_TIMEOUT_S = 5.0

#: The libraries obsbus works with, by group: distribution names for importlib.metadata.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "core": ("torch", "numpy", "psutil", "loguru", "tqdm", "typing_extensions"),
    "trackers": ("tensorboard", "wandb", "comet_ml", "neptune", "mlflow", "mlflow-skinny"),
    "object_stores": ("obstore", "sshfs", "asyncssh", "boto3"),
    "gpu": ("nvidia-ml-py", "amdsmi"),
    "extras": ("matplotlib", "torchmetrics", "transformers", "lightning", "accelerate"),
}

#: Launcher and communication variables: exact names, then prefixes.
DIST_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "OMP_NUM_THREADS",
)  # fmt: skip
DIST_PREFIXES = (
    "NCCL_",
    "RCCL_",
    "HIP_",
    "HSA_",
    "SLURM_",
    "TORCHELASTIC_",
    "GLOO_",
    "TORCH_NCCL_",
)

_NVIDIA_FIELDS = ("index", "name", "driver_version", "memory.total", "pci.bus_id")


def run_tool(
    argv: list[str], timeout: float = TOOL_TIMEOUT_S, *, name: str | None = None
) -> tuple[str | None, str | None]:
    """``(stdout, None)`` when ``argv`` exits 0, else ``(None, why)``; never raises.

    ``why`` names the tool as ``name`` (default: ``argv[0]``) and ends with the
    last line it printed.
    """
    name = name or argv[0]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"{name} did not answer within {timeout:g} s"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{name} could not run: {exc}"
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip().splitlines()
        return None, f"{name} exited with status {done.returncode}: {(err or [''])[-1][:200]}"
    return done.stdout, None


def cpu_model() -> str:
    """The host processor's name (``/proc/cpuinfo``, else :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def library_versions() -> dict[str, dict[str, str | None]]:
    """``{group: {distribution: version or None}}`` for :data:`LIBRARIES`."""
    out: dict[str, dict[str, str | None]] = {}
    for group, names in LIBRARIES.items():
        out[group] = {}
        for name in names:
            try:
                out[group][name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                out[group][name] = None
    return out


def distributed_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The launcher variables that are set, sorted; secret-named ones show ``***``."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name in sorted(env):
        if name in DIST_VARIABLES or name.startswith(DIST_PREFIXES):
            out[name] = MASK if is_secret_name(name) else mask_secrets(env[name])
    return out


def _clean(value: Any) -> str:
    return mask_secrets(str(value).strip())


def _nvidia_smi(exe: str) -> dict[str, Any]:
    query = f"--query-gpu={','.join(_NVIDIA_FIELDS)}"
    out, why = run_tool([exe, query, "--format=csv,noheader,nounits"])
    if out is None:
        return {"tool": "nvidia-smi", "error": why}
    gpus = []
    for line in out.splitlines():
        if line.strip():
            values = [_clean(v) for v in line.split(", ")]
            gpus.append(
                dict(zip((f.replace(".", "_") for f in _NVIDIA_FIELDS), values, strict=False))
            )
    for gpu in gpus:
        if "memory_total" in gpu:
            gpu["memory_total_mib"] = gpu.pop("memory_total")
    return {"tool": "nvidia-smi", "gpus": gpus}


def _rocm_smi(exe: str) -> dict[str, Any]:
    out, why = run_tool([exe, "--showproductname", "--showdriverversion", "--json"])
    if out is None:
        return {"tool": "rocm-smi", "error": why}
    try:
        data = json.loads(out)
    except ValueError:
        return {"tool": "rocm-smi", "error": "rocm-smi printed no JSON"}
    gpus, system = [], {}
    for key, fields in data.items() if isinstance(data, dict) else ():
        if not isinstance(fields, dict):
            continue
        match = re.fullmatch(r"card(\d+)", str(key))
        clean = {str(k).strip(): _clean(v) for k, v in fields.items()}
        if match:
            gpus.append({"index": match.group(1), **clean})
        elif key == "system":
            system = clean
    return {"tool": "rocm-smi", "gpus": gpus, "system": system}


def _amd_smi(exe: str) -> dict[str, Any]:
    out, why = run_tool([exe, "static", "--asic", "--json"])
    if out is None:
        return {"tool": "amd-smi", "error": why}
    try:
        data = json.loads(out)
    except ValueError:
        return {"tool": "amd-smi", "error": "amd-smi printed no JSON"}
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    gpus = []
    for item in data if isinstance(data, list) else ():
        if isinstance(item, dict):
            raw = item.get("asic")
            asic: dict[str, Any] = raw if isinstance(raw, dict) else {}
            gpus.append(
                {"index": _clean(item.get("gpu", "")), **{k: _clean(v) for k, v in asic.items()}}
            )
    return {"tool": "amd-smi", "gpus": gpus}


def gpu_tools() -> list[dict[str, Any]]:
    """What ``nvidia-smi`` and ``rocm-smi`` (else ``amd-smi``) on ``PATH`` report."""
    found = []
    if exe := shutil.which("nvidia-smi"):
        found.append(_nvidia_smi(exe))
    if exe := shutil.which("rocm-smi"):
        found.append(_rocm_smi(exe))
    elif exe := shutil.which("amd-smi"):
        found.append(_amd_smi(exe))
    return found
