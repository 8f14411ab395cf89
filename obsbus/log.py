"""Rank-aware application logging with loguru, set up as Primus does it, in one call.

Call :func:`setup_logging` once in every process, before training::

    from obsbus.log import setup_logging

    log = setup_logging("runs/lm-1", module="train")   # rank and world size from obsbus.dist
    log.info("starting")

What it does:

* Removes loguru's default stderr sink (handler id 0) if it is still there.
* Adds one file sink per level under ``{run_folder}/logs/{module}/rank-{rank}/``:
  ``debug.log``, ``info.log``, ``warning.log`` and ``error.log``. Each file holds
  the records of its level **and above**, as Primus's files do: ``error.log`` is
  the short list of what went wrong, ``debug.log`` has everything. Files for
  levels below the file level are not made (``file_sink_level="INFO"``: no
  ``debug.log``; a level between two files, such as ``SUCCESS``, starts the
  file below it). Files rotate at ``rotation`` and ``retention`` rotated files
  are kept. The launcher process passes ``is_head=True`` and writes the same
  files under ``logs/master/`` instead; workers never write there. Pass it in
  one process only (on several nodes, one launcher): two heads would share
  the files.
* Adds one stderr sink that shows the rank, writes around tqdm progress bars
  (a log line never lands in the middle of a bar) and finds ``sys.stderr``
  when it writes, so a replaced stream (pytest's capture) is honoured.
* Binds ``team``, ``user``, ``exp``, ``module_name``, ``node_ip``, ``rank`` and
  ``world_size`` to the returned logger. Records that come without them (the
  plain ``loguru.logger``, the standard ``logging`` module) get this
  process's values, so every line shows its rank.
* Replaces the root :mod:`logging` handlers with an intercept handler that
  forwards records (Megatron, torch, transformers) to loguru with their level,
  logger name, function, line and exception. The root level is set to the
  lowest sink level. Loggers that do not propagate to the root keep their
  own handlers and are not forwarded: torch's registered loggers (``torch``,
  ``torch.distributed``, ...; see ``TORCH_LOGS``) and transformers' (unless
  ``transformers.utils.logging.enable_propagation()``).

Levels, from strongest to weakest:

==========================  ==========================================
``sink_level`` argument     both the files and stderr, when set
``OBSBUS_LOG_LEVEL``        stderr (the launcher's ``--debug`` switch)
``file_sink_level``         files (default ``DEBUG``)
``stderr_sink_level``       stderr (default ``INFO``)
==========================  ==========================================

Environment variables, for launchers: ``OBSBUS_LOG_LEVEL`` (``DEBUG``,
``INFO``, ``WARN``, ``ERROR``), ``OBSBUS_LOG_TIMESTAMP`` (``1``/``0``; ``0``
drops the time from stderr lines, files always keep it) and
``OBSBUS_LOG_COLOR`` (``1``/``0``; default on only when stderr is a
terminal). Any other value is a :class:`ValueError` when
:func:`setup_logging` is called.

**Another run's logs.** The files are this run's: if they are already there,
written by another process (an earlier run of the same name), the call is
refused with a :class:`FileExistsError` before anything is written, as
FileLogger refuses, unless ``resume=True`` (restarting a run: the lines are
appended). A file is created (``open(path, "x")``) before loguru opens it,
so of two processes that set up one folder at the same instant exactly one
gets it. A second call while obsbus's sinks write the same files goes on
writing them; after :func:`reset_logging` the files are an earlier run's, and
setting them up again takes ``resume=True`` (a notebook that runs its cell
again must not add a refused run's lines to the last run's log).

Calling it twice, or next to your own loguru configuration: obsbus remembers
the handler ids it added. A second call adds the new sinks first and then
removes only obsbus's earlier ones, so if it raises, the earlier setup stays.
Sinks you added with ``logger.add`` are never touched (loguru's default sink
is the one exception); if you keep your own stderr sink, pass
``stderr=False``. If your code calls ``logger.remove()`` or
``logger.configure(handlers=...)`` later, obsbus's sinks are gone too and
:func:`reset_logging` has nothing left to remove. :func:`reset_logging` undoes
:func:`setup_logging`: it removes obsbus's sinks (flushing queued lines),
puts back a default stderr sink if obsbus removed loguru's, uninstalls the
intercept handler and puts back the root handlers and level it replaced.
Tests call it in teardown.

Why ``enqueue=False`` is the default: see the comment at
``_ENQUEUE_DEFAULT`` and ``bench/RESULTS-logging.md``.

Secrets: obsbus never logs environment values, and tracebacks are written
without the values of local variables (loguru's ``diagnose=False``), so a
token held in a variable never reaches a log file. The message and traceback
of every record of level WARNING or above, and of every record with an
exception, are masked by :func:`obsbus.masking.mask_secrets` in obsbus's sinks
(URI credentials, tokens, secret-named environment values); lower levels are
written as they are (they run per step). Sinks you add yourself are untouched.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from obsbus import dist
from obsbus._check import check_bool, check_int, check_optional_str
from obsbus.masking import mask_secrets
from obsbus.run_folder import RunFolder, os_user

if TYPE_CHECKING:
    from loguru import Logger, Record

__all__ = ["get_logger", "reset_logging", "setup_logging"]

# Measured with bench/bench_logging.py (bench/RESULTS-logging.md, a 2-CPU VM):
# with enqueue=False a logger.info() call with the default file sinks keeps the
# training thread 167 us (median) / 0.29 ms (p99); with enqueue=True, 418 us /
# 0.85 ms, and worse in every other scenario. loguru formats the line on the
# caller's thread either way; enqueue adds a pickle and a pipe write per file
# the line goes to, and a writer thread per sink that competes for the GIL.
# The synchronous write(2) of the line-buffered file lands in the page cache
# and does not wait on the disk: with a checkpoint-sized, fsync'd write running
# next to it, p99 stayed at 0.35 ms (enqueue=True: 4.2 ms). enqueue=False also
# loses nothing when the process is killed and starts no threads. Pass
# enqueue=True where file writes do block (some network mounts): remove() and
# reset_logging() drain the queue first, and loguru drains it at exit.
_ENQUEUE_DEFAULT = False

_FILES = (("debug", 10), ("info", 20), ("warning", 30), ("error", 40))
_ENV_LEVELS = {"DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARNING", "WARNING": "WARNING",
               "ERROR": "ERROR"}  # fmt: skip
_FILE_FORMAT = (
    "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {extra[node_ip]} | {extra[module_name]} | "
    "rank-{extra[rank]}/{extra[world_size]} | {name}:{function}:{line} - {message}\n{exception}"
)
_STDERR_FORMAT = (
    "<level>{level: <8}</level> | <cyan>rank-{extra[rank]}/{extra[world_size]}</cyan> | "
    "<cyan>{name}</cyan>:<cyan>{line}</cyan> - <level>{message}</level>\n{exception}"
)
_STDERR_TIME = "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | "
_MASK_FROM = logging.WARNING  # see _with_context


class _Installed:
    """What obsbus changed, so that a second call or a reset undoes exactly that."""

    def __init__(self) -> None:
        self.handler_ids: list[int] = []
        self.default_sink_id = 0  # loguru's default sink, while nobody removed it
        self.removed_default = False
        self.intercept: _InterceptHandler | None = None
        self.root_handlers: list[logging.Handler] = []
        self.root_level = logging.WARNING
        self.logger: Logger | None = None
        #: The log files obsbus's sinks write now: a second call may take them again.
        self.owned: set[Path] = set()


_installed = _Installed()
_lock = threading.RLock()


class _StderrSink:
    """Writes to the current ``sys.stderr``, through ``tqdm.write`` while bars are shown."""

    def __call__(self, message: str) -> None:
        stream = sys.stderr
        if stream is None:  # pythonw and detached daemons have no stderr
            return
        tqdm_class = getattr(sys.modules.get("tqdm"), "tqdm", None)
        if tqdm_class is not None and getattr(tqdm_class, "_instances", None):
            tqdm_class.write(message, file=stream, end="")
        else:
            stream.write(message)
        flush = getattr(stream, "flush", None)
        if flush is not None:
            flush()


class _InterceptHandler(logging.Handler):
    """Forwards :mod:`logging` records to loguru with their level, origin and exception."""

    def __init__(self, logger: Logger) -> None:
        super().__init__(logging.NOTSET)
        self.logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            level: str | int
            try:
                level = self.logger.level(record.levelname).name
            except ValueError:  # a level loguru doesn't know: keep its number
                level = record.levelno
            # Skip logging's own frames so that {file} is the caller's (loguru's recipe);
            # name, function and line come from the record itself, which respects stacklevel.
            frame, depth = inspect.currentframe(), 0
            while frame is not None and (
                depth == 0 or frame.f_code.co_filename == logging.__file__
            ):
                frame, depth = frame.f_back, depth + 1
            self.logger.patch(functools.partial(_stdlib_origin, record)).opt(
                depth=depth, exception=record.exc_info
            ).log(level, message)
        except Exception:
            self.handleError(record)


def _stdlib_origin(origin: logging.LogRecord, record: Record) -> None:
    record["name"] = origin.name
    record["function"] = origin.funcName
    record["line"] = origin.lineno
    record["module"] = origin.module


def _with_context(template: str, context: dict[str, Any]) -> Callable[[Record], str]:
    """The sink's format: this process's context, and warnings and errors masked.

    Records of level WARNING and above and records with an exception are what
    quote values (a URI a tracker could not reach, a bad argument): their
    message and traceback go through :func:`obsbus.masking.mask_secrets`. Lower
    levels are written as they are, so a metric line every step costs nothing more.
    """
    masked_message = template.replace("{message}", "{extra[obsbus_masked_message]}")
    masked_both = masked_message.replace("{exception}", "{extra[obsbus_masked_exception]}")

    def format_record(record: Record) -> str:
        extra = record["extra"]
        for key, value in context.items():
            extra.setdefault(key, value)
        exception = record["exception"]
        if record["level"].no < _MASK_FROM and exception is None:
            return template
        message = mask_secrets(record["message"])
        extra["obsbus_masked_message"] = message
        if exception is not None:
            text = "".join(traceback.format_exception(*exception))
            masked = mask_secrets(text)
            if masked != text:
                extra["obsbus_masked_exception"] = masked
                return masked_both
        return template if message == record["message"] else masked_message

    return format_record


def _level(value: object, what: str) -> tuple[str, int]:
    """The name and severity of a loguru level (``WARN`` means ``WARNING``)."""
    from loguru import logger

    accepted = (
        "TRACE, DEBUG, INFO, SUCCESS, WARNING (or WARN), ERROR, CRITICAL, or a level added "
        "with loguru's logger.level()"
    )
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a level name, got {value!r}. Accepted: {accepted}.")
    upper = value.strip().upper()
    for name in (value, "WARNING" if upper == "WARN" else upper):
        try:
            found = logger.level(name)
        except ValueError:
            continue
        return found.name, found.no
    raise ValueError(f"Unknown {what} {value!r}. Accepted: {accepted}.")


def _env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    if raw not in ("0", "1"):
        raise ValueError(
            f"Environment variable {name}={raw!r} is not accepted: use 1 (on) or 0 (off), "
            "or unset it."
        )
    return raw == "1"


def _env_level() -> str | None:
    raw = os.environ.get("OBSBUS_LOG_LEVEL", "").strip()
    if raw == "":
        return None
    if raw.upper() not in _ENV_LEVELS:
        raise ValueError(
            f"Environment variable OBSBUS_LOG_LEVEL={raw!r} is not accepted: use DEBUG, INFO, "
            "WARN or ERROR, or unset it."
        )
    return _ENV_LEVELS[raw.upper()]


def _node_ip() -> str:
    """This node's outgoing IPv4 address, without DNS; ``127.0.0.1`` when there is none."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.254.254.254", 1))  # a UDP connect sends nothing; it picks a route
            return str(sock.getsockname()[0])
    except Exception:  # no network, no route: a label is enough here
        return "127.0.0.1"


