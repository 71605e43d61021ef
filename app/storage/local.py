"""``LocalDirectoryStore``: the dev-only archive in a local directory.

Write-once against the service itself: a second ``put_once`` of a key fails, because the object
is published with ``link(2)``, which refuses an existing name atomically (no check-then-write
race). It is **not** write-once against anyone with access to the files, which is why building one
emits a ``DevOnlyWarning`` and production settings refuse it.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

from app.storage.errors import ObjectAlreadyExists, ObjectNotFound, StoreUnavailable
from app.storage.port import StoredObject, sha256_hex, validate_key
from app.warnings import DevOnlyWarning


class LocalDirectoryStore:
    """Objects are files under ``root``; keys map to relative paths (validated, no ``..``)."""

    def __init__(self, root: Path) -> None:
        warnings.warn(
            f"LocalDirectoryStore at {root} is not write-once storage; use S3 in production",
            DevOnlyWarning,
            stacklevel=2,
        )
        self._root = root.resolve()
        self._root.mkdir(parents=True, exist_ok=True)

    @property
    def root(self) -> Path:
        return self._root

    def _path(self, key: str) -> Path:
        return self._root / validate_key(key)

    def put_once(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> StoredObject:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write a private temp file (its ".tmp-" name can never be a valid key), make it durable
        # and read-only, then publish it under the key with link(): atomic and never overwriting.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o444)
            try:
                os.link(tmp, path)
            except FileExistsError as exc:
                raise ObjectAlreadyExists(key) from exc
        finally:
            os.unlink(tmp)
        _fsync_dir(path.parent)
        return StoredObject(key, sha256_hex(data), len(data), self.uri(key), "local")

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise ObjectNotFound(key) from exc

    def stat(self, key: str) -> StoredObject:
        data = self.get(key)
        return StoredObject(key, sha256_hex(data), len(data), self.uri(key), "local")

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()

    def check(self) -> None:
        if not self._root.is_dir() or not os.access(self._root, os.W_OK | os.X_OK):
            raise StoreUnavailable(f"archive directory {self._root} is missing or not writable")


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
