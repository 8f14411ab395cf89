"""The object-store interface every bucket backend implements, and the factory.

Which library talks to the stores, and why. ``bench/bench_uploads.py
--libraries`` puts the same files with each library directly (one thread,
8 MiB parts) into moto's S3 server running in another process on 127.0.0.1;
two runs on 2 shared vCPUs, 2026-11-30:

======================================  ===============  ====================
                                        obstore 0.12.1   fsspec/s3fs 2026.9.0
======================================  ===============  ====================
import + build an S3 client             0.02 s           0.53-0.66 s
4 KiB object, one PUT                   7.5-10.0 ms      13.2-13.7 ms
1 MiB object                            20.4-22.7 ms     24.7-28.4 ms
100 MiB object, multipart               2.1-2.5 s        2.4-3.0 s
peak client memory, 100 MiB upload     +47 MiB          +161 MiB
======================================  ===============  ====================

obstore is 1.3-1.8x faster per request and builds a client 25x faster; the
server bounds large transfers for both. It keeps a large upload's memory to
about ``chunk_size x concurrency`` (s3fs read up to ten parts at once).
Beyond the numbers: obstore is one wheel without Python dependencies that
covers S3 (and MinIO, R2, Ceph through an endpoint), GCS and Azure, with
atomic create-only writes (``overwrite=False`` without a race, for objects
up to one part) and its own per-request retries. The fsspec family pins
exact versions of each other (``s3fs``, ``gcsfs`` and ``fsspec`` must
match), so ``gcsfs`` could not even be installed next to this ``s3fs``.
obstore has no SFTP, so ``sftp://`` goes through fsspec's ``sshfs``
(asyncssh), the one backend that family adds here. ``file://`` and
``memory://`` need no library.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from obsbus._check import check_iterable_of
from obsbus.object_store._uri import (
    BucketURI,
    accepted_schemes,
    env_secrets,
    mask_secrets,
    parse_bucket_uri,
)

__all__ = ["ObjectStore", "build_object_store"]

#: ``progress(bytes_done, total_bytes)``.
Progress = Callable[[int, int], None]

_PERMANENT_TYPES: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    PermissionError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    ValueError,
    TypeError,
    KeyError,
    NotImplementedError,
)
_PERMANENT_WORDS = re.compile(
    r"NoSuchBucket|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|InvalidBucketName|"
    r"AuthorizationHeaderMalformed|ExpiredToken|InvalidToken|AuthenticationFailed|"
    r"\b40[0-4] |not found|does not exist|permission denied|169\.254\.169\.254|"
    r"no credentials|MissingAccount",
    re.I,
)
_TRANSIENT_WORDS = re.compile(
    r"\b5\d\d\b|SlowDown|Throttl|TooManyRequests|\b429\b|RequestTimeout|InternalError|"
    r"ServiceUnavailable|connect|connection|reset|timed? ?out|broken pipe|temporar|EOF",
    re.I,
)
_SECRET_KWARG = re.compile(
    r"secret|password|passphrase|token|access_key|account_key|sas|service_account_key|"
    r"^key$|^credentials?$",
    re.I,
)
_XML_CODE = re.compile(r"<Code>([^<]*)</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")


def check_backend_kwargs(backend_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``backend_kwargs``, refusing secrets passed as plain values.

    Raises:
        TypeError: not a mapping with str keys.
        ValueError: a key that holds a credential.
    """
    if backend_kwargs is None:
        return {}
    if not isinstance(backend_kwargs, Mapping) or not all(
        isinstance(k, str) for k in backend_kwargs
    ):
        raise TypeError(f"backend_kwargs must be a dict with str keys, got {backend_kwargs!r}.")
    for key in backend_kwargs:
        if _SECRET_KWARG.search(key) and key not in ("credential_provider", "client_keys"):
            raise ValueError(
                f"backend_kwargs[{key!r}] looks like a credential; obsbus reads credentials "
                "only from the environment or the backend's own configuration chain, so "
                "they never land in a config file or a log. To fix, set it in the "
                "environment (e.g. AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS, "
                "AZURE_STORAGE_ACCOUNT_KEY, OBSBUS_SFTP_PASSWORD) instead."
            )
    return dict(backend_kwargs)