def _stderr_is_tty() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except Exception:  # a closed or odd stream
        return False


def setup_logging(
    run_folder: RunFolder | str | os.PathLike[str],
    *,
    module: str = "train",
    rank: int | None = None,
    world_size: int | None = None,
    is_head: bool = False,
    sink_level: str | None = None,
    file_sink_level: str = "DEBUG",
    stderr_sink_level: str = "INFO",
    team: str | None = None,
    user: str | None = None,
    exp: str | None = None,
    node_ip: str | None = None,
    rotation: Any = "100 MB",
    retention: Any = 5,
    enqueue: bool = _ENQUEUE_DEFAULT,
    stderr: bool = True,
    intercept: bool = True,
    resume: bool = False,
) -> Logger:
    """Set up loguru for this process: per-rank level files, stderr, intercept.

    See the module docstring for the layout, level precedence, environment
    variables and what a second call does.

    Args:
        run_folder: the run's folder (a :class:`~obsbus.RunFolder` or a path).
        module: the module name: the folder under ``logs/`` and ``module_name``.
        rank: this process's rank (default: :func:`obsbus.dist.get_rank`).
        world_size: the number of processes (default: :func:`obsbus.dist.get_world_size`).
        is_head: this is the launcher process: write under ``logs/master/``.
        sink_level: if set, the level of every sink, overriding the two below.
        file_sink_level: the lowest level written to files.
        stderr_sink_level: the lowest level written to stderr.
        team: bound as ``team`` (default ``"default"``).
        user: bound as ``user`` (default the OS user).
        exp: bound as ``exp`` (default the run folder's name).
        node_ip: bound as ``node_ip`` (default this node's address).
        rotation: when a file is rotated, in loguru's terms (``"100 MB"``, ``"1 day"``).
        retention: how many rotated files to keep (or a loguru duration).
        enqueue: write files from loguru's background thread instead of the caller's.
        stderr: add the stderr sink.
        intercept: forward the standard :mod:`logging` module to loguru.
        resume: append to log files another process wrote (restarting a run).

    Returns:
        loguru's logger, bound with this process's context.

    Raises:
        FileExistsError: a log file is there, written by another process (a
            run of the same name), and ``resume`` is not set; nothing is written.
        TypeError, ValueError: a bad argument or environment value, before
            anything is changed. A ``rotation`` or ``retention`` loguru can't
            parse is found when the files are added: the sinks added so far are
            removed again and an earlier setup stays in place.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> log = setup_logging(folder, rank=1, world_size=2, stderr=False)
        >>> log.warning("loss spiked")
        >>> reset_logging()
        >>> text = open(f"{folder}/logs/train/rank-1/warning.log").read()
        >>> "rank-1/2" in text and "loss spiked" in text
        True
        >>> import shutil; shutil.rmtree(folder)
    """
    from loguru import logger

    folder = run_folder if isinstance(run_folder, RunFolder) else RunFolder(run_folder)
    for name, flag in (("is_head", is_head), ("enqueue", enqueue), ("stderr", stderr),
                       ("intercept", intercept), ("resume", resume)):  # fmt: skip
        check_bool("setup_logging", name, flag)
    for name, text in (("team", team), ("user", user), ("exp", exp), ("node_ip", node_ip)):
        check_optional_str("setup_logging", name, text, allow_empty=True)
    world_size = dist.get_world_size() if world_size is None else world_size
    world = check_int("setup_logging", "world_size", world_size, minimum=1)
    this_rank = check_int("setup_logging", "rank", dist.get_rank() if rank is None else rank)
    if this_rank >= world:
        raise ValueError(f"rank {this_rank} is not below world_size {world}.")
    rank_dir = folder.logs_dir(module, this_rank)  # checks the module name
    log_dir = folder.master_logs_dir if is_head else rank_dir
    file_name, file_no = _level(file_sink_level, "file_sink_level")
    stderr_name, stderr_no = _level(stderr_sink_level, "stderr_sink_level")
    env_level = _env_level()
    if env_level is not None:
        stderr_name, stderr_no = _level(env_level, "OBSBUS_LOG_LEVEL")
    if sink_level is not None:
        file_name, file_no = _level(sink_level, "sink_level")
        stderr_name, stderr_no = file_name, file_no
    timestamp = _env_flag("OBSBUS_LOG_TIMESTAMP", True)
    color = _env_flag("OBSBUS_LOG_COLOR", _stderr_is_tty())

    context = {
        "team": team or "default",
        "user": user or os_user(),
        "exp": exp or folder.root.name,
        "module_name": module,
        "node_ip": node_ip or _node_ip(),
        "rank": this_rank,
        "world_size": world,
    }
    with _lock:
        new_ids: list[int] = []
        files: list[str] = []
        paths = [Path(log_dir, name) for name, _ in _level_files(file_no)]
        made = [] if resume else _claim(paths)
        try:
            for name, no in _level_files(file_no):
                files.append(name)
                new_ids.append(
                    logger.add(
                        Path(log_dir, name),
                        level=file_no if len(files) == 1 else no,  # the lowest file takes the rest
                        format=_with_context(_FILE_FORMAT, context),
                        rotation=rotation,
                        retention=retention,
                        enqueue=enqueue,
                        colorize=False,
                        diagnose=False,
                        encoding="utf-8",
                    )
                )
            if stderr:
                template = (_STDERR_TIME if timestamp else "") + _STDERR_FORMAT
                new_ids.append(
                    logger.add(
                        _StderrSink(),
                        level=stderr_no,
                        format=_with_context(template, context),
                        colorize=color,
                        diagnose=False,
                    )
                )
        except (TypeError, ValueError) as exc:
            for handler_id in new_ids:
                logger.remove(handler_id)
            _unmake(made)
            raise type(exc)(
                f"setup_logging could not add its sinks (rotation={rotation!r}, "
                f"retention={retention!r}): {exc}. Accepted: rotation like '100 MB' or '1 day', "
                "retention a number of files or a duration like '10 days'."
            ) from exc
        except BaseException:
            for handler_id in new_ids:
                logger.remove(handler_id)
            _unmake(made)
            raise
        _installed.owned = set(paths)
        _remove_ids(_installed.handler_ids)
        _installed.handler_ids = new_ids
        if not _installed.removed_default and _remove_ids([_installed.default_sink_id]):
            _installed.removed_default = True
        bound = logger.bind(**context)
        _installed.logger = bound
        if intercept:
            _install_intercept(bound, min(file_no, stderr_no if stderr else file_no))
        else:
            _uninstall_intercept()
    bound.debug(
        "obsbus logging to {} ({} from level {}; stderr {})",
        log_dir,
        ", ".join(files),
        file_name,
        f"from level {stderr_name}" if stderr else "off",
    )
    return bound


