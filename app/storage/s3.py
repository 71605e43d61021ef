"""``S3ArtifactStore``: write-once run archives on S3 (AWS, MinIO, SeaweedFS >= 3.95).

How write-once is enforced, detected once per store from the bucket:

* **Object Lock bucket** (``get_object_lock_configuration`` says ``Enabled``): every object is
  written with a retention (``object_lock_mode``, default GOVERNANCE, for ``object_lock_days``)
  so no API caller can delete or overwrite that version before it expires (COMPLIANCE: not even
  the root account; GOVERNANCE: only with ``s3:BypassGovernanceRetention`` *and* the bypass
  header). Before writing, the key is checked (``HEAD``, then the version list, because a key
  whose current version is a delete marker answers ``HEAD`` with 404), and the PUT also carries
  ``If-None-Match: *``.
* **Plain bucket**: the PUT carries ``If-None-Match: *``; S3 evaluates it atomically and answers
  412 when the key exists.

The race, and why it is harmless: between the existence check and the PUT another writer may
create the key. ``If-None-Match: *`` closes that window while the key's current version is a real
object. It cannot when the current version is a delete marker (someone deleted the object through
the API): both requests pass and a second *version* is stored. Versioning never overwrites a
version in place and Object Lock keeps the first one until its retention ends, and ``get`` /
``stat`` on a lock bucket always read the **oldest** version, i.e. the bytes written first, so
signed digests keep verifying against the original bytes. On a plain bucket a delete followed by a
new PUT is a real overwrite: that is why production buckets must have Object Lock (``init_bucket``).

Every object records its SHA-256 twice: as the S3 checksum (``ChecksumSHA256``, verified by the
server on upload, which also satisfies AWS's "Content-MD5 or x-amz-checksum-* required with Object
Lock" rule) and as user metadata ``sha256`` (hex), which ``get`` checks on the way out.

Client settings: path-style addressing and SigV4 (S3-compatible servers), and
``request_checksum_calculation`` / ``response_checksum_validation`` = ``when_required``: since
boto3 1.36 the SDK otherwise adds its own CRC32/CRC64NVME checksums (as trailers for streamed
bodies), which several S3-compatible servers reject. Checked on this project's SeaweedFS 4.48 with
boto3 1.44: it accepts both the defaults (an ``x-amz-checksum-crc32`` header for a ``bytes`` body)
and these settings, with and without Object Lock headers; the settings stay for the other servers,
and because the checksum we want recorded is our SHA-256, which we send explicitly.

This module is the only one that imports ``botocore``: every vendor error becomes a port error.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from app.storage.errors import (
    ObjectAlreadyExists,
    ObjectCorrupted,
    ObjectNotFound,
    StoreError,
    StoreMisconfigured,
    StoreUnavailable,
)
from app.storage.port import StoredObject, validate_key

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LockMode = Literal["GOVERNANCE", "COMPLIANCE"]
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchVersion"})
_EXISTS = frozenset({"412", "PreconditionFailed", "ConditionalRequestConflict"})
_DENIED = frozenset({"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"})
_NO_LOCK_CONFIG = frozenset({"ObjectLockConfigurationNotFoundError", "NotImplemented"})


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextmanager
def _boundary(key: str | None = None) -> Iterator[None]:
    """Translate botocore errors into port errors (the one place vendor errors are seen)."""
    try:
        yield
    except ClientError as exc:
        code = _code(exc)
        if code == "NoSuchBucket":
            raise StoreUnavailable(f"no bucket; run `future-ts store init`: {exc}") from exc
        if key is not None and code in _NOT_FOUND:
            raise ObjectNotFound(key) from exc
        if code in _DENIED:
            raise StoreUnavailable(f"the S3 store refused our credentials: {exc}") from exc
        raise StoreError(f"S3 error {code}: {exc}") from exc
    except BotoCoreError as exc:  # connection refused, timeouts, DNS, bad endpoint
        raise StoreUnavailable(f"the S3 store is unreachable: {exc}") from exc


class S3ArtifactStore:
    """The production ``ArtifactStore`` (see the module docstring for the write-once rules)."""

    def __init__(
        self,
        *,
        bucket: str,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key: str | None = None,
        secret_key: str | None = None,
        object_lock_mode: LockMode = "GOVERNANCE",
        object_lock_days: int = 365,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
    ) -> None:
        if object_lock_days < 1:
            raise ValueError("object_lock_days must be at least 1")
        config = Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": max_attempts, "mode": "standard"},
        )
        self._client: S3Client = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            aws_access_key_id=access_key or None,
            aws_secret_access_key=secret_key or None,
            config=config,
        )
        self._bucket = bucket
        self._region = region
        self._mode: LockMode = object_lock_mode
        self._days = object_lock_days
        self._lock: bool | None = None  # detected on first use

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def object_lock_enabled(self) -> bool:
        """Whether the bucket has Object Lock (asked once, then cached)."""
        if self._lock is None:
            self._lock = self._detect_object_lock()
        return self._lock

    def _detect_object_lock(self) -> bool:
        with _boundary():
            try:
                answer = self._client.get_object_lock_configuration(Bucket=self._bucket)
            except ClientError as exc:
                if _code(exc) in _NO_LOCK_CONFIG:  # a bucket without lock, or a server without it
                    return False
                raise
        config = answer.get("ObjectLockConfiguration", {})
        return config.get("ObjectLockEnabled") == "Enabled"

    # --- the port ---------------------------------------------------------------------------

    def put_once(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> StoredObject:
        validate_key(key)
        digest = hashlib.sha256(data).digest()
        request: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": key,
            "Body": data,
            "ContentType": content_type,
            "ChecksumSHA256": base64.b64encode(digest).decode(),
            "Metadata": {"sha256": digest.hex()},
            "IfNoneMatch": "*",
        }
        locked = self.object_lock_enabled
        retain_until = None
        if locked:
            if self._was_written(key):
                raise ObjectAlreadyExists(key)
            retain_until = datetime.now(UTC) + timedelta(days=self._days)
            request["ObjectLockMode"] = self._mode
            request["ObjectLockRetainUntilDate"] = retain_until
        with _boundary(key):
            try:
                answer = self._client.put_object(**request)
            except ClientError as exc:
                if _code(exc) in _EXISTS:
                    raise ObjectAlreadyExists(key) from exc
                raise
        return StoredObject(
            key, digest.hex(), len(data), self.uri(key),
            "object_lock" if locked else "if_none_match",
            answer.get("VersionId"), retain_until,
        )

    def get(self, key: str) -> bytes:
        validate_key(key)
        version = self._first_version(key) if self.object_lock_enabled else None
        with _boundary(key):
            if version is None:
                answer = self._client.get_object(Bucket=self._bucket, Key=key)
            else:
                answer = self._client.get_object(Bucket=self._bucket, Key=key, VersionId=version)
            data = answer["Body"].read()
        recorded = answer.get("Metadata", {}).get("sha256")
        actual = hashlib.sha256(data).hexdigest()
        if recorded is not None and recorded != actual:
            raise ObjectCorrupted(key, recorded, actual)
        return data

    def stat(self, key: str) -> StoredObject:
        validate_key(key)
        version = self._first_version(key) if self.object_lock_enabled else None
        with _boundary(key):
            if version is None:
                head = self._client.head_object(Bucket=self._bucket, Key=key)
            else:
                head = self._client.head_object(Bucket=self._bucket, Key=key, VersionId=version)
        digest = head.get("Metadata", {}).get("sha256")
        if digest is None:  # not written by this store: hash the bytes themselves
            digest = hashlib.sha256(self.get(key)).hexdigest()
        return StoredObject(
            key, digest, head["ContentLength"], self.uri(key),
            "object_lock" if self.object_lock_enabled else "if_none_match",
            head.get("VersionId"), head.get("ObjectLockRetainUntilDate"),
        )

    def exists(self, key: str) -> bool:
        validate_key(key)
        if self.object_lock_enabled:
            return self._was_written(key)
        return self._head_exists(key)

    def uri(self, key: str) -> str:
        return f"s3://{self._bucket}/{key}"

    def check(self) -> None:
        try:
            with _boundary():
                self._client.head_bucket(Bucket=self._bucket)
        except StoreUnavailable:
            raise
        except StoreError as exc:  # a bare 404 from HEAD bucket carries no "NoSuchBucket" code
            raise StoreUnavailable(f"bucket {self._bucket!r} is not usable: {exc}") from exc

    # --- operator actions -------------------------------------------------------------------

    def init_bucket(self) -> None:
        """Create the bucket with Object Lock and set its default retention (idempotent).

        An existing bucket without Object Lock is refused (``StoreMisconfigured``): S3-compatible
        servers cannot add Object Lock to an existing bucket, so create a new one.
        """
        create: dict[str, Any] = {"Bucket": self._bucket, "ObjectLockEnabledForBucket": True}
        if self._region != "us-east-1":  # us-east-1 rejects an explicit LocationConstraint
            create["CreateBucketConfiguration"] = {"LocationConstraint": self._region}
        with _boundary():
            try:
                self._client.create_bucket(**create)
            except ClientError as exc:
                if _code(exc) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                    raise
        rule = {"DefaultRetention": {"Mode": self._mode, "Days": self._days}}
        with _boundary():
            try:
                self._client.put_object_lock_configuration(
                    Bucket=self._bucket,
                    ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": rule},  # type: ignore[typeddict-item]  # mode is a checked Literal
                )
            except ClientError as exc:
                if _code(exc) == "InvalidBucketState":
                    raise StoreMisconfigured(
                        f"bucket {self._bucket!r} exists without Object Lock; "
                        "Object Lock can only be enabled when a bucket is created"
                    ) from exc
                raise
        self._lock = True

    # --- helpers ----------------------------------------------------------------------------

    def _head_exists(self, key: str) -> bool:
        with _boundary(key):
            try:
                self._client.head_object(Bucket=self._bucket, Key=key)
            except ClientError as exc:
                if _code(exc) in _NOT_FOUND:
                    return False
                raise
        return True

    def _was_written(self, key: str) -> bool:
        """HEAD first (the common case), then any version or delete marker of exactly ``key``."""
        if self._head_exists(key):
            return True
        return bool(self._versions(key, include_delete_markers=True))

    def _first_version(self, key: str) -> str | None:
        versions = self._versions(key, include_delete_markers=False)
        if not versions:
            raise ObjectNotFound(key)
        return versions[-1]  # S3 lists the versions of a key newest first

    def _versions(self, key: str, *, include_delete_markers: bool) -> list[str]:
        found: list[str] = []
        with _boundary(key):
            pages = self._client.get_paginator("list_object_versions").paginate(
                Bucket=self._bucket, Prefix=key
            )
            for page in pages:
                entries: list[Any] = list(page.get("Versions", []))
                if include_delete_markers:
                    entries += page.get("DeleteMarkers", [])
                found += [e["VersionId"] for e in entries if e.get("Key") == key]
        return found
