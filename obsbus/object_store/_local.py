"""``file://`` (a local or mounted folder) and ``memory://`` (tests) stores: no library needed."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from pathlib import Path

from typing_extensions import override

from obsbus.object_store._uri import BucketURI
from obsbus.object_store.object_store import ObjectStore, Progress, exists_error

__all__ = ["LocalObjectStore", "MemoryObjectStore"]

_CHUNK = 1 << 20


def _copy(src: Path, dst: Path, progress: Progress | None, total: int) -> None:
    done = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(_CHUNK):
            fout.write(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)


class LocalObjectStore(ObjectStore):
    """Objects are files under a folder; writes go to a temporary name and are renamed.

    ``overwrite=False`` links the finished copy into place, which fails
    atomically if the name exists (on file systems without hard links it
    checks first, then renames).
    """

    def __init__(self, uri: BucketURI) -> None:
        super().__init__(uri)
        self.root = Path(uri.prefix)

    def _path(self, name: str) -> Path:
        path = Path(os.path.normpath(self.root / name))
        if not path.is_relative_to(self.root):
            raise ValueError(f"Remote file name {name!r} leaves {self.display}.")
        return path

    @override
    def upload(self, local: Path, name: str, *, overwrite: bool) -> None:
        dest = self._path(name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.obsbus-{uuid.uuid4().hex[:8]}")
        try:
            shutil.copyfile(local, tmp)
            if overwrite:
                os.replace(tmp, dest)
                return
            try:
                os.link(tmp, dest)
            except FileExistsError:
                raise exists_error(self, name) from None
            except OSError:  # no hard links here: check, then rename
                if dest.exists():
                    raise exists_error(self, name) from None
                os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)

    @override
    def download(self, name: str, local: Path, progress: Progress | None = None) -> None:
        src = self._path(name)
        if not src.is_file():
            raise FileNotFoundError(f"{self.object_uri(name)} does not exist")
        _copy(src, local, progress, src.stat().st_size)

    @override
    def size(self, name: str) -> int | None:
        path = self._path(name)
        return path.stat().st_size if path.is_file() else None


_BUCKETS: dict[str, dict[str, bytes]] = {}
_LOCK = threading.Lock()


class MemoryObjectStore(ObjectStore):
    """Objects are bytes in this process, shared by every store of the same bucket (tests)."""

    def __init__(self, uri: BucketURI) -> None:
        super().__init__(uri)
        with _LOCK:
            self.objects = _BUCKETS.setdefault(uri.bucket, {})

    def _key(self, name: str) -> str:
        return f"{self.uri.prefix}/{name}" if self.uri.prefix else name

    @override
    def upload(self, local: Path, name: str, *, overwrite: bool) -> None:
        data = local.read_bytes()
        with _LOCK:
            if not overwrite and self._key(name) in self.objects:
                raise exists_error(self, name)
            self.objects[self._key(name)] = data

    @override
    def download(self, name: str, local: Path, progress: Progress | None = None) -> None:
        with _LOCK:
            data = self.objects.get(self._key(name))
        if data is None:
            raise FileNotFoundError(f"{self.object_uri(name)} does not exist")
        local.write_bytes(data)
        if progress is not None:
            progress(len(data), len(data))

    @override
    def size(self, name: str) -> int | None:
        with _LOCK:
            data = self.objects.get(self._key(name))
        return None if data is None else len(data)
