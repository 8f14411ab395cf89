"""``rocm-smi`` for :class:`~obsbus.callbacks.RocmSmiMonitor`: parse its output, run it off-thread.

Formats, as ROCm's ``rocm_smi.py`` prints them (``printLog``, ``formatJson``):

* text: one line per value, ``GPU[0]\\t\\t: VRAM Total Memory (B): 68702699520``
  (older releases print ``GPU[0] \\t\\t: ...``), between ``=====`` spacer lines;
* ``--json``: one object, ``{"card0": {"VRAM Total Memory (B)": "68702699520", ...}}``,
  every value a string.

The keys read are ``VRAM Total Memory (B)``, ``VRAM Total Used Memory (B)``
(``--showmeminfo vram``) and ``GPU use (%)`` (``--showuse``; very old
releases print ``Current GPU use: 37%``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from obsbus.callbacks._gpu_probes import visible_to_physical

__all__ = ["GpuReading", "Probe", "parse_rocm_smi", "physical_gpu_index"]

TOTAL_KEY = "VRAM Total Memory (B)"
USED_KEY = "VRAM Total Used Memory (B)"
USE_KEYS = ("GPU use (%)", "Current GPU use")

_GPU_LINE = re.compile(r"^\s*GPU\[(\d+)\]\s*:\s*(.*?)\s*$")
_CARD_KEY = re.compile(r"^card(\d+)$")
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$")


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What ``rocm-smi`` reported for one GPU; ``None`` where it reported nothing usable."""

    total_vram_bytes: int | None = None
    used_vram_bytes: int | None = None
    gpu_use_pct: float | None = None


def _number(raw: Any) -> float | None:
    match = _NUMBER.match(str(raw)) if raw is not None else None
    return float(match.group(1)) if match else None


def _reading(fields: Mapping[str, Any]) -> GpuReading:
    total = _number(fields.get(TOTAL_KEY))
    used = _number(fields.get(USED_KEY))
    use = next((v for v in (_number(fields.get(k)) for k in USE_KEYS) if v is not None), None)
    return GpuReading(
        total_vram_bytes=None if total is None else int(total),
        used_vram_bytes=None if used is None else int(used),
        gpu_use_pct=use,
    )


def _text_fields(output: str) -> dict[int, dict[str, str]]:
    fields: dict[int, dict[str, str]] = {}
    for line in output.splitlines():
        match = _GPU_LINE.match(line)
        if match is None:
            continue
        name, sep, value = match.group(2).rpartition(": ")
        if sep:  # "GPU use Unsupported" and other value-less lines have none
            fields.setdefault(int(match.group(1)), {})[name.strip()] = value.strip()
    return fields


def _json_fields(output: str) -> dict[int, dict[str, str]]:
    start = output.find("{")
    if start < 0:
        return {}
    try:
        data, _ = json.JSONDecoder().raw_decode(output[start:])
    except ValueError:
        return {}
    fields: dict[int, dict[str, str]] = {}
    if isinstance(data, dict):
        for key, values in data.items():
            match = _CARD_KEY.match(str(key))
            if match and isinstance(values, dict):
                fields[int(match.group(1))] = {str(k): str(v) for k, v in values.items()}
    return fields


def parse_rocm_smi(output: str) -> dict[int, GpuReading]:
    """Parse ``rocm-smi --showmeminfo vram [--showuse] [--json]`` output, by GPU index.

    Text and JSON are told apart by their shape; GPUs without any value read
    are left out, so an empty dict means nothing usable was printed.

    Example:
        >>> out = '{"card0": {"GPU use (%)": "37", "VRAM Total Memory (B)": "68702699520", '
        >>> out += '"VRAM Total Used Memory (B)": "10526720"}}'
        >>> parse_rocm_smi(out)
        {0: GpuReading(total_vram_bytes=68702699520, used_vram_bytes=10526720, gpu_use_pct=37.0)}
        >>> parse_rocm_smi("GPU[1]\\t\\t: VRAM Total Used Memory (B): 5")[1].used_vram_bytes
        5
    """
    looks_like_json = output.lstrip().startswith("{")
    fields = _json_fields(output) if looks_like_json else _text_fields(output)
    if not fields and not looks_like_json:
        fields = _json_fields(output)  # JSON behind a stray line on stdout
    readings = {index: _reading(values) for index, values in sorted(fields.items())}
    return {index: r for index, r in readings.items() if r != GpuReading()}


