"""Peak dense FLOP/s of current data-center GPUs, for model FLOPs utilization (MFU).

Every number is the vendor's published peak for the dense case (no 2:4
structured sparsity), in TFLOP/s, for the whole part as sold. NVIDIA's
datasheets print the Tensor Core figures *with* sparsity (marked ``*``); the
dense figure is half of that. AMD's datasheets print dense and sparse
separately. ``fp32`` is the FP32 (non-tensor) peak on NVIDIA and the FP32
matrix peak on AMD: what a float32 matmul runs at when TF32 is off.

A torch device is matched to a part by a pattern on
``torch.cuda.get_device_name()`` (ROCm reports through the same call). Some
parts show up as several torch devices: an MI250X is two GCDs, each its own
device, and MIG slices or MI300X compute partitions show part of the chip.
The peak is therefore scaled by the device's multiprocessor count (SMs or
CUs, ``torch.cuda.get_device_properties(i).multi_processor_count``) over the
part's; a device that reports more than the part never scales up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["PARTS", "PRECISIONS", "Part", "find_part", "peak_flops", "precision_of"]

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
"""The precisions the table knows, as accepted by ``SpeedMonitor(precision=...)``."""

_A100 = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_B200 = "https://www.nvidia.com/en-us/data-center/hgx/"
_AMD = "https://www.amd.com/en/products/accelerators/instinct/"


@dataclass(frozen=True)
class Part:
    """One accelerator: how to recognise it, and its dense peak TFLOP/s per precision."""

    name: str
    pattern: str
    multiprocessors: int
    tflops: MappingProxyType[str, float]
    source: str
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A word boundary on each side: "A100" must not match "RTX A1000", nor "B200" "GB200".
        object.__setattr__(self, "_regex", re.compile(rf"(?<![A-Za-z0-9]){self.pattern}(?![0-9])"))

    def matches(self, device_name: str) -> bool:
        return self._regex.search(device_name) is not None


def _part(name: str, pattern: str, units: int, source: str, **tflops: float) -> Part:
    return Part(name, pattern, units, MappingProxyType(dict(tflops)), source)


# Most specific first: the first part whose pattern matches the device name wins. In the
# comments, X* is a with-sparsity figure as the datasheet prints it; the table holds X/2.
# fmt: off
PARTS: tuple[Part, ...] = (
    # A100 SXM4 and PCIe, 40 and 80 GB, have the same peaks: FP32 19.5; TF32 156*,
    # BF16/FP16 312* (the datasheet prints 312*/624* with sparsity); no FP8.
    _part("NVIDIA A100", "A100", 108, _A100,
          fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0),
    # H100 NVL, per GPU: FP32 60; TF32 835*, BF16/FP16 1,671*, FP8 3,341* (*sparse)
    _part("NVIDIA H100 NVL", r"H100\s*NVL", 132, _H100,
          fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5),
    # H100 PCIe: FP32 51; TF32 756*, BF16/FP16 1,513*, FP8 3,026*
    _part("NVIDIA H100 PCIe", r"H100\s*PCIe", 114, _H100,
          fp32=51.0, tf32=378.0, fp16=756.5, bf16=756.5, fp8=1513.0),
    # H100 SXM ("NVIDIA H100 80GB HBM3"): FP32 67; TF32 989*, BF16/FP16 1,979*, FP8 3,958*
    _part("NVIDIA H100 SXM", "H100", 132, _H100,
          fp32=67.0, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979.0),
    # H200 NVL: as H100 NVL (FP32 60; TF32 835*, BF16/FP16 1,671*, FP8 3,341*)
    _part("NVIDIA H200 NVL", r"H200\s*NVL", 132, _H200,
          fp32=60.0, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5),
    # H200 SXM ("NVIDIA H200"): as H100 SXM (FP32 67; TF32 989*, BF16/FP16 1,979*, FP8 3,958*)
    _part("NVIDIA H200 SXM", "H200", 132, _H200,
          fp32=67.0, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979.0),
    # HGX B200, per GPU: FP32 75; TF32 2.2 PF*, BF16/FP16 4.5 PF*, FP8 9 PF*
    _part("NVIDIA B200", "B200", 148, _B200,
          fp32=75.0, tf32=1100.0, fp16=2250.0, bf16=2250.0, fp8=4500.0),
    # MI250X (both GCDs, 220 CUs; each GCD is a torch device): FP32 matrix 95.7,
    # FP16/BF16 383.0; no TF32, no FP8.
    _part("AMD Instinct MI250X", "MI250X", 220, _AMD + "mi200/mi250x.html",
          fp32=95.7, fp16=383.0, bf16=383.0),
    # MI300X, 304 CUs: FP32 matrix 163.4, TF32 653.7, FP16/BF16 1,307.4, FP8 2,614.9 (dense)
    _part("AMD Instinct MI300X", "MI300X", 304, _AMD + "mi300/mi300x.html",
          fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4, fp8=2614.9),
    # MI325X: the MI300X's compute with more memory; same peaks.
    _part("AMD Instinct MI325X", "MI325X", 304, _AMD + "mi300/mi325x.html",
          fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4, fp8=2614.9),
    # MI355X, 256 CUs: FP32 matrix 157.3, FP16/BF16 2.5 PF, FP8 5.0 PF (dense). The table
    # holds 256 CUs x 4,096 / 8,192 FLOP per clock x 2.4 GHz. CDNA 4 has no TF32 hardware.
    _part("AMD Instinct MI355X", "MI355X", 256, _AMD + "mi350/mi355x.html",
          fp32=157.3, fp16=2516.6, bf16=2516.6, fp8=5033.2),
)
# fmt: on


def find_part(device_name: str) -> Part | None:
    """The table's part for a ``torch.cuda.get_device_name()`` string, or ``None``.

    Example:
        >>> find_part("NVIDIA H100 80GB HBM3").name
        'NVIDIA H100 SXM'
        >>> find_part("NVIDIA RTX A1000 Laptop GPU") is None
        True
    """
    for part in PARTS:
        if part.matches(device_name):
            return part
    return None


def peak_flops(
    device_name: str, precision: str, multiprocessors: int | None = None
) -> float | None:
    """Dense peak FLOP/s of one torch device at ``precision``; ``None`` when not in the table.

    ``tf32`` falls back to ``fp32`` on a part without TF32 hardware (MI250X,
    MI355X), since float32 matmuls then run at the FP32 rate. ``fp8`` on a
    part without FP8 (A100, MI250X) is ``None``.

    Example:
        >>> peak_flops("NVIDIA A100-SXM4-80GB", "bf16")
        312000000000000.0
        >>> peak_flops("AMD Instinct MI250X", "bf16", multiprocessors=110)  # one GCD
        191500000000000.0
        >>> peak_flops("NVIDIA A100-SXM4-80GB", "fp8") is None
        True
    """
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown precision {precision!r}; accepted: {', '.join(PRECISIONS)}.")
    part = find_part(device_name)
    if part is None:
        return None
    tflops = part.tflops.get(precision)
    if tflops is None and precision == "tf32":
        tflops = part.tflops.get("fp32")
    if tflops is None:
        return None
    scale = 1.0
    if multiprocessors and 0 < multiprocessors < part.multiprocessors:
        scale = multiprocessors / part.multiprocessors
    return tflops * 1e12 * scale


def precision_of(model: Any, device_type: str) -> str | None:
    """The precision the model's matmuls run at, from autocast and the parameters' dtype.

    Autocast for ``device_type``, when on, wins (``fp16`` or ``bf16``); else
    the first floating-point parameter's dtype, where float32 counts as
    ``tf32`` when torch lets float32 matmuls use TF32
    (``torch.backends.cuda.matmul.allow_tf32`` or a float32 matmul precision
    other than ``"highest"``). ``None`` when it can't be told (no torch, no
    parameters). Reads flags and dtypes only: no device work.

    Example:
        >>> import torch
        >>> precision_of(torch.nn.Linear(2, 2).to(torch.bfloat16), "cuda")
        'bf16'
    """
    import torch

    names = {torch.float16: "fp16", torch.bfloat16: "bf16"}
    try:
        if torch.is_autocast_enabled(device_type):
            return names.get(torch.get_autocast_dtype(device_type))
    except (RuntimeError, TypeError, AttributeError):  # an unknown device type, an old torch
        pass
    parameters = getattr(model, "parameters", None)
    if not callable(parameters):
        return None
    for param in parameters():
        dtype = getattr(param, "dtype", None)
        if dtype is None or not dtype.is_floating_point:
            continue
        if dtype in names:
            return names[dtype]
        if dtype == torch.float32:
            tf32 = torch.backends.cuda.matmul.allow_tf32
            return "tf32" if tf32 or torch.get_float32_matmul_precision() != "highest" else "fp32"
        if "float8" in str(dtype):
            return "fp8"
        return None
    return None
