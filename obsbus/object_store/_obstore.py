"""S3 (and S3-compatible), GCS and Azure through obstore (see :mod:`.object_store` for why)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from typing_extensions import override

from obsbus.errors import MissingExtraError
from obsbus.object_store._uri import SCHEME_EXTRAS, BucketURI
from obsbus.object_store.object_store import ObjectStore, Progress, exists_error

__all__ = ["ObstoreObjectStore"]

#: Parts of a multipart upload, and how many go at once per file: with the
#: uploader's 4 workers at most 4 x 2 x 8 MiB = 64 MiB of buffers, whatever the backlog.
DEFAULT_CHUNK_SIZE = 8 << 20
DEFAULT_PART_CONCURRENCY = 2
#: obstore retries each request (each part) a little; the uploader retries whole files.
DEFAULT_RETRY = {
    "max_retries": 2,
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)},
    "retry_timeout": timedelta(seconds=30),
}
_ALIASES = {"endpoint_url": "endpoint", "region_name": "region"}
_PERMANENT_NAMES = (
    "AlreadyExistsError",
    "PreconditionError",
    "InvalidPathError",
    "NotSupportedError",
    "UnknownConfigurationKeyError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "NotFoundError",
)


class ObstoreObjectStore(ObjectStore):
    """One S3, GCS or Azure bucket; names are relative to the URI's prefix.

    ``backend_kwargs`` go to obstore's ``S3Store``/``GCSStore``/``AzureStore``
    (``endpoint``, ``region``, ``client_options``, ``retry_config``,
    ``credential_provider``, ...; Composer's ``endpoint_url`` and
    ``region_name`` are accepted too), plus two of obsbus's own:
    ``upload_chunk_size`` (bytes per multipart part, default 8 MiB) and
    ``upload_concurrency`` (parts in flight per file, default 2). An
    ``http://`` endpoint (MinIO, a local test server) allows plain HTTP.
    Credentials come from the environment (``AWS_*``, ``GOOGLE_*``,
    ``AZURE_*``) or the cloud's metadata service, never from arguments.
    """

    def __init__(self, uri: BucketURI, backend_kwargs: dict[str, Any]) -> None:
        super().__init__(uri)
        try:
            import obstore
            from obstore.store import AzureStore, GCSStore, S3Store
        except ImportError:
            raise MissingExtraError(
                SCHEME_EXTRAS[uri.scheme], f"RemoteUploaderDownloader for {uri.scheme}:// URIs"
            ) from None
        self._obstore = obstore
        kwargs = {_ALIASES.get(k, k): v for k, v in backend_kwargs.items()}
        self.chunk_size = int(kwargs.pop("upload_chunk_size", DEFAULT_CHUNK_SIZE))
        self.part_concurrency = int(kwargs.pop("upload_concurrency", DEFAULT_PART_CONCURRENCY))
        if self.chunk_size < 5 << 20 or self.part_concurrency < 1:
            raise ValueError(
                f"upload_chunk_size must be >= 5 MiB (S3's smallest part) and "
                f"upload_concurrency >= 1, got {self.chunk_size!r} and "
                f"{self.part_concurrency!r}."
            )
        client_options: Any = dict(kwargs.pop("client_options", None) or {})
        kwargs.setdefault("retry_config", DEFAULT_RETRY)
        prefix = uri.prefix or None
        try:
            if uri.scheme == "s3":
                endpoint = (
                    kwargs.get("endpoint")
                    or os.environ.get("AWS_ENDPOINT_URL_S3")
                    or (os.environ.get("AWS_ENDPOINT_URL"))
                )
                if endpoint:
                    kwargs["endpoint"] = endpoint
                    if str(endpoint).startswith("http://"):
                        client_options.setdefault("allow_http", True)
                self._store: Any = S3Store(
                    uri.bucket, prefix=prefix, client_options=client_options, **kwargs
                )
            elif uri.scheme == "gs":
                self._store = GCSStore(
                    uri.bucket, prefix=prefix, client_options=client_options, **kwargs
                )
            else:
                # Given explicitly: obstore 0.12 panics on repr() when the account came
                # from the environment.
                account = (
                    uri.account
                    or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
                    or (os.environ.get("AZURE_STORAGE_ACCOUNT"))
                )
                if account:
                    kwargs.setdefault("account_name", account)
                self._store = AzureStore(
                    uri.bucket, prefix=prefix, client_options=client_options, **kwargs
                )
        except Exception as exc:
            raise ValueError(
                f"Could not set up {uri.display}: {self.describe_error(exc)}. To fix, check "
                "backend_kwargs and the environment (for az://, AZURE_STORAGE_ACCOUNT_NAME "
                "names the account)."
            ) from None

    @override
    def upload(self, local: Path, name: str, *, overwrite: bool) -> None:
        size = local.stat().st_size
        mode: Literal["create", "overwrite"] = "overwrite"
        if not overwrite:
            if size <= self.chunk_size:
                mode = "create"  # one atomic conditional PUT
            elif self.size(name) is not None:  # multipart can't be conditional: check first
                raise exists_error(self, name)
        try:
            with open(local, "rb") as f:
                self._obstore.put(
                    self._store,
                    name,
                    f,
                    mode=mode,
                    chunk_size=self.chunk_size,
                    max_concurrency=self.part_concurrency,
                )
        except Exception as exc:
            if type(exc).__name__ == "AlreadyExistsError":
                raise exists_error(self, name) from None
            raise

    @override
    def download(self, name: str, local: Path, progress: Progress | None = None) -> None:
        result = self._obstore.get(self._store, name)
        total = int(result.meta["size"])
        done = 0
        with open(local, "wb") as f:
            for chunk in result.stream(min_chunk_size=1 << 20):
                f.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)

    @override
    def size(self, name: str) -> int | None:
        try:
            return int(self._obstore.head(self._store, name)["size"])
        except FileNotFoundError:
            return None
        except Exception as exc:
            if type(exc).__name__ == "NotFoundError":
                return None
            raise

    @override
    def is_transient(self, exc: BaseException) -> bool:
        if type(exc).__name__ in _PERMANENT_NAMES:
            return False
        return super().is_transient(exc)
