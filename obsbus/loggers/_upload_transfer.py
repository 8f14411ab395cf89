"""Helpers of the uploader that are not API: argument checks, the wait with a bar, downloads."""

from __future__ import annotations

import logging
import os
import random
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from obsbus._check import check_iterable_of
from obsbus.errors import ObsbusError
from obsbus.loggers._upload_queue import UploadQueue
from obsbus.object_store import ObjectStore

log = logging.getLogger("obsbus")
#: A backlog this large (files or bytes) gets a progress bar; so does a download this large.
BIG_BACKLOG_FILES, BIG_BACKLOG_BYTES, BIG_DOWNLOAD = 16, 64 << 20, 16 << 20
_OWNER = "RemoteUploaderDownloader"


def check_patterns(name: str, value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``include``/``exclude``: one glob pattern, a list of them, or ``None`` (none)."""
    patterns = check_iterable_of(
        _OWNER,
        name,
        value,
        str,
        accepted="glob patterns (str): one, a list of them, or None",
        allow_none=True,
        allow_single=True,
    )
    for pattern in patterns:
        if not pattern:
            raise ValueError(
                f"{_OWNER} {name} must be glob patterns (str), got the empty pattern "
                f"{pattern!r} in {value!r}; it matches no file name."
            )
    return tuple(patterns)


def _bar(total: int, desc: str) -> Any:
    from tqdm import tqdm

    # disable=None: no bar when stderr is not a terminal (a log line says what happens).
    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        desc=desc,
        file=sys.stderr,
        disable=None,
        leave=False,
    )


def wait_with_progress(
    queue: UploadQueue, name: str, timeout: float | None, show_bar: bool
) -> bool:
    """Wait for ``queue``'s backlog; a large one is announced and gets a bar."""
    count, nbytes = queue.backlog()
    if count == 0:
        return True
    if count < BIG_BACKLOG_FILES and nbytes < BIG_BACKLOG_BYTES:
        return queue.wait(timeout)
    log.info(
        "obsbus: %s: waiting for %d upload(s), %.1f MiB (at most %s).",
        name,
        count,
        nbytes / 2**20,
        "without limit" if timeout is None else f"{timeout:.0f}s",
    )
    if not show_bar:
        return queue.wait(timeout)
    with _bar(nbytes, f"uploading to {queue.store.display}") as bar:

        def progress(done: int) -> None:
            bar.update(min(done, nbytes) - bar.n)

        return queue.wait(timeout, progress)


def download(
    store: ObjectStore,
    name: str,
    dest: Path,
    *,
    show_bar: bool,
    attempts: int,
    initial_backoff: float,
    max_backoff: float,
) -> None:
    """Download ``name`` into ``dest`` through a temporary file; retry transient errors."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.obsbus-download-{uuid.uuid4().hex[:8]}")
    uri = store.object_uri(name)
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None and show_bar and total >= BIG_DOWNLOAD:
            bar = _bar(total, f"downloading {uri}")
        if bar is not None:
            bar.update(done - bar.n)

    try:
        for attempt in range(1, attempts + 1):
            try:
                store.download(name, tmp, progress)
                break
            except Exception as exc:
                message = store.describe_error(exc)
                if isinstance(exc, FileNotFoundError) or type(exc).__name__ == "NotFoundError":
                    raise FileNotFoundError(f"{uri} does not exist ({message}).") from None
                if not store.is_transient(exc) or attempt == attempts:
                    raise ObsbusError(
                        f"Could not download {uri} after {attempt} attempt(s): {message}"
                    ) from None
                store.reset()
                delay = min(max_backoff, initial_backoff * 2 ** (attempt - 1))
                time.sleep(delay * random.uniform(0.5, 1.0))
                if bar is not None:
                    bar.reset()
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
        if bar is not None:
            bar.close()