def _level_files(file_no: int) -> list[tuple[str, int]]:
    """``(file name, level)`` of the files written from level ``file_no``.

    A file whose next file up already starts at or below ``file_no`` is not made.
    """
    return [
        (f"{name}.log", no)
        for index, (name, no) in enumerate(_FILES)
        if index + 1 == len(_FILES) or _FILES[index + 1][1] > file_no
    ]


def _taken(path: Path) -> FileExistsError:
    return FileExistsError(
        f"setup_logging: {str(path)!r} already exists. To fix, pass resume=True to append "
        "to it (restarting a run), or use another run name or run folder."
    )


def _claim(paths: list[Path]) -> list[Path]:
    """Create the log files of ``paths`` obsbus's sinks do not write now, or refuse.

    Returns the files created. Another process's file (an earlier run's) is a
    :class:`FileExistsError`, raised before anything is written; ``open(path,
    "x")`` makes the check and the creation one step, so of two processes
    starting at once one gets the files and the other the same error.
    """
    todo = [path for path in paths if path not in _installed.owned]
    for path in todo:
        if path.exists():
            raise _taken(path)
    made: list[Path] = []
    try:
        for path in todo:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "x", encoding="utf-8"):
                made.append(path)
    except FileExistsError:
        _unmake(made)
        raise _taken(path) from None
    return made


