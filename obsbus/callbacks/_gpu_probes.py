"""GPU probes for :class:`~obsbus.callbacks.SystemMetricsMonitor`: NVML and AMD SMI.

Both libraries fail in surprising ways on a machine without their GPU or
driver: ``import pynvml`` works and ``nvmlInit()`` raises
``NVMLError_LibraryNotFound``; ``import amdsmi`` *prints* that
``libamd_smi.so`` is missing and raises ``KeyError``. So imports go through
:func:`import_quietly` (prints captured, any error returned, never raised),
and the monitor treats every call into a probe as something that may raise
anything. What a GPU merely does not support (power on some boards,
utilization under MIG, the edge sensor of an MI300) is not a failure: the
probe drops that field and keeps the others.

A probe is any object with this shape (the monitor accepts one as ``gpu=``):

- ``name``: a short name for messages.
- ``open() -> int``: start the library; the number of GPUs it sees.
- ``device_index(visible: int) -> int | None``: the probe's number for the
  GPU this process calls ``cuda:{visible}``; ``None`` when it can't tell.
- ``read(index) -> Mapping[str, float]``: some of :data:`FIELDS`.
- ``close()``: stop the library (called once per successful ``open``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, Protocol

from obsbus._check import is_number

__all__ = [
    "FIELDS",
    "AmdSmiProbe",
    "GpuProbe",
    "Note",
    "NvmlProbe",
    "describe",
    "import_quietly",
    "installed_probes",
    "visible_to_physical",
]

GB = 1e9
Note = Callable[[str, str], None]

#: What a probe reads, with units: the monitor logs each as ``system/gpu/{field}``.
FIELDS = {
    "utilization_percent": "percent of the last sample period a kernel ran (0-100)",
    "memory_used_gb": "GB (1e9 bytes) of device memory in use, by every process",
    "memory_percent": "device memory in use, percent of total",
    "temperature_c": "degrees Celsius (NVML's GPU sensor; AMD: edge, else hotspot)",
    "power_w": "watts drawn by the board now (AMD: socket power)",
}


class GpuProbe(Protocol):
    """The shape of a GPU probe (see the module docstring)."""

    name: str

    def open(self) -> int: ...

    def device_index(self, visible: int) -> int | None: ...

    def read(self, index: int) -> Mapping[str, float]: ...

    def close(self) -> None: ...


def visible_to_physical(
    visible: int, environ: Mapping[str, str], chain: Sequence[Sequence[str]]
) -> int | None:
    """Map a process's GPU index through visibility variables to the node's numbering.

    ``chain`` lists, outermost first, groups of variables (the first one set
    in a group applies). ``None`` when a list holds something other than
    integers (UUIDs, MIG ids) or is too short.

    Example:
        >>> visible_to_physical(1, {"CUDA_VISIBLE_DEVICES": "4,5"}, [["CUDA_VISIBLE_DEVICES"]])
        5
        >>> env = {"HIP_VISIBLE_DEVICES": "1", "ROCR_VISIBLE_DEVICES": "2,3"}
        >>> visible_to_physical(0, env, [["HIP_VISIBLE_DEVICES"], ["ROCR_VISIBLE_DEVICES"]])
        3
        >>> visible_to_physical(0, {"CUDA_VISIBLE_DEVICES": "GPU-3b1c"}, [["CUDA_VISIBLE_DEVICES"]])
    """
    index = visible
    for names in chain:
        raw = next((environ[name] for name in names if name in environ), None)
        if raw is None:
            continue
        ids = [part.strip() for part in raw.split(",") if part.strip()]
        if not all(part.isdigit() for part in ids) or index >= len(ids):
            return None
        index = int(ids[index])
    return index


def import_quietly(name: str) -> tuple[ModuleType | None, str | None]:
    """Import ``name`` with its prints captured: ``(module, None)`` or ``(None, why)``.

    Example:
        >>> module, why = import_quietly("obsbus_no_such_module")
        >>> module, why.split(":")[0]
        (None, 'import obsbus_no_such_module failed')
    """
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            module = importlib.import_module(name)
    except (Exception, SystemExit) as exc:  # amdsmi raises KeyError; be broad
        printed = " ".join(said.getvalue().split())
        detail = f" (it printed: {printed[:300]!r})" if printed else ""
        return None, f"import {name} failed: {exc!r}{detail}"
    return module, None


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def describe(exc: BaseException) -> str:
    """``Type: message``, readable where ``repr`` is not (``NVMLError_LibraryNotFound(12)``).

    Example:
        >>> describe(KeyError("libamd_smi.so"))
        "KeyError: 'libamd_smi.so'"
    """
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def installed_probes() -> list[tuple[str, Callable[[], GpuProbe]]]:
    """``(name, factory)`` for each GPU library installed, NVML first; nothing is imported."""
    found: list[tuple[str, Callable[[], GpuProbe]]] = []
    if _installed("pynvml"):
        found.append((NvmlProbe.name, NvmlProbe.load))
    if _installed("amdsmi"):
        found.append((AmdSmiProbe.name, AmdSmiProbe.load))
    return found


class _FieldProbe:
    """Reads fields one by one; a field the GPU does not support is dropped for good.

    A subclass names its library (``library``, imported by :meth:`load`) and the
    function that stops it (``shutdown``), and reads each group of fields
    through :meth:`_read_groups`.
    """

    name = "gpu"
    library = ""
    shutdown = ""

    def __init__(self, module: Any) -> None:
        self._lib = module
        self._open = False
        self.unsupported: set[str] = set()

    @classmethod
    def load(cls) -> GpuProbe:
        module, why = import_quietly(cls.library)
        if module is None:
            raise RuntimeError(why)
        return cls(module)  # type: ignore[return-value]  # a subclass has the whole shape

    def _not_supported(self, exc: Exception) -> bool:
        raise NotImplementedError

    def _read_groups(self, **readers: Callable[[], None]) -> None:
        """Call each group's reader, except those the GPU does not support."""
        for group, read in readers.items():
            if group in self.unsupported:
                continue
            try:
                read()
            except Exception as exc:
                if not self._not_supported(exc):
                    raise
                self.unsupported.add(group)

    def close(self) -> None:
        if self._open:
            self._open = False
            getattr(self._lib, self.shutdown)()


