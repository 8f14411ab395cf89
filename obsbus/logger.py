"""The :class:`Logger` that fans out to every :class:`LoggerDestination`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from obsbus._check import check_bool
from obsbus._deadline import SharedDeadline
from obsbus._failures import FailureLog, plugin_name
from obsbus._watchdog import CallWatchdog
from obsbus.callback import Callback
from obsbus.masking import mask_value
from obsbus.naming import format_name

if TYPE_CHECKING:
    from types import FrameType

    from obsbus.state import State

__all__ = ["Logger", "LoggerDestination"]


class LoggerDestination(Callback):
    """A callback that also receives what is logged.

    Every method is a no-op; a destination overrides what it stores. Metric
    values may be tensors (principle 1): a destination keeps them as they
    are until it writes, then turns every value due into numbers at once with
    :func:`obsbus.values.to_host`. Values passed in must not be changed by
    the destination; callers pass fresh values and never mutate them after.

    Every hook is called on the training thread, so training waits while it
    runs: hold values and write them from a background thread
    (:class:`~obsbus.BackgroundWriter`), as the built-in destinations do. The
    logging methods come from whichever thread called the :class:`Logger` (the
    training thread, a data-loader or monitoring thread, ``upload_file`` from
    the thread that made the file): guard what they hold with a lock, as the
    built-in ones do (:class:`obsbus._held.RowHolder`).
    ``OBSBUS_WATCHDOG_S=60`` (or ``Logger(watchdog_s=60)``) names a call that
    takes longer. At ``fit_end``, ``exception`` and ``close``, wait at most
    ``logger.deadline.left(timeout)``: the destinations share one deadline.

    Example:
        >>> class Collect(LoggerDestination):
        ...     def __init__(self):
        ...         self.seen = []
        ...     def log_metrics(self, metrics, step=None):
        ...         self.seen.append((step, dict(metrics)))
        >>> from obsbus import Logger, State
        >>> dest = Collect()
        >>> Logger(State(run_name="r"), [dest]).log_metrics({"loss": 0.5}, step=3)
        >>> dest.seen
        [(3, {'loss': 0.5})]
    """

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record scalar metrics (numbers or 0-d/1-element tensors) at ``step``."""

    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        """Record hyperparameters (nested dicts allowed)."""

    def log_traces(self, traces: Mapping[str, Any]) -> None:
        """Record traces: which algorithm or branch ran, as small values."""

    def log_table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        name: str = "Table",
        step: int | None = None,
    ) -> None:
        """Record a table."""

    def log_images(
        self, images: Any, name: str = "Images", step: int | None = None, **kwargs: Any
    ) -> None:
        """Record images (tensors or arrays, HWC or CHW)."""

    def can_upload_files(self) -> bool:
        """Whether :meth:`upload_file` stores files somewhere."""
        return False

    def upload_file(
        self, state: State, remote_file_name: str, file_path: Path, *, overwrite: bool = False
    ) -> None:
        """Store a copy of ``file_path`` as ``remote_file_name``; must not block training."""

    def download_file(
        self,
        remote_file_name: str,
        destination: str,
        overwrite: bool = False,
        progress_bar: bool = True,
    ) -> None:
        """Fetch ``remote_file_name`` into ``destination``."""
        raise NotImplementedError(f"{type(self).__name__} cannot download files.")