def _unmake(made: list[Path]) -> None:
    """Remove the empty files :func:`_claim` created for a setup that did not happen."""
    for path in made:
        path.unlink(missing_ok=True)


def _remove_ids(ids: list[int]) -> bool:
    """Remove loguru handlers by id, skipping ids someone else removed already."""
    from loguru import logger

    removed = False
    for handler_id in ids:
        try:
            logger.remove(handler_id)  # an enqueued sink drains its queue first
            removed = True
        except ValueError:
            pass
    return removed


def _install_intercept(logger: Logger, level: int) -> None:
    root = logging.getLogger()
    if _installed.intercept is None:
        _installed.root_handlers = list(root.handlers)
        _installed.root_level = root.level
        _installed.intercept = _InterceptHandler(logger)
        root.handlers = [_installed.intercept]
    else:
        _installed.intercept.logger = logger
        if _installed.intercept not in root.handlers:
            root.addHandler(_installed.intercept)
    root.setLevel(level)


def _uninstall_intercept() -> None:
    handler = _installed.intercept
    if handler is None:
        return
    root = logging.getLogger()
    root.removeHandler(handler)
    for saved in _installed.root_handlers:
        if saved not in root.handlers:
            root.addHandler(saved)
    root.setLevel(_installed.root_level)
    _installed.intercept = None
    _installed.root_handlers = []


