"""Write your own tracker destination: one client class of calls into the tracker's library.

:class:`TrackerDestination` owns the policy every obsbus tracker shares (values
held on the training thread, one host transfer per log interval, a background
writer, failures contained and counted, a bounded close, the environment and
git metadata); a :class:`TrackerClient` subclass makes the tracker's calls.
TensorBoard, W&B, MLflow, Comet and Neptune are built this way. The README's
"Adding a tracker" section has a complete example.
"""

from __future__ import annotations

from obsbus.loggers._shared_options import SHARED_OPTIONS
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers._tracker_client import RunInfo, TrackerClient

__all__ = ["SHARED_OPTIONS", "RunInfo", "TrackerClient", "TrackerDestination"]