class ObjectStore:
    """One bucket (or folder) that names are relative to; subclasses talk to a backend.

    Every method is synchronous and safe to call from several threads; the
    uploader runs them on its worker threads. Names are ``/``-separated and
    relative to the URI's prefix. Messages never hold credentials
    (:meth:`mask`).

    Example:
        >>> import tempfile
        >>> store = build_object_store("memory://docs-bucket/runs")
        >>> local = Path(tempfile.mkdtemp()) / "hello.txt"
        >>> _ = local.write_text("hi")
        >>> store.upload(local, "r/hello.txt", overwrite=True)
        >>> store.size("r/hello.txt"), store.object_uri("r/hello.txt")
        (2, 'memory://docs-bucket/runs/r/hello.txt')
    """

    def __init__(self, uri: BucketURI, secrets: Iterable[str] = ()) -> None:
        if not isinstance(uri, BucketURI):
            raise TypeError(
                f"ObjectStore uri must be a BucketURI, got {uri!r}. To fix, build the store "
                "with build_object_store('s3://bucket/prefix') or pass parse_bucket_uri(...)."
            )
        self.uri = uri
        secrets = check_iterable_of(
            "ObjectStore", "secrets", secrets, str, accepted="a list of str (values to mask)"
        )
        self._secrets = [s for s in secrets if s]

    @property
    def display(self) -> str:
        """The bucket URI, without credentials."""
        return self.uri.display

    def object_uri(self, name: str) -> str:
        return self.uri.object_uri(name)

    def upload(self, local: Path, name: str, *, overwrite: bool) -> None:
        """Store ``local`` as ``name``; ``overwrite=False`` raises ``FileExistsError`` if present.

        The object appears whole or not at all.
        """
        raise NotImplementedError

    def download(self, name: str, local: Path, progress: Progress | None = None) -> None:
        """Write the object ``name`` to ``local``; ``FileNotFoundError`` if missing."""
        raise NotImplementedError

    def size(self, name: str) -> int | None:
        """The object's size in bytes, or ``None`` if there is none."""
        raise NotImplementedError

    def reset(self) -> None:
        """Drop connections after a transient error, so the next call starts fresh."""

    def close(self) -> None:
        """Release connections."""

    def is_transient(self, exc: BaseException) -> bool:
        """Whether retrying ``exc`` may help (connection reset, throttling, 5xx)."""
        if isinstance(exc, _PERMANENT_TYPES):
            return False
        text = f"{type(exc).__name__}: {exc}"
        if _PERMANENT_WORDS.search(text):
            return False
        if isinstance(exc, (OSError, TimeoutError, ConnectionError)):
            return True
        return bool(_TRANSIENT_WORDS.search(text))

    def mask(self, text: str) -> str:
        """``text`` with every credential this store knows of masked."""
        return mask_secrets(text, [*self._secrets, *env_secrets()])

    def describe_error(self, exc: BaseException) -> str:
        """The store's message for ``exc``: one masked line, its error code kept."""
        text = str(exc).split("\n\nDebug source", 1)[0]
        code, message = _XML_CODE.search(text), _XML_MESSAGE.search(text)
        head = re.split(r"<\?xml|<Error>", text, maxsplit=1)[0]
        head = " ".join(head.split())
        if code:
            head = f"{head.rstrip(': ')}: {code.group(1)}"
            if message:
                head += f": {message.group(1)}"
        if not head:
            head = type(exc).__name__
        if len(head) > 500:
            head = head[:497] + "..."
        return self.mask(f"{type(exc).__name__}: {head}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display!r})"


def exists_error(store: ObjectStore, name: str) -> FileExistsError:
    """The error for ``overwrite=False`` on an object that exists."""
    return FileExistsError(
        errno.EEXIST,
        f"{store.object_uri(name)} already exists and overwrite=False refuses to replace it. "
        "To fix, pass overwrite=True or choose another remote file name",
    )


def build_object_store(
    bucket_uri: str, backend_kwargs: Mapping[str, Any] | None = None
) -> ObjectStore:
    """The store for ``bucket_uri``; its backend library is imported here.

    Raises:
        ValueError: a bad URI (the message lists the supported schemes), or
            ``backend_kwargs`` the backend rejects.
        obsbus.errors.MissingExtraError: the scheme's backend is not installed.
    """
    uri = parse_bucket_uri(bucket_uri)
    kwargs = check_backend_kwargs(backend_kwargs)
    if uri.scheme in ("file", "memory"):
        from obsbus.object_store._local import LocalObjectStore, MemoryObjectStore

        if kwargs:
            raise ValueError(
                f"{uri.scheme}:// takes no backend_kwargs, got {sorted(kwargs)}. To fix, drop them."
            )
        return LocalObjectStore(uri) if uri.scheme == "file" else MemoryObjectStore(uri)
    if uri.scheme == "sftp":
        from obsbus.object_store._sftp import SFTPObjectStore

        return SFTPObjectStore(uri, kwargs)
    if uri.scheme in ("s3", "gs", "az", "abfs", "abfss"):
        from obsbus.object_store._obstore import ObstoreObjectStore

        return ObstoreObjectStore(uri, kwargs)
    raise ValueError(f"Unsupported scheme {uri.scheme!r}; accepted: {accepted_schemes()}.")
