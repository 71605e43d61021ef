"""Object storage for run archives: the ``ArtifactStore`` port and its adapters.

``build_store(settings)`` picks the adapter: ``S3ArtifactStore`` (``FUTURE_TS_STORE=s3``) or the
dev-only ``LocalDirectoryStore`` (the default, which warns that it is not write-once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.storage.errors import (
    InvalidKey,
    ObjectAlreadyExists,
    ObjectCorrupted,
    ObjectNotFound,
    StoreError,
    StoreMisconfigured,
    StoreUnavailable,
)
from app.storage.port import ArtifactStore, StoredObject, WriteOnce, put_once_or_same

if TYPE_CHECKING:
    from app.settings import Settings

__all__ = [
    "ArtifactStore",
    "InvalidKey",
    "ObjectAlreadyExists",
    "ObjectCorrupted",
    "ObjectNotFound",
    "StoreError",
    "StoreMisconfigured",
    "StoreUnavailable",
    "StoredObject",
    "WriteOnce",
    "build_store",
    "init_store",
    "put_once_or_same",
]


def build_store(settings: Settings) -> ArtifactStore:
    """The store selected by ``settings.store``."""
    if settings.store == "s3":
        from app.storage.s3 import S3ArtifactStore  # boto3 is only imported when S3 is used

        return S3ArtifactStore(
            bucket=settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key=settings.s3_access_key.get_secret_value() or None,
            secret_key=settings.s3_secret_key.get_secret_value() or None,
            object_lock_mode=settings.object_lock_mode,
            object_lock_days=settings.object_lock_days,
        )
    from app.storage.local import LocalDirectoryStore

    return LocalDirectoryStore(settings.local_store_dir)


def init_store(settings: Settings) -> str:
    """``future-ts store init``: make the archive ready; returns a line for the operator."""
    if settings.store == "s3":
        from app.storage.s3 import S3ArtifactStore

        store = build_store(settings)
        assert isinstance(store, S3ArtifactStore)
        store.init_bucket()
        return (f"bucket {store.bucket!r} is ready: Object Lock {settings.object_lock_mode}, "
                f"{settings.object_lock_days} days default retention")
    local = build_store(settings)
    local.check()
    return (f"local archive directory {settings.local_store_dir} is ready "
            "(dev only: it is not write-once storage)")
