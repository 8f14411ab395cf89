"""``sftp://`` through fsspec's ``sshfs`` (asyncssh): obstore has no SFTP."""

from __future__ import annotations

import contextlib
import importlib
import os
import posixpath
import threading
import uuid
from pathlib import Path
from typing import Any

from typing_extensions import override

from obsbus.errors import MissingExtraError
from obsbus.object_store._uri import BucketURI
from obsbus.object_store.object_store import ObjectStore, Progress, exists_error

__all__ = ["SFTPObjectStore"]

_CHUNK = 1 << 20
_PERMANENT_NAMES = ("PermissionDenied", "HostKeyNotVerifiable", "KeyImportError", "ProtocolError")


class SFTPObjectStore(ObjectStore):
    """Objects are files under a folder on an SSH server.

    Credentials come from the environment or asyncssh's own chain (SSH agent,
    ``~/.ssh`` keys and ``known_hosts``): ``OBSBUS_SFTP_PASSWORD``,
    ``OBSBUS_SFTP_KEY_FILE`` (a private key) and
    ``OBSBUS_SFTP_KNOWN_HOSTS_FILE`` are read if set. The server's host key is
    checked against ``~/.ssh/known_hosts`` unless ``backend_kwargs`` says
    otherwise (``known_hosts=None`` turns the check off: tests only).
    ``backend_kwargs`` go to ``asyncssh.connect``. The connection opens on
    first use and is rebuilt after a transient error.

    A file is written under a temporary name and renamed into place, so an
    object is whole or absent. ``overwrite=False`` checks first (a narrow
    race with another writer remains).
    """

    def __init__(self, uri: BucketURI, backend_kwargs: dict[str, Any]) -> None:
        password = os.environ.get("OBSBUS_SFTP_PASSWORD")
        super().__init__(uri, [password] if password else [])
        try:
            sshfs = importlib.import_module("sshfs")  # untyped: no stubs
        except ImportError:
            raise MissingExtraError("sftp", "RemoteUploaderDownloader for sftp:// URIs") from None
        self._sshfs = sshfs
        connect: dict[str, Any] = {}
        if uri.port:
            connect["port"] = uri.port
        if uri.username:
            connect["username"] = uri.username
        if password:
            connect["password"] = password
        if key_file := os.environ.get("OBSBUS_SFTP_KEY_FILE"):
            connect["client_keys"] = [key_file]
        known = os.environ.get("OBSBUS_SFTP_KNOWN_HOSTS_FILE")
        connect["known_hosts"] = known if known else ()  # (): asyncssh's default file
        connect.update(backend_kwargs)
        connect.setdefault("timeout", 30)
        self._connect = connect
        self._fs: Any = None
        self._lock = threading.Lock()

    def _filesystem(self) -> Any:
        with self._lock:
            if self._fs is None:
                self._fs = self._sshfs.SSHFileSystem(
                    self.uri.bucket, skip_instance_cache=True, **self._connect
                )
            return self._fs

    def _path(self, name: str) -> str:
        return posixpath.join(self.uri.prefix, name) if self.uri.prefix else name

    @override
    def upload(self, local: Path, name: str, *, overwrite: bool) -> None:
        fs, path = self._filesystem(), self._path(name)
        if not overwrite and fs.exists(path):
            raise exists_error(self, name)
        folder, base = posixpath.split(path)
        tmp = posixpath.join(folder, f".{base}.obsbus-{uuid.uuid4().hex[:8]}")
        fs.put_file(str(local), tmp)
        try:
            fs.mv(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):  # a dead connection: the stray file stays
                fs.rm_file(tmp)
            raise

    @override
    def download(self, name: str, local: Path, progress: Progress | None = None) -> None:
        fs, path = self._filesystem(), self._path(name)
        total = int(fs.info(path)["size"])
        done = 0
        with fs.open(path, "rb", block_size=_CHUNK) as fin, open(local, "wb") as fout:
            while chunk := fin.read(_CHUNK):
                fout.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)

    @override
    def size(self, name: str) -> int | None:
        try:
            return int(self._filesystem().info(self._path(name))["size"])
        except FileNotFoundError:
            return None

    @override
    def reset(self) -> None:
        with self._lock:
            fs, self._fs = self._fs, None
        if fs is not None:
            with contextlib.suppress(Exception):  # a dead connection may fail to close
                if hasattr(fs, "close"):
                    fs.close()

    @override
    def close(self) -> None:
        self.reset()

    @override
    def is_transient(self, exc: BaseException) -> bool:
        if type(exc).__name__ in _PERMANENT_NAMES:
            return False
        if type(exc).__module__.startswith("asyncssh"):
            return True  # ConnectionLost, DisconnectError, ChannelOpenError, ...
        return super().is_transient(exc)
