"""Primus's ROCm memory probe: ``rocm-smi`` at chosen batches, off the training thread."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import warnings
from collections import Counter
from collections.abc import Iterable
from typing import Any

from typing_extensions import override

from obsbus import dist
from obsbus._check import (
    check_bool,
    check_iterable_of,
    check_optional_int,
    check_seconds,
    is_int,
    type_as_value_error,
)
from obsbus.callback import Callback
from obsbus.callbacks._rocm_smi import GpuReading, Probe, parse_rocm_smi, physical_gpu_index
from obsbus.callbacks.memory_monitor import GB
from obsbus.errors import ObsbusWarning
from obsbus.interval import LogInterval
from obsbus.logger import Logger
from obsbus.state import State
from obsbus.time import TimeLike

__all__ = ["RocmSmiMonitor"]

log = logging.getLogger("obsbus")

_MISSING = -1.0  # a rank with no reading, in the cross-rank table


def _check_batches(value: Any) -> frozenset[int]:
    """``at_batches`` as a set; a count below 1 (or a bool) is a wrong value, as it always was."""
    accepted = "a list of batch numbers >= 1, e.g. [1, 2] (Primus's default), or [] for none"
    batches = check_iterable_of("RocmSmiMonitor", "at_batches", value, object, accepted=accepted)
    for batch in batches:
        if not is_int(batch) or batch < 1:
            raise ValueError(
                f"RocmSmiMonitor at_batches must be {accepted}; got {value!r} "
                f"(bad entry {batch!r})."
            )
    return frozenset(batches)


class RocmSmiMonitor(Callback):
    """Runs ``rocm-smi`` at chosen batches (or every interval) and logs VRAM use, as Primus does.

    Primus's ``use_rocm_mem_info_iters`` (default ``[1, 2]``) becomes
    ``at_batches``; its ``use_rocm_mem_info: true`` (every log step) becomes
    ``log_interval``. The command is ``rocm-smi --showmeminfo vram --showuse
    --json``; text output (without ``--json``, or from an old release) is
    parsed too.

    The step never waits on ``rocm-smi`` past ``timeout``: at ``batch_end``
    of a due batch the command starts on a daemon thread; it is read at the
    next ``batch_end`` (or ``fit_end``), where the training thread waits at
    most what is left of ``timeout``, which is nothing when the command ended
    during the step (it takes 0.1-1 s). A command still running at the
    deadline is killed with its process group and reported once. The
    metrics are logged at ``step`` = the due batch. A missing ``rocm-smi``
    is reported once (an :class:`~obsbus.ObsbusWarning`) and nothing is
    logged; a failing one (exit status, unreadable output) likewise.

    Which GPU is this rank's: ``device_index`` when given (``rocm-smi``'s own
    numbering); otherwise the GPU this process uses (``torch.cuda.current_device()``
    when CUDA/HIP is initialized, else ``LOCAL_RANK``), mapped through
    ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``) and
    ``ROCR_VISIBLE_DEVICES`` to ``rocm-smi``'s numbering, which ignores
    those variables. When they hold UUIDs the unmapped index is used, with a
    warning; pass ``device_index`` then.

    Keys (GB = 1e9 bytes, as in :class:`~obsbus.callbacks.MemoryMonitor`; Primus
    prints GiB; the units ``GB`` and ``%`` are declared, the rank has none):

    - ``memory/rocm/used_vram_gb``: GB of VRAM in use on this rank's GPU, by
      every process on it (``VRAM Total Used Memory (B)``).
    - ``memory/rocm/total_vram_gb``: GB of VRAM on this rank's GPU.
    - ``memory/rocm/free_vram_gb``: total minus used, GB.
    - ``memory/rocm/used_vram_pct``: used / total, percent.
    - ``utilization/rocm/gpu_use_pct``: ``GPU use (%)`` of this rank's GPU,
      percent; only with ``gpu_use=True`` and when the GPU reports it.
    - ``memory/rocm/max_used_vram_pct``: the highest ``used_vram_pct`` over
      ranks (Primus's "max mem usage" ratio), percent.
    - ``memory/rocm/max_used_vram_gb``: GB used on that rank's GPU.
    - ``memory/rocm/max_rank``: that rank (the lowest one on ties).

    The ``max_*`` keys need ``reduce_across_ranks=True`` (the default): one
    all_reduce of a ``[world_size, 3]`` table at each probe, on every rank,
    so every rank must run the monitor with the same schedule.

    Args:
        at_batches: the batches after which to probe (default ``[1, 2]``;
            ``[]`` never probes). Not together with ``log_interval``.
        log_interval: probe every interval instead (``"10ba"``, ``"1ep"``; a
            bare int counts batches).
        timeout: seconds ``rocm-smi`` may run before it is killed.
        executable: the command, looked up on ``PATH``, or a path to it.
        json_output: pass ``--json`` (both formats parse).
        gpu_use: also ask for ``--showuse`` and log ``gpu_use_pct``.
        device_index: this rank's GPU in ``rocm-smi``'s numbering.
        reduce_across_ranks: log the ``max_*`` keys (one collective per probe).

    Example:
        >>> monitor = RocmSmiMonitor(at_batches=[1, 2], timeout=5.0)
        >>> monitor.command
        ['rocm-smi', '--showmeminfo', 'vram', '--showuse', '--json']
        >>> RocmSmiMonitor(log_interval="50ba").at_batches is None
        True
        >>> RocmSmiMonitor(at_batches=[0])
        Traceback (most recent call last):
        ...
        ValueError: RocmSmiMonitor at_batches must be a list of batch numbers >= 1, ...
    """

    def __init__(
        self,
        at_batches: Iterable[int] | None = None,
        log_interval: TimeLike | None = None,
        *,
        timeout: float = 5.0,
        executable: str = "rocm-smi",
        json_output: bool = True,
        gpu_use: bool = True,
        device_index: int | None = None,
        reduce_across_ranks: bool = True,
    ) -> None:
        if at_batches is not None and log_interval is not None:
            raise ValueError(
                f"RocmSmiMonitor takes at_batches or log_interval, not both; got "
                f"at_batches={at_batches!r}, log_interval={log_interval!r}. To fix, pass "
                "at_batches=[1, 2] for the first batches only, or log_interval='10ba' "
                "to probe at every interval."
            )
        self.log_interval = (
            None
            if log_interval is None
            else LogInterval(log_interval, "RocmSmiMonitor log_interval")
        )
        self.at_batches = (
            None
            if log_interval is not None
            else _check_batches((1, 2) if at_batches is None else at_batches)
        )
        with type_as_value_error():  # a wrong type here has always been a ValueError
            timeout = check_seconds("RocmSmiMonitor", "timeout", timeout)
            device_index = check_optional_int("RocmSmiMonitor", "device_index", device_index)
        if not isinstance(executable, str) or not executable.strip():
            raise ValueError(
                f"RocmSmiMonitor executable must be a command name or path such as 'rocm-smi' "
                f"or '/opt/rocm/bin/rocm-smi', got {executable!r}."
            )
        self.json_output = check_bool("RocmSmiMonitor", "json_output", json_output)
        self.gpu_use = check_bool("RocmSmiMonitor", "gpu_use", gpu_use)
        self.reduce_across_ranks = check_bool(
            "RocmSmiMonitor", "reduce_across_ranks", reduce_across_ranks
        )
        self.timeout = timeout
        self.executable = executable
        self.device_index = device_index
        #: How often each kind of failure happened: missing, timeout, error, exit, parse, gpu, map.
        self.failures: Counter[str] = Counter()
        self._path: str | None = None  # "" once looked up and not found
        self._pending: tuple[int, Probe | None, int] | None = None
        self._summarized: dict[str, int] = {}

    @property
    def command(self) -> list[str]:
        """The command line run at each probe."""
        cmd = [self.executable, "--showmeminfo", "vram"]
        if self.gpu_use:
            cmd.append("--showuse")
        if self.json_output:
            cmd.append("--json")
        return cmd

    def _warn(self, kind: str, message: str) -> None:
        self.failures[kind] += 1
        if self.failures[kind] == 1:
            warnings.warn(f"RocmSmiMonitor: {message}", ObsbusWarning, stacklevel=3)

    def _due(self, state: State) -> bool:
        if self.at_batches is not None:
            return state.timestamp._batch in self.at_batches
        return self.log_interval is not None and self.log_interval.at_batch_end(state)

    def _gpu_index(self) -> int:
        if self.device_index is not None:
            return self.device_index
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            visible = int(torch.cuda.current_device())
        else:
            visible = dist.get_local_rank()
        physical = physical_gpu_index(visible, os.environ)
        if physical is None:
            self._warn(
                "map",
                f"could not map this process's GPU {visible} through HIP_VISIBLE_DEVICES / "
                "CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES to rocm-smi's numbering; using "
                f"GPU[{visible}]. To fix, pass device_index=<the GPU number rocm-smi prints>.",
            )
            return visible
        return physical

    def _start(self, state: State, logger: Logger) -> None:
        if self._pending is not None:
            self._collect(logger)
        if self._path is None:
            self._path = shutil.which(self.executable) or ""
            if not self._path:
                self._warn(
                    "missing",
                    f"{self.executable!r} was not found on PATH, so no ROCm memory is logged. "
                    "To fix, install ROCm (rocm-smi lives in /opt/rocm/bin) or pass "
                    "executable='/path/to/rocm-smi'.",
                )
        probe = None
        if self._path:
            probe = Probe([self._path, *self.command[1:]], self.timeout)
        self._pending = (state.timestamp._batch, probe, self._gpu_index())

    def _read(self, step: int, probe: Probe | None, gpu: int) -> GpuReading | None:
        if probe is None:
            return None
        if not probe.wait():
            probe.cancel()
            self._warn(
                "timeout",
                f"rocm-smi did not finish within timeout={self.timeout:g}s; it was killed "
                f"and batch {step} has no ROCm reading. The step waited at most the timeout. "
                "To fix, raise timeout; a hung rocm-smi often means a hung GPU or driver.",
            )
            return None
        if probe.error is not None:
            kind = "missing" if probe.error == "missing" else "error"
            self._warn(kind, f"rocm-smi ({probe.command[0]!r}) failed: {probe.error}.")
            return None
        if probe.returncode != 0:
            detail = (probe.stderr.strip() or probe.stdout.strip())[-300:]
            self._warn("exit", f"rocm-smi exited with status {probe.returncode}: {detail!r}.")
            return None
        readings = parse_rocm_smi(probe.stdout)
        if not readings:
            self._warn(
                "parse",
                f"could not read VRAM from rocm-smi's output {probe.stdout[:300]!r}; expected "
                "'VRAM Total Memory (B)' and 'VRAM Total Used Memory (B)' per GPU.",
            )
            return None
        if gpu not in readings:
            self._warn(
                "gpu",
                f"rocm-smi reported GPUs {sorted(readings)} but not GPU[{gpu}], this rank's. "
                "To fix, pass device_index=<the GPU number rocm-smi prints>.",
            )
            return None
        return readings[gpu]

    def _collect(self, logger: Logger) -> None:
        assert self._pending is not None
        step, probe, gpu = self._pending
        self._pending = None
        reading = self._read(step, probe, gpu)
        used = None if reading is None else reading.used_vram_bytes
        total = None if reading is None else reading.total_vram_bytes
        metrics: dict[str, Any] = {}
        row = [_MISSING, _MISSING, _MISSING]
        if used is not None and total is not None and total > 0:
            pct = 100.0 * used / total
            row = [float(used), float(total), pct]
            metrics["memory/rocm/used_vram_gb"] = used / GB
            metrics["memory/rocm/total_vram_gb"] = total / GB
            metrics["memory/rocm/free_vram_gb"] = (total - used) / GB
            metrics["memory/rocm/used_vram_pct"] = pct
        if self.gpu_use and reading is not None and reading.gpu_use_pct is not None:
            metrics["utilization/rocm/gpu_use_pct"] = reading.gpu_use_pct
        if self.reduce_across_ranks:
            # A log step: one host transfer of the table is allowed here.
            table = dist.gather_rows(row).tolist()
            ranks = [r for r, values in enumerate(table) if values[2] >= 0]
            if ranks:
                top = max(ranks, key=lambda r: table[r][2])
                metrics["memory/rocm/max_used_vram_pct"] = table[top][2]
                metrics["memory/rocm/max_used_vram_gb"] = table[top][0] / GB
                metrics["memory/rocm/max_rank"] = top
        if metrics:
            logger.log_metrics(metrics, step=step)

    @override
    def metric_units(self) -> dict[str, str]:
        return {"memory/rocm/*_gb": "GB", "memory/rocm/*_pct": "%", "utilization/rocm/*_pct": "%"}

    @override
    def batch_end(self, state: State, logger: Logger) -> None:
        if self._pending is not None:
            self._collect(logger)
        if self._due(state):
            self._start(state, logger)

    @override
    def epoch_end(self, state: State, logger: Logger) -> None:
        if self.log_interval is not None and self.log_interval.at_epoch_end(state):
            self._start(state, logger)

    @override
    def fit_end(self, state: State, logger: Logger) -> None:
        if self._pending is not None:
            self._collect(logger)

    @override
    def close(self, state: State, logger: Logger) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and pending[1] is not None:
            pending[1].cancel()  # the run ended early: no collective, just stop the command
        repeated = {kind: n for kind, n in self.failures.items() if n > 1}
        if repeated and repeated != self._summarized:
            self._summarized = repeated
            log.warning(
                "obsbus: RocmSmiMonitor: failures repeated after their first warning: %s",
                ", ".join(f"{kind} x{n}" for kind, n in sorted(repeated.items())),
            )
