"""``S3ArtifactStore`` against a real SeaweedFS: Object Lock, conditional writes, errors."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from app.storage import (
    ObjectAlreadyExists,
    ObjectCorrupted,
    StoreMisconfigured,
    StoreUnavailable,
    build_store,
)
from app.storage.s3 import S3ArtifactStore
from tests.storage.conftest import S3_ACCESS_KEY, S3_SECRET_KEY, make_s3_store

pytestmark = pytest.mark.s3


def _error_code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code"))


def test_lock_is_detected(lock_bucket: str, plain_bucket: str) -> None:
    assert make_s3_store(lock_bucket).object_lock_enabled
    assert not make_s3_store(plain_bucket).object_lock_enabled


def test_objects_get_retention_and_locked_versions_cannot_be_deleted(
    lock_bucket: str, s3_client: Any, key_prefix: str
) -> None:
    store = make_s3_store(lock_bucket, object_lock_days=2)
    before = datetime.now(UTC)
    stored = store.put_once(f"{key_prefix}/predictions.jsonl", b'{"seq":0}\n')
    assert stored.write_once == "object_lock" and stored.version_id
    assert stored.retain_until is not None
    retention = s3_client.get_object_retention(Bucket=lock_bucket, Key=stored.key,
                                               VersionId=stored.version_id)["Retention"]
    assert retention["Mode"] == "GOVERNANCE"
    until = retention["RetainUntilDate"]
    assert before + timedelta(days=2) - timedelta(minutes=1) <= until
    assert until <= datetime.now(UTC) + timedelta(days=2, minutes=1)
    head = s3_client.head_object(Bucket=lock_bucket, Key=stored.key, ChecksumMode="ENABLED")
    assert head["Metadata"]["sha256"] == stored.sha256
    with pytest.raises(s3_client.exceptions.ClientError) as denied:
        s3_client.delete_object(Bucket=lock_bucket, Key=stored.key, VersionId=stored.version_id)
    assert _error_code(denied.value) == "AccessDenied"
    assert store.get(stored.key) == b'{"seq":0}\n'


def test_delete_marker_then_rewrite_keeps_the_first_version(
    lock_bucket: str, s3_client: Any, key_prefix: str
) -> None:
    """The race documented in s3.py: after an API delete, a second *version* can appear; the
    store still refuses to write one and still reads the first, locked version."""
    store = make_s3_store(lock_bucket)
    key = f"{key_prefix}/run_manifest.json"
    store.put_once(key, b"original")
    s3_client.delete_object(Bucket=lock_bucket, Key=key)  # adds a delete marker
    with pytest.raises(ObjectAlreadyExists):
        store.put_once(key, b"replacement")
    assert store.exists(key)
    s3_client.put_object(Bucket=lock_bucket, Key=key, Body=b"replacement")  # around the port
    assert store.get(key) == b"original"
    assert store.stat(key).sha256 == hashlib.sha256(b"original").hexdigest()


def test_plain_bucket_uses_if_none_match(plain_bucket: str, key_prefix: str) -> None:
    store = make_s3_store(plain_bucket)
    stored = store.put_once(f"{key_prefix}/container.json", b"{}")
    assert stored.write_once == "if_none_match" and stored.retain_until is None
    with pytest.raises(ObjectAlreadyExists):
        store.put_once(stored.key, b"{}")


def test_get_detects_bytes_that_do_not_match_the_recorded_digest(
    plain_bucket: str, s3_client: Any, key_prefix: str
) -> None:
    key = f"{key_prefix}/stderr.log"
    s3_client.put_object(Bucket=plain_bucket, Key=key, Body=b"changed",
                         Metadata={"sha256": hashlib.sha256(b"original").hexdigest()})
    with pytest.raises(ObjectCorrupted):
        make_s3_store(plain_bucket).get(key)


def test_init_bucket_is_idempotent_and_refuses_a_bucket_without_lock(
    s3_client: Any, plain_bucket: str
) -> None:
    bucket = f"ft-init-{uuid.uuid4().hex[:10]}"
    store = make_s3_store(bucket, object_lock_mode="GOVERNANCE", object_lock_days=3)
    try:
        store.init_bucket()
        store.init_bucket()
        config = s3_client.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
        assert config["ObjectLockEnabled"] == "Enabled"
        assert config["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 3}
        assert s3_client.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    finally:
        s3_client.delete_bucket(Bucket=bucket)
    with pytest.raises(StoreMisconfigured):
        make_s3_store(plain_bucket).init_bucket()


def test_check_reports_unusable_stores(lock_bucket: str) -> None:
    make_s3_store(lock_bucket).check()
    with pytest.raises(StoreUnavailable):
        make_s3_store(lock_bucket, secret_key="wrong-secret").check()
    with pytest.raises(StoreUnavailable):
        make_s3_store(f"ft-missing-{uuid.uuid4().hex[:8]}").check()
    with pytest.raises(StoreUnavailable):
        make_s3_store(f"ft-missing-{uuid.uuid4().hex[:8]}").put_once("runs/x/y", b"")


def test_unreachable_endpoint_is_unavailable() -> None:
    store = S3ArtifactStore(bucket="b", endpoint_url="http://127.0.0.1:1", access_key="a",
                            secret_key="b", connect_timeout=0.5, max_attempts=1)
    with pytest.raises(StoreUnavailable):
        store.check()
    with pytest.raises(StoreUnavailable):
        store.put_once("runs/x/y", b"")


def test_build_store_from_settings(lock_bucket: str, s3_endpoint: str, tmp_path: Path,
                                   key_prefix: str) -> None:
    settings = Settings(data_dir=tmp_path, store="s3", s3_endpoint_url=s3_endpoint,
                        s3_bucket=lock_bucket, s3_access_key=S3_ACCESS_KEY,
                        s3_secret_key=S3_SECRET_KEY, object_lock_days=1)
    store = build_store(settings)
    assert isinstance(store, S3ArtifactStore)
    assert store.put_once(f"{key_prefix}/x", b"1").uri == f"s3://{lock_bucket}/{key_prefix}/x"