class Logger:
    """Fans every logging call out to the destinations, each failure contained.

    ``step`` defaults to ``state.timestamp.batch``. Values are passed on
    untouched (tensors stay tensors). A destination that raises is reported
    once by name and counted; the others still get the call (``strict=True``
    raises instead, for tests).

    Example:
        >>> from obsbus import State
        >>> from obsbus.loggers import InMemoryLogger
        >>> mem = InMemoryLogger()
        >>> logger = Logger(State(run_name="r"), [mem])
        >>> logger.log_metrics({"loss/train/total": 1.0})
        >>> mem.most_recent_values["loss/train/total"]
        1.0
    """

    def __init__(
        self,
        state: State,
        destinations: LoggerDestination | Iterable[LoggerDestination] | None = (),
        *,
        strict: bool = False,
        failures: FailureLog | None = None,
        watchdog_s: float | None = None,
    ) -> None:
        if not hasattr(state, "timestamp"):
            raise TypeError(f"Logger state must be an obsbus State, got {state!r}.")
        if not isinstance(cast(object, failures), (FailureLog, type(None))):
            raise TypeError(f"Logger failures must be a FailureLog or None, got {failures!r}.")
        self._state = state
        if destinations is None:  # Composer's default
            destinations = ()
        elif isinstance(destinations, LoggerDestination):  # one, as Composer takes it
            destinations = (destinations,)
        if not is_list_like(destinations):
            raise TypeError(
                f"Logger destinations must be a list of LoggerDestination, got {destinations!r}."
            )
        self.destinations: tuple[LoggerDestination, ...] = tuple(destinations)
        for dest in self.destinations:
            if not isinstance(dest, LoggerDestination):
                raise TypeError(
                    f"Expected LoggerDestination instances in loggers, got {dest!r}. "
                    "To fix, pass monitors as callbacks=[...] and destinations as loggers=[...]."
                )
        self.failures = failures or FailureLog(strict=check_bool("Logger", "strict", strict))
        #: What is left of the time destinations may wait while the run ends (see
        #: :class:`~obsbus._deadline.SharedDeadline`); the engine starts and ends it.
        self.deadline = SharedDeadline()
        _name_apart(self.destinations)
        if watchdog_s is None:
            watchdog_s = _watchdog_from_env()
        #: Reports a destination call that holds the training thread longer than
        #: ``watchdog_s`` (``$OBSBUS_WATCHDOG_S``); off (``None``) by default.
        self.watchdog = (
            None if watchdog_s is None else CallWatchdog(watchdog_s, "Logger watchdog_s")
        )
        if self.watchdog is not None:
            self.log_metrics = self._log_metrics_watched  # type: ignore[method-assign]

    def _contained(self, dest: LoggerDestination, action: str, fn: Any, *args: Any) -> None:
        """``fn(*args)``, its failure contained, and watched when the watchdog is on."""
        dog = self.watchdog
        if dog is None:
            self.failures.call(dest, action, fn, *args)
        else:
            self.failures.call(dest, action, dog.call, plugin_name(dest), action, fn, *args)

    def _fan_out(self, action: str, *args: Any) -> None:
        for dest in self.destinations:
            self._contained(dest, action, getattr(dest, action), *args)

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log scalar metrics; values may be tensors and are not synced here.

        Safe from any thread (a data-loader thread, a monitoring thread, an
        async eval): the built-in destinations hold what they keep under a lock.

        Raises:
            TypeError: a key is not a ``str``. The whole call is refused, at the
                call: a converted key (``7`` as ``'7'``, a tuple as its repr) is
                a name nobody chose and may merge two series.
        """
        if step is None:
            step = self._state.timestamp._batch
        metrics = dict(metrics)
        for key in metrics:
            if type(key) is not str:
                check_metric_keys(metrics)
        for dest in self.destinations:  # _fan_out, inlined: this runs several times a step
            try:
                dest.log_metrics(metrics, step)
            except Exception as exc:
                self.failures.failed(dest, "log_metrics", exc)

    def _log_metrics_watched(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """:meth:`log_metrics` with the watchdog on (it replaces it on the instance)."""
        if step is None:
            step = self._state.timestamp._batch
        metrics = dict(metrics)
        for key in metrics:
            if type(key) is not str:
                check_metric_keys(metrics)
        for dest in self.destinations:
            self._contained(dest, "log_metrics", dest.log_metrics, metrics, step)

    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        """Hand hyperparameters to every destination, secrets masked first
        (:func:`obsbus.masking.mask_value`: URI credentials, tokens, ``api_key=...``)."""
        self._fan_out("log_hyperparameters", mask_value(dict(hyperparameters)))

    def log_traces(self, traces: Mapping[str, Any]) -> None:
        self._fan_out("log_traces", dict(traces))

    def log_table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        name: str = "Table",
        step: int | None = None,
    ) -> None:
        if step is None:
            step = self._state.timestamp._batch
        self._fan_out("log_table", list(columns), [list(r) for r in rows], name, step)

    def log_images(
        self,
        images: Any,
        name: str = "Images",
        channels_last: bool | None = None,
        step: int | None = None,
        masks: Mapping[str, Any] | None = None,
        mask_class_labels: Mapping[int, str] | None = None,
        use_table: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """Hand images to every destination; the arguments in Composer's order.

        ``channels_last=None`` lets each destination tell CHW from HWC by the
        shape. Destinations are called with keywords (``name=``, ``step=``,
        and the options that were given), so a destination written with
        Composer's signature and one with obsbus's both get the right values.
        """
        if channels_last is not None and not isinstance(channels_last, bool):
            raise TypeError(
                f"log_images channels_last must be a bool or None, got {channels_last!r}. "
                "The third argument is channels_last, as in Composer; to fix, pass the step "
                f"as step={channels_last!r}."
            )
        if step is None:
            step = self._state.timestamp._batch
        options = {
            k: v
            for k, v in (
                ("channels_last", channels_last),
                ("masks", masks),
                ("mask_class_labels", mask_class_labels),
                ("use_table", use_table),
            )
            if v is not None
        }
        options.update(kwargs)
        for dest in self.destinations:
            self._contained(
                dest,
                "log_images",
                lambda d=dest: d.log_images(images, name=name, step=step, **options),
            )

    def has_file_uploader(self) -> bool:
        """Whether any destination can store files (``can_upload_files()``)."""
        return any(d.can_upload_files() for d in self.destinations)

    def has_file_upload_destination(self) -> bool:
        """Composer's name for :meth:`has_file_uploader`."""
        return self.has_file_uploader()

    def upload_file(
        self, remote_file_name: str, file_path: str | Path, *, overwrite: bool = False
    ) -> None:
        """Hand a file to every destination that overrides ``upload_file``, as Composer does.

        ``can_upload_files()`` is not asked: a destination that overrides
        ``upload_file`` gets every file (the built-in trackers skip files
        themselves when their artifact upload is off). ``remote_file_name``
        and ``file_path`` may use placeholders (``{run_name}``, ``{rank}``, ...);
        a path that exists as written is taken as written.
        """
        remote = self.format_name(remote_file_name)
        text = str(file_path)
        path = Path(text if "{" not in text or Path(text).exists() else self.format_name(text))
        for dest in self.destinations:
            if takes_files(dest):
                self._contained(
                    dest,
                    "upload_file",
                    lambda d=dest: d.upload_file(self._state, remote, path, overwrite=overwrite),
                )

    def download_file(
        self,
        remote_file_name: str,
        destination: str | Path,
        overwrite: bool = False,
        progress_bar: bool = True,
    ) -> None:
        """Fetch a file from the first destination that has it.

        Destinations that override ``download_file`` are asked in order.

        Raises:
            FileNotFoundError: no destination can download files, or none had it.
        """
        remote = self.format_name(remote_file_name)
        errors: list[str] = []
        for dest in self.destinations:
            if not _overrides(dest, "download_file"):
                continue
            try:
                dest.download_file(remote, str(destination), overwrite, progress_bar)
                return
            except Exception as exc:  # try the next store, report all if none had it
                errors.append(f"{type(dest).__name__}: {exc}")
        raise FileNotFoundError(
            f"Could not download {remote!r}: "
            + ("; ".join(errors) if errors else "no logger destination stores files.")
        )

    def format_name(self, template: str, **values: Any) -> str:
        """Fill the placeholders of ``template`` from the state (:func:`~obsbus.format_name`)."""
        return format_name(template, self._state, **values)