class NvmlProbe(_FieldProbe):
    """NVIDIA GPUs through NVML (``pip install nvidia-ml-py``, imported as ``pynvml``).

    NVML numbers GPUs in PCI order and ignores ``CUDA_VISIBLE_DEVICES``, which
    :meth:`device_index` applies. (CUDA's default order is fastest-first; on a
    node of identical GPUs that is PCI order too.)
    """

    name = "nvidia-ml-py"
    library = "pynvml"
    shutdown = "nvmlShutdown"

    def open(self) -> int:
        self._lib.nvmlInit()
        self._open = True
        self._handles: dict[int, Any] = {}
        return int(self._lib.nvmlDeviceGetCount())

    def device_index(self, visible: int) -> int | None:
        return visible_to_physical(visible, os.environ, [["CUDA_VISIBLE_DEVICES"]])

    def _not_supported(self, exc: Exception) -> bool:
        nvml = self._lib
        codes = (
            getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
            getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
        )
        error = getattr(nvml, "NVMLError", None)
        return (
            isinstance(error, type)
            and isinstance(exc, error)
            and getattr(exc, "value", None) in codes
        )

    def read(self, index: int) -> dict[str, float]:
        nvml = self._lib
        handle = self._handles.get(index)
        if handle is None:
            handle = self._handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
        out: dict[str, float] = {}

        def utilization() -> None:
            out["utilization_percent"] = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)

        def memory() -> None:
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            out["memory_used_gb"] = info.used / GB
            if info.total:
                out["memory_percent"] = 100.0 * info.used / info.total

        def temperature() -> None:
            sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
            out["temperature_c"] = float(nvml.nvmlDeviceGetTemperature(handle, sensor))

        def power() -> None:
            out["power_w"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts

        self._read_groups(
            utilization=utilization, memory=memory, temperature=temperature, power=power
        )
        return out


def _number(value: Any) -> float | None:
    """A reading as a float; ``None`` for amdsmi's ``"N/A"`` and its 0xFFFF sentinels."""
    if not is_number(value) or value == 0xFFFF:
        return None
    return float(value)


class AmdSmiProbe(_FieldProbe):
    """AMD GPUs through AMD SMI (the ``amdsmi`` package, with ROCm's ``libamd_smi.so``).

    AMD SMI numbers GPUs in PCI order and ignores the visibility variables;
    :meth:`device_index` applies ``HIP_VISIBLE_DEVICES`` (or
    ``CUDA_VISIBLE_DEVICES``), then ``ROCR_VISIBLE_DEVICES``.
    """

    name = "amdsmi"
    library = "amdsmi"
    shutdown = "amdsmi_shut_down"

    def open(self) -> int:
        amd = self._lib
        amd.amdsmi_init(amd.AmdSmiInitFlags.INIT_AMD_GPUS)
        self._open = True
        self._handles = list(amd.amdsmi_get_processor_handles())
        return len(self._handles)

    def device_index(self, visible: int) -> int | None:
        return visible_to_physical(
            visible,
            os.environ,
            [["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"], ["ROCR_VISIBLE_DEVICES"]],
        )

    def _not_supported(self, exc: Exception) -> bool:
        amd = self._lib
        error = getattr(amd, "AmdSmiLibraryException", None)
        if not (isinstance(error, type) and isinstance(exc, error)):
            return False
        wrapper = getattr(amd, "amdsmi_wrapper", None)
        codes = (
            getattr(wrapper, "AMDSMI_STATUS_NOT_SUPPORTED", 2),
            getattr(wrapper, "AMDSMI_STATUS_NOT_YET_IMPLEMENTED", 3),
        )
        get_code = getattr(exc, "get_error_code", None)
        return callable(get_code) and get_code() in codes

    def read(self, index: int) -> dict[str, float]:
        amd = self._lib
        handle = self._handles[index]
        out: dict[str, float] = {}

        def utilization() -> None:
            value = _number(amd.amdsmi_get_gpu_activity(handle).get("gfx_activity"))
            if value is not None:
                out["utilization_percent"] = value

        def memory() -> None:
            vram = amd.AmdSmiMemoryType.VRAM
            used = amd.amdsmi_get_gpu_memory_usage(handle, vram)  # bytes
            total = amd.amdsmi_get_gpu_memory_total(handle, vram)
            out["memory_used_gb"] = used / GB
            if total:
                out["memory_percent"] = 100.0 * used / total

        def temperature() -> None:
            kinds, current = amd.AmdSmiTemperatureType, amd.AmdSmiTemperatureMetric.CURRENT
            try:
                value = amd.amdsmi_get_temp_metric(handle, kinds.EDGE, current)
            except Exception as exc:  # MI300 has no edge sensor: use the hotspot
                if not self._not_supported(exc):
                    raise
                value = amd.amdsmi_get_temp_metric(handle, kinds.HOTSPOT, current)
            if _number(value) is not None:
                out["temperature_c"] = float(value)

        def power() -> None:
            info = amd.amdsmi_get_power_info(handle)
            for key in ("current_socket_power", "average_socket_power", "socket_power"):
                value = _number(info.get(key))
                if value is not None:
                    out["power_w"] = value  # watts
                    return

        self._read_groups(
            utilization=utilization, memory=memory, temperature=temperature, power=power
        )
        return out
