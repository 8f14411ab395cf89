"""Training time: :class:`Time` values with units, and the :class:`Timestamp` of a run.

They behave like Composer's ``composer.core.time`` (same names, units,
constructors and arithmetic). What differs on purpose: parsing refuses
``""`` and negative strings, a time in one unit never equals one in another
(Composer raises), and the wall-clock fields are float seconds that also read
as ``timedelta``. The README's "Coming from Composer" section lists it all.
"""

from __future__ import annotations

from obsbus._time_seconds import Seconds
from obsbus._time_stamp import Timestamp
from obsbus._time_unit import (
    FractionalCountError,
    TimeInputError,
    TimeUnit,
    TimeUnitMismatchError,
)
from obsbus._time_unit import Number as Number  # for annotations elsewhere, not API
from obsbus._time_value import Time
from obsbus._time_value import TimeLike as TimeLike

__all__ = [
    "FractionalCountError",
    "Seconds",
    "Time",
    "TimeInputError",
    "TimeUnit",
    "TimeUnitMismatchError",
    "Timestamp",
    "ensure_time",
]

# The public home of these names: pickles and class reprs name it, and doctest finds the
# class docstrings here (so examples live there, not in method docstrings).
for _cls in (
    FractionalCountError,
    Seconds,
    Time,
    TimeInputError,
    TimeUnit,
    TimeUnitMismatchError,
    Timestamp,
):
    _cls.__module__ = __name__
del _cls


def ensure_time(maybe_time: TimeLike, int_unit: TimeUnit | str) -> Time:
    """Composer's ``ensure_time``: ``Time.from_input(maybe_time, int_unit)``.

    Example:
        >>> ensure_time(3, "ep"), ensure_time("10ba", "ep")
        (Time(3, 'ep'), Time(10, 'ba'))
    """
    return Time.from_input(maybe_time, int_unit)