def check_metric_keys(metrics: Mapping[Any, Any]) -> None:
    """Raise a ``TypeError`` naming the first key of ``metrics`` that is not a ``str``, and
    the line that logged it (the first frame outside obsbus)."""
    for key in metrics:
        if not isinstance(key, str):
            raise TypeError(
                f"Logger.log_metrics: metric keys must be str, got {key!r} "
                f"({type(key).__name__}), logged at {_caller()}. Nothing of this call was "
                f"logged. To fix, name the metric with a str, e.g. {_suggest(key)!r}."
            )


def _caller() -> str:
    """``file:line`` of the nearest frame that is not obsbus's own."""
    import sys

    package = os.path.dirname(os.path.abspath(__file__))
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
    if frame is None:
        return "an unknown line"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _suggest(key: object) -> str:
    if isinstance(key, (tuple, list)):
        return "/".join(str(part) for part in key)
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    return str(key)


def _name_apart(destinations: Sequence[LoggerDestination]) -> None:
    """Give the second, third, ... destination of one name ``Name#2``, ``Name#3``, ...

    Every message names a destination (and the failure counts are kept by
    name), so two MLFlowLoggers must not both be ``MLFlowLogger``.
    """
    seen: dict[str, int] = {}
    for dest in destinations:
        name = plugin_name(dest)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            with contextlib.suppress(AttributeError):  # a read-only name stays as it is
                dest.name = f"{name}#{seen[name]}"  # type: ignore[attr-defined]


def _watchdog_from_env() -> float | None:
    text = os.environ.get("OBSBUS_WATCHDOG_S", "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(
            f"OBSBUS_WATCHDOG_S must be a number of seconds, got {text!r}. To fix, set it to "
            "e.g. 60, or unset it to turn the watchdog off."
        ) from None


def takes_files(dest: LoggerDestination) -> bool:
    """Whether ``dest`` stores files: it overrides ``upload_file`` or can_upload_files()."""
    return _overrides(dest, "upload_file") or dest.can_upload_files()


def _overrides(dest: LoggerDestination, method: str) -> bool:
    bound = getattr(dest, method)
    return getattr(bound, "__func__", bound) is not getattr(LoggerDestination, method)


def is_list_like(value: object) -> bool:
    """Whether ``value`` can be a list of plug-ins (iterable, and not a string)."""
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes))
