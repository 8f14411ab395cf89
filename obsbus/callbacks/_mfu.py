"""SpeedMonitor's MFU: the device's peak FLOP/s (an override, else the table), and the key.

The table lives in :mod:`obsbus.callbacks._peak_flops`; this module finds the
run's device and precision, looks the peak up once, warns once when it can't,
and turns FLOP/s per device into ``throughput/device/mfu``.
"""

from __future__ import annotations

import math
import sys
import warnings
from typing import Any

from obsbus._check import check_optional_number
from obsbus.callbacks._peak_flops import peak_flops, precision_of
from obsbus.errors import ObsbusWarning
from obsbus.state import State
from obsbus.values import is_tensor

__all__ = ["MfuLookup", "check_peak", "device_info", "device_type"]


def check_peak(value: object) -> float | None:
    """``gpu_flops_available`` as a float, or a TypeError/ValueError that says what is accepted.

    Example:
        >>> check_peak(989e12), check_peak(None)
        (989000000000000.0, None)
    """
    checked = check_optional_number(
        "SpeedMonitor",
        "gpu_flops_available",
        value,
        finite=False,  # inf is refused below, with the peak's own hint
        real=True,
        unit=" of FLOP/s per device (e.g. 989e12)",
    )
    if checked is None:
        return None
    peak = float(checked)
    if not math.isfinite(peak) or peak < 1e9:
        raise ValueError(
            "SpeedMonitor gpu_flops_available must be the peak FLOP/s of one device, "
            f"e.g. 989e12 for an H100 in bf16; got {value!r}. To fix, give FLOP/s, not "
            "TFLOP/s (989e12, not 989)."
        )
    return peak


def device_type(state: State) -> str:
    """``"cuda"``, ``"cpu"``, ... of ``state.device`` (``"cuda"`` when the loop gave none)."""
    device = state.device
    return str(getattr(device, "type", device or "cuda")).split(":")[0]


def device_info(state: State) -> tuple[str, int] | None:
    """``(name, multiprocessor count)`` of the run's GPU, or ``None`` off a GPU (host queries)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    device = state.device
    parameters = getattr(state.model, "parameters", None)
    if device is None and callable(parameters):
        device = getattr(next(iter(parameters()), None), "device", None)
    if device is None or not torch.cuda.is_available():
        return None
    device = torch.device(device)
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(
        device.index if device.index is not None else torch.cuda.current_device()
    )
    return str(props.name), int(props.multi_processor_count)


class MfuLookup:
    """The peak FLOP/s of one device, found once per run, and the MFU key from it.

    ``gpu_flops_available`` overrides the table; else the peak is looked up
    at the first log with FLOPs from the GPU's name and ``precision`` (else
    the precision seen at the first forward, else the parameters' dtype, else
    fp32). A peak that can't be found, and an MFU above 1, are each warned
    once.

    Example:
        >>> mfu = MfuLookup(gpu_flops_available=1e12, precision=None)
        >>> metrics = {}
        >>> mfu.add(metrics, device_flops=4e11, own_flops=4e11, state=None)
        >>> metrics
        {'throughput/device/mfu': 0.4}
    """

    def __init__(self, gpu_flops_available: float | None, precision: str | None) -> None:
        self.reset(gpu_flops_available, precision)

    def reset(self, gpu_flops_available: float | None, precision: str | None) -> None:
        """Forget the last run's device, precision and warnings."""
        self._precision = precision
        self._detect = precision is None and gpu_flops_available is None
        self._detected: str | None = None
        self._peak: float | None = gpu_flops_available
        self._peak_resolved = gpu_flops_available is not None
        self._warned_mfu = False

    def needs_precision(self, state: State) -> bool:
        """Whether :meth:`after_forward` may still matter: the precision is to be detected,
        and the run's device is a GPU or not known yet (elsewhere there is no peak)."""
        return self._detect and (state.device is None or device_info(state) is not None)

    def after_forward(self, state: State) -> None:
        """Note the precision of the first forward pass (autocast's dtype, if on)."""
        if self._detect:
            self._detect = False
            self._detected = precision_of(state.model, device_type(state))

    def add(self, metrics: dict[str, Any], device_flops: Any, own_flops: float, state: Any) -> None:
        """Add ``throughput/device/mfu`` to ``metrics``, when the peak is known and MFU <= 1.

        ``device_flops`` is FLOP/s per device over all ranks (a number, or a device tensor:
        then the check above 1 uses ``own_flops``, this rank's FLOP/s, and a global value
        above 1 is logged as NaN).
        """
        peak = self.peak(state)
        if peak is None:
            return
        mfu = device_flops / peak
        check = own_flops / peak if is_tensor(mfu) else mfu
        if check > 1.0:
            if not self._warned_mfu:
                self._warned_mfu = True
                warnings.warn(
                    f"SpeedMonitor: the computed MFU is {check:.3g} ({check:.0%}), above 100%, "
                    f"so throughput/device/mfu is not logged: the peak ({peak:.4g} FLOP/s per "
                    "device) or the FLOPs per batch is wrong. To fix, check flops_per_batch "
                    "(FLOPs of this rank's batch) and pass gpu_flops_available or precision.",
                    ObsbusWarning,
                    stacklevel=2,  # SpeedMonitor's log step
                )
            return
        if is_tensor(mfu):
            import torch

            mfu = torch.where(mfu <= 1.0, mfu, math.nan)
        metrics["throughput/device/mfu"] = mfu

    def peak(self, state: Any) -> float | None:
        """The device's peak FLOP/s: the override, else the table; found once, warned once."""
        if self._peak_resolved:
            return self._peak
        self._peak_resolved = True
        info = device_info(state)
        if info is None:
            reason = f"the run is not on a GPU (device {state.device!r})"
        else:
            name, multiprocessors = info
            precision = (
                self._precision or self._detected or precision_of(state.model, "cuda") or "fp32"
            )
            self._peak = peak_flops(name, precision, multiprocessors)
            reason = f"{name!r} at {precision} is not in the peak-FLOPs table"
        if self._peak is None:
            warnings.warn(
                f"SpeedMonitor: {reason}, so throughput/device/mfu is not logged (the table "
                "covers A100, H100, H200, B200, MI250X, MI300X, MI325X and MI355X). To fix, "
                "pass gpu_flops_available=<peak FLOP/s of one device>.",
                ObsbusWarning,
                stacklevel=3,  # SpeedMonitor's log step
            )
        return self._peak
