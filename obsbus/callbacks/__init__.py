"""Monitors: callbacks that measure a run and log what they find."""

from obsbus.callbacks._averaging import RunningAverage
from obsbus.callbacks.early_stopper import EarlyStopper
from obsbus.callbacks.hang_watchdog import HangWatchdog
from obsbus.callbacks.loss_spike_detector import LossSpikeDetector
from obsbus.callbacks.lr_monitor import LRMonitor
from obsbus.callbacks.memory_monitor import MemoryMonitor
from obsbus.callbacks.memory_snapshot import MemorySnapshot
from obsbus.callbacks.nan_monitor import NaNMonitor, NonFiniteLossError
from obsbus.callbacks.oom_observer import OOMObserver
from obsbus.callbacks.optimizer_monitor import OptimizerMonitor
from obsbus.callbacks.rocm_smi_monitor import RocmSmiMonitor
from obsbus.callbacks.runtime_estimator import RuntimeEstimator
from obsbus.callbacks.speed_monitor import SpeedMonitor
from obsbus.callbacks.system_metrics_monitor import SystemMetricsMonitor
from obsbus.callbacks.threshold_stopper import ThresholdStopper

__all__ = [
    "EarlyStopper",
    "HangWatchdog",
    "LRMonitor",
    "LossSpikeDetector",
    "MemoryMonitor",
    "MemorySnapshot",
    "NaNMonitor",
    "NonFiniteLossError",
    "OOMObserver",
    "OptimizerMonitor",
    "RocmSmiMonitor",
    "RunningAverage",
    "RuntimeEstimator",
    "SpeedMonitor",
    "SystemMetricsMonitor",
    "ThresholdStopper",
]