def physical_gpu_index(visible_index: int, environ: Mapping[str, str]) -> int | None:
    """The ``rocm-smi`` number of the GPU a process sees as ``visible_index``.

    ``rocm-smi`` numbers every GPU on the node and ignores the visibility
    variables; a HIP program sees only what they leave. HIP's index goes
    through ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``, which HIP
    honours too) into the devices ``ROCR_VISIBLE_DEVICES`` leaves, then into
    the node's list. ``None`` when a list holds something other than
    integers (UUIDs) or is too short: the caller then falls back.

    Example:
        >>> physical_gpu_index(1, {"HIP_VISIBLE_DEVICES": "4,5,6,7"})
        5
        >>> physical_gpu_index(0, {"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"})
        3
        >>> physical_gpu_index(0, {"HIP_VISIBLE_DEVICES": "GPU-3b1c"}) is None
        True
    """
    chain = [["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"], ["ROCR_VISIBLE_DEVICES"]]
    return visible_to_physical(visible_index, environ, chain)


def _kill(proc: subprocess.Popen[str]) -> None:
    """Kill the process and anything it started (it leads its own session)."""
    with contextlib.suppress(OSError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover - rocm-smi is Linux-only
            proc.kill()


class Probe:
    """One run of a command on a daemon thread, killed when ``timeout`` seconds have passed.

    The training thread starts it and later calls :meth:`wait`, which returns
    at the deadline at the latest; the thread kills the command (its whole
    process group) at the same deadline, so nothing outlives it by more than
    the time a kill takes.

    Attributes:
        stdout, stderr, returncode: what the command gave, once :meth:`wait` is true.
        error: ``"missing"`` (no such executable), ``"timeout"``, or a message
            when it could not run; ``None`` when it ran to its end.
    """

    __slots__ = (
        "_done",
        "_lock",
        "_proc",
        "_thread",
        "command",
        "deadline",
        "error",
        "returncode",
        "stderr",
        "stdout",
        "timeout",
    )

    def __init__(self, command: Sequence[str], timeout: float) -> None:
        self.command = list(command)
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.stdout = ""
        self.stderr = ""
        self.returncode: int | None = None
        self.error: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="obsbus-rocm-smi", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._lock:
                if self.error is not None:  # cancelled before it started
                    return
                self._proc = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    errors="replace",
                    start_new_session=True,
                )
            proc = self._proc
            try:
                remaining = max(self.deadline - time.monotonic(), 0.0)
                self.stdout, self.stderr = proc.communicate(timeout=remaining)
                self.returncode = proc.returncode
            except subprocess.TimeoutExpired:
                self.error = "timeout"
                _kill(proc)
                with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
                    proc.communicate(timeout=1.0)  # reap it; its output is discarded
        except FileNotFoundError:
            self.error = "missing"
        except Exception as exc:  # an OSError from exec, a decoding failure...
            self.error = f"could not run it: {exc!r}"
        finally:
            self._done.set()

    def wait(self) -> bool:
        """Wait until the command ended or its deadline passed; whether it ended in time."""
        ended = self._done.wait(max(self.deadline - time.monotonic(), 0.0))
        return ended and self.error != "timeout"

    def cancel(self) -> None:
        """Kill the command now if it is still running (at close, or after a timeout)."""
        with self._lock:
            if self._done.is_set():
                return
            if self._proc is None:
                self.error = "cancelled"
                return
            if self.error is None:
                self.error = "timeout"
            _kill(self._proc)
