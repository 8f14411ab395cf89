"""Bucket URIs: parse and check them, and mask credentials in any text."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["SUPPORTED_SCHEMES", "BucketURI", "mask_secrets", "parse_bucket_uri"]

#: Schemes a bucket URI may use, and what each one means.
SUPPORTED_SCHEMES: dict[str, str] = {
    "file": "file:///abs/folder or file://relative/folder: a local or mounted folder",
    "memory": "memory://bucket: in this process's memory, for tests",
    "s3": "s3://bucket/prefix: AWS S3 or an S3-compatible store (MinIO, R2, Ceph) "
    "through endpoint_url",
    "gs": "gs://bucket/prefix: Google Cloud Storage",
    "az": "az://container/prefix: Azure Blob Storage (account from AZURE_STORAGE_ACCOUNT_NAME)",
    "abfs": "abfs://container@account.dfs.core.windows.net/prefix: Azure Data Lake / Blob",
    "abfss": "abfss://container@account.dfs.core.windows.net/prefix: the same over TLS",
    "sftp": "sftp://user@host:port/folder: an SSH server",
}
#: The pip extra each scheme needs (``file`` and ``memory`` need none).
SCHEME_EXTRAS = {
    "s3": "s3",
    "gs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "sftp": "sftp",
}
_SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|CREDENTIAL|PASSPHRASE|SAS|SIG", re.I)


def accepted_schemes() -> str:
    """One line per supported scheme, for error messages."""
    return "; ".join(SUPPORTED_SCHEMES.values())


def env_secrets() -> list[str]:
    """Values of environment variables whose names look secret (to mask in messages)."""
    return [v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 6]


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URI credentials, secret query values, token-shaped values and each of
    ``secrets`` masked: :func:`obsbus.masking.mask_secrets`, the one masking function.

    Example:
        >>> mask_secrets("sftp://ada:hunter22@host/x failed", ["tok-123456"])
        'sftp://***@host/x failed'
        >>> mask_secrets("GET https://acct.blob.core.windows.net/c?sv=1&sig=abc%2Bdef")
        'GET https://acct.blob.core.windows.net/c?sv=1&sig=***'
    """
    from obsbus import masking

    return masking.mask_secrets(text, secrets)


@dataclass(frozen=True)
class BucketURI:
    """A parsed bucket URI.

    Attributes:
        scheme: one of :data:`SUPPORTED_SCHEMES`.
        bucket: the bucket or container (``sftp``: the host; ``file``: ``""``).
        prefix: the folder inside the bucket that every name is relative to:
            no leading or trailing ``/``, except ``file`` (an absolute local
            folder) and ``sftp`` (the folder on the server, as written).
        account: the Azure storage account of an ``abfs``/``abfss`` URI.
        port: the ``sftp`` port.
        username: the ``sftp`` user.
    """

    scheme: str
    bucket: str
    prefix: str = ""
    account: str | None = None
    port: int | None = None
    username: str | None = None

    @property
    def display(self) -> str:
        """The URI as the user can read it, never with credentials."""
        if self.scheme == "file":
            return f"file://{self.prefix}"
        if self.scheme == "sftp":
            user = f"{self.username}@" if self.username else ""
            port = f":{self.port}" if self.port else ""
            path = self.prefix if self.prefix.startswith("/") else "/" + self.prefix
            return f"sftp://{user}{self.bucket}{port}{path.rstrip('/')}"
        if self.account is not None:
            base = f"{self.scheme}://{self.bucket}@{self.account}.dfs.core.windows.net"
        else:
            base = f"{self.scheme}://{self.bucket}"
        return f"{base}/{self.prefix}" if self.prefix else base

    def object_uri(self, name: str) -> str:
        """The URI of the object ``name`` (relative to the prefix)."""
        return f"{self.display.rstrip('/')}/{name}"


def _reject(uri: str, why: str, fix: str) -> ValueError:
    return ValueError(f"bucket_uri {mask_secrets(uri)!r} {why}. To fix, {fix}")


def parse_bucket_uri(uri: str) -> BucketURI:
    """Parse and check a bucket URI; errors list the accepted schemes.

    Credentials are never taken from a URI (they come from the environment or
    the backend's own configuration chain); a URI that embeds some is
    rejected with the secret masked.

    Raises:
        TypeError: ``uri`` is not a str.
        ValueError: no or unknown scheme, no bucket, or credentials in the URI.

    Example:
        >>> parse_bucket_uri("s3://my-bucket/runs")
        BucketURI(scheme='s3', bucket='my-bucket', prefix='runs', account=None, port=None, username=None)
        >>> parse_bucket_uri("ftp://host/x")
        Traceback (most recent call last):
        ...
        ValueError: bucket_uri 'ftp://host/x' has an unsupported scheme 'ftp'. To fix, use one of: ...
    """  # noqa: E501
    if not isinstance(uri, str):
        raise TypeError(f"bucket_uri must be a str such as 's3://bucket', got {uri!r}.")
    if "://" not in uri:
        raise _reject(uri, "has no scheme", f"use one of: {accepted_schemes()}.")
    scheme = uri.split("://", 1)[0].lower()
    if scheme not in SUPPORTED_SCHEMES:
        raise _reject(
            uri, f"has an unsupported scheme {scheme!r}", f"use one of: {accepted_schemes()}."
        )
    parts = urlsplit(uri)
    if parts.query or parts.fragment:
        raise _reject(
            uri,
            "has a query or fragment (credentials such as SAS tokens are never read from a URI)",
            "remove it and give credentials through the environment or the backend's "
            "configuration chain.",
        )
    has_password = parts.password is not None
    if has_password or ("@" in parts.netloc and scheme in ("s3", "gs", "az", "memory", "file")):
        raise _reject(
            uri,
            "embeds credentials, and obsbus reads credentials only from the environment or "
            "the backend's own configuration chain",
            "remove them from the URI and set them in the environment (e.g. "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, OBSBUS_SFTP_PASSWORD) or use an SSH key.",
        )
    path = parts.path
    if scheme == "file":
        where = parts.netloc + path if parts.netloc not in ("", "localhost") else path
        if not where:
            raise _reject(uri, "names no folder", "write file:///abs/folder.")
        return BucketURI("file", "", str(Path(where).expanduser().absolute()))
    if scheme == "sftp":
        if not parts.hostname:
            raise _reject(uri, "names no host", "write sftp://user@host:port/folder.")
        try:
            port = parts.port
        except ValueError:
            raise _reject(uri, "has an invalid port", "write sftp://user@host:22/folder.") from None
        return BucketURI("sftp", parts.hostname, path, port=port, username=parts.username)
    prefix = path.strip("/")
    if scheme in ("abfs", "abfss"):
        container, _, host = parts.netloc.partition("@")
        account = host.split(".", 1)[0]
        if not container or not account:
            raise _reject(
                uri,
                "names no container or account",
                "write abfs://container@account.dfs."
                "core.windows.net/prefix, or az://container/prefix with "
                "AZURE_STORAGE_ACCOUNT_NAME set.",
            )
        return BucketURI(scheme, container, prefix, account=account)
    if not parts.netloc:
        raise _reject(uri, "names no bucket", f"write {scheme}://bucket/optional/prefix.")
    return BucketURI(scheme, parts.netloc, prefix)