def reset_logging() -> None:
    """Undo :func:`setup_logging`; a no-op when there is nothing to undo.

    Removes obsbus's sinks (an enqueued sink writes what it holds first),
    puts back a default stderr sink if obsbus removed loguru's, and puts back
    the root :mod:`logging` handlers and level the intercept handler replaced.
    Sinks you added yourself stay.

    Example:
        >>> import logging, tempfile
        >>> before = list(logging.getLogger().handlers)
        >>> _ = setup_logging(tempfile.mkdtemp(), stderr=False)
        >>> reset_logging()
        >>> logging.getLogger().handlers == before
        True
    """
    with _lock:
        if not (_installed.handler_ids or _installed.intercept or _installed.removed_default):
            return
        from loguru import logger

        _remove_ids(_installed.handler_ids)
        _installed.handler_ids = []
        _installed.owned = set()
        _uninstall_intercept()
        if _installed.removed_default:
            # loguru's own default, except that it finds sys.stderr when it writes.
            _installed.default_sink_id = logger.add(
                _StderrSink(),
                level=os.environ.get("LOGURU_LEVEL", "DEBUG"),
                colorize=_stderr_is_tty(),
            )
            _installed.removed_default = False
        _installed.logger = None


def get_logger() -> Logger:
    """The logger :func:`setup_logging` returned last, or loguru's own before that.

    Example:
        >>> get_logger().info("goes wherever loguru is set up to write")
    """
    from loguru import logger

    return _installed.logger or logger
