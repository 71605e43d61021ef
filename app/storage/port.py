"""The ``ArtifactStore`` port: write-once object storage for run archives.

Implementations: ``S3ArtifactStore`` (production; S3 Object Lock or ``If-None-Match: *``) and
``LocalDirectoryStore`` (dev only, not write-once against anyone with file access). Both refuse a
second write of a key with ``ObjectAlreadyExists``; none ever overwrites.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from app.storage.errors import InvalidKey, ObjectAlreadyExists

WriteOnce = Literal["object_lock", "if_none_match", "local"]
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]*")


@dataclass(frozen=True)
class StoredObject:
    """What a store recorded for one object."""

    key: str
    sha256: str  # lowercase hex of the stored bytes
    size: int
    uri: str
    write_once: WriteOnce  # how the store enforced write-once for this object
    version_id: str | None = None  # S3 version id of the object (versioned/Object Lock buckets)
    retain_until: datetime | None = None  # Object Lock retention end


@runtime_checkable
class ArtifactStore(Protocol):
    def put_once(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> StoredObject:
        """Store ``data`` at ``key`` exactly once.

        Records the SHA-256 of ``data`` with the object. Raises ``ObjectAlreadyExists`` if
        ``key`` was ever written (the existing object is left untouched), ``InvalidKey`` for an
        unsafe key, ``StoreUnavailable`` when the store cannot be reached.
        """
        ...

    def get(self, key: str) -> bytes:
        """Return the bytes written at ``key``; ``ObjectNotFound`` if there are none."""
        ...

    def stat(self, key: str) -> StoredObject:
        """Return what was recorded for ``key`` (digest, size, version); ``ObjectNotFound``."""
        ...

    def exists(self, key: str) -> bool:
        """Whether ``key`` was written (so that ``put_once`` would refuse it)."""
        ...

    def uri(self, key: str) -> str:
        """A stable locator for ``key`` (``s3://bucket/key`` or ``file:///...``) for reports."""
        ...

    def check(self) -> None:
        """Return if the store is reachable and usable, else raise ``StoreUnavailable``.

        Cheap enough for a readiness probe (``/readyz``): one request, no writes.
        """
        ...


def validate_key(key: str) -> str:
    """Keys are ``/``-separated segments of ``[A-Za-z0-9._=-]`` not starting with ``.``."""
    segments = key.split("/")
    if not key or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise InvalidKey(f"invalid object key {key!r}")
    return key


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put_once_or_same(
    store: ArtifactStore, key: str, data: bytes, content_type: str = "application/octet-stream"
) -> StoredObject:
    """``put_once`` that accepts an existing object with identical bytes (idempotent retries).

    A task redelivered after a crash between the upload and the database commit re-uploads the
    same bytes; that is not a second write. Different bytes still raise ``ObjectAlreadyExists``.
    """
    try:
        return store.put_once(key, data, content_type)
    except ObjectAlreadyExists:
        existing = store.stat(key)
        if existing.sha256 != sha256_hex(data):
            raise
        return existing
