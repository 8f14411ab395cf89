"""Route a component's files to the bucket a URI names (FileLogger, trace handlers, TorchProfiler).

A component given ``s3://bucket/path`` (a ``remote_folder``, or a remote file
name that is a URI) keeps one :class:`RemoteFiles`. At ``init`` it asks
:func:`~obsbus.loggers.remote_uploader_downloader.maybe_create_remote_uploader_downloader_from_uri`
for an uploader: when a ``RemoteUploaderDownloader`` in ``loggers`` already
stores that bucket, the files go through ``logger.upload_file`` alone;
otherwise the component owns a private uploader, which it closes at its own
``close``. Either way every file-storing destination also gets the file under
the same name, as if the private uploader were one more destination (Composer
appends it to ``loggers``). Not API.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from obsbus.loggers.remote_uploader_downloader import (
    RemoteUploaderDownloader,
    maybe_create_remote_uploader_downloader_from_uri,
    parse_uri,
)
from obsbus.masking import mask_secrets
from obsbus.naming import check_placeholders
from obsbus.object_store import build_object_store, parse_bucket_uri

if TYPE_CHECKING:
    from obsbus.logger import Logger
    from obsbus.state import State

__all__ = ["RemoteFiles", "check_remote_name", "check_remote_uri", "is_uri", "join"]

log = logging.getLogger("obsbus")


def is_uri(name: str) -> bool:
    """Whether ``name`` names a bucket (``scheme://...``) rather than a plain remote name."""
    return bool(parse_uri(name)[0])


def _bucket_uri(uri: str) -> str:
    """The bucket part of ``uri``, as the uploader helper builds it."""
    scheme, rest = uri.split("://", 1)
    return "file:///" if scheme.lower() == "file" else f"{scheme}://{rest.split('/', 1)[0]}"


def _object_name(uri: str) -> str:
    """The object's name in its bucket (``file://``: the absolute path without its ``/``)."""
    return parse_bucket_uri(uri).prefix.lstrip("/")


def check_remote_uri(uri: object, what: str, *, needs_name: bool = False) -> str:
    """Check a bucket URI template at construction; build its store once to find a missing extra.

    Placeholders (``{run_name}``, ``{rank}``, ...) may appear in the path, not
    in the bucket. Credentials in the URI are refused, with the secret masked.

    Raises:
        TypeError: not a non-empty str.
        ValueError: a bad scheme or bucket (the message lists the supported
            schemes), credentials in the URI, an unknown placeholder, or no
            object name where ``needs_name``.
        obsbus.errors.MissingExtraError: the scheme's backend is not installed.
    """
    try:
        return _check_remote_uri(uri, what, needs_name)
    except (TypeError, ValueError) as exc:  # every message quotes the URI: never its secrets
        raise type(exc)(mask_secrets(str(exc))) from None


def _check_remote_uri(uri: object, what: str, needs_name: bool) -> str:
    if not isinstance(uri, str) or not uri:
        raise TypeError(f"{what} must be a bucket URI such as 's3://bucket/path', got {uri!r}.")
    try:
        parse_bucket_uri(uri)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    scheme, rest = uri.split("://", 1)
    bucket = rest.split("/", 1)[0]
    if scheme.lower() != "file" and ("{" in bucket or "}" in bucket):
        raise ValueError(
            f"{what} {uri!r} has a placeholder in its bucket {bucket!r}; the uploader is made "
            f"before the run starts. To fix, put placeholders in the path, e.g. "
            f"'{scheme}://my-bucket/{{run_name}}'."
        )
    check_placeholders(uri, what)
    if needs_name and not _object_name(uri):
        raise ValueError(
            f"{what} {uri!r} names a bucket but no file in it. To fix, add the object's name, "
            f"e.g. '{uri.rstrip('/')}/{{run_name}}/trace.json'."
        )
    build_object_store(_bucket_uri(uri)).close()
    return uri


def check_remote_name(name: object, what: str) -> object:
    """Check ``name`` as a URI if it is one; other values are returned for the caller's checks."""
    if isinstance(name, str) and is_uri(name):
        check_remote_uri(name, what, needs_name=True)
    return name


def join(folder: str, file_name: str) -> str:
    """``folder/file_name`` (``folder`` may be a URI or a plain remote folder)."""
    return f"{folder.rstrip('/')}/{file_name}"


class RemoteFiles:
    """Uploads one component's files; a private uploader per bucket no destination stores.

    Args:
        owner: the component's name, for messages.
        names: its remote names or folders; the URIs among them (checked by
            :func:`check_remote_uri` already) name the buckets. ``None`` and
            plain names are skipped.
    """

    def __init__(self, owner: str, names: Iterable[str | None]) -> None:
        self.owner = owner
        self._buckets = {_bucket_uri(n): n for n in names if n is not None and is_uri(n)}
        self._private: dict[str, RemoteUploaderDownloader | None] = {}
        self._state: State | None = None

    @property
    def uploaders(self) -> list[RemoteUploaderDownloader]:
        """The private uploaders made at the last ``init`` (see their ``failed_uploads``)."""
        return [u for u in self._private.values() if u is not None]

    def init(self, state: State, logger: Logger) -> None:
        """Find the destination that stores each bucket, or make and init a private uploader."""
        if not self._buckets:
            return
        self._close_uploaders(state, logger)  # a re-init: the destinations may differ now
        self._state = state
        private: dict[str, RemoteUploaderDownloader | None] = {}
        for bucket, uri in self._buckets.items():
            uploader = maybe_create_remote_uploader_downloader_from_uri(uri, logger.destinations)
            if uploader is not None:
                uploader.init(state, logger)
            log.debug(
                "obsbus: %s sends files to %s through %s.",
                self.owner,
                bucket,
                "its own uploader" if uploader is not None else "the uploader in loggers",
            )
            private[bucket] = uploader
        self._private = private

    def upload(self, logger: Logger, name: str, path: Path, *, overwrite: bool) -> None:
        """Hand ``path`` over as ``name`` (placeholders filled now); failures are contained.

        A URI goes to its bucket's private uploader, if any, as the object
        name after the bucket; every file-storing destination gets that name
        too. A plain name goes to the destinations only.
        """
        remote = logger.format_name(name)
        if is_uri(remote):
            uploader = self._private.get(_bucket_uri(remote))
            remote = _object_name(remote)
            state = self._state
            if uploader is not None and state is not None:
                logger.failures.call(
                    uploader,
                    "upload_file",
                    lambda: uploader.upload_file(state, remote, path, overwrite=overwrite),
                )
        if logger.has_file_uploader():
            logger.upload_file(remote, path, overwrite=overwrite)

    def fit_end(self, state: State, logger: Logger) -> None:
        """Wait (bounded) for the private uploads.

        Failures are contained and reported like a destination's (raised only
        with ``strict=True``), so a trace handler's upload can't stop training.
        """
        for uploader in self.uploaders:
            logger.failures.call(uploader, "fit_end", uploader.fit_end, state, logger)

    def exception(self, state: State, logger: Logger) -> None:
        """Send what was handed over before the crash, or report it."""
        for uploader in self.uploaders:
            logger.failures.call(uploader, "exception", uploader.exception, state, logger)

    def close(self, state: State, logger: Logger) -> None:
        """Wait for every pending upload, report the failures, release the stores.

        Call it after the component handed over its last files. The uploaders
        stay listed in :attr:`uploaders` until the next ``init``.
        """
        self._close_uploaders(state, logger)

    def _close_uploaders(self, state: State, logger: Logger) -> None:
        for uploader in self.uploaders:
            try:
                logger.failures.call(uploader, "close", uploader.close, state, logger)
            finally:
                logger.failures.call(uploader, "post_close", uploader.post_close)
