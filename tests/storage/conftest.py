"""Stores under test: the local directory store and a real SeaweedFS S3 server.

S3 tests are marked ``s3``; the endpoint is ``FUTURE_TS_TEST_S3_ENDPOINT`` (default
``http://127.0.0.1:8333``, started by ``.ci/services.sh start``) with the CI credentials. They
fail under ``CI=true`` when the server is unreachable and skip otherwise.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
import pytest

from app.storage.local import LocalDirectoryStore
from app.storage.port import ArtifactStore
from app.storage.s3 import S3ArtifactStore
from tests.conftest import need_service

S3_ENDPOINT = os.environ.get("FUTURE_TS_TEST_S3_ENDPOINT", "http://127.0.0.1:8333")
S3_ACCESS_KEY = os.environ.get("FUTURE_TS_TEST_S3_ACCESS_KEY", "futurets")
S3_SECRET_KEY = os.environ.get("FUTURE_TS_TEST_S3_SECRET_KEY", "futurets-ci-secret")


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    url = urlparse(S3_ENDPOINT)
    need_service("SeaweedFS S3", url.hostname or "127.0.0.1", url.port or 80)
    return S3_ENDPOINT


def make_s3_store(bucket: str, **kwargs: Any) -> S3ArtifactStore:
    options: dict[str, Any] = {"endpoint_url": S3_ENDPOINT, "access_key": S3_ACCESS_KEY,
                               "secret_key": S3_SECRET_KEY, "object_lock_days": 1, **kwargs}
    return S3ArtifactStore(bucket=bucket, **options)


@pytest.fixture(scope="session")
def s3_client(s3_endpoint: str) -> Any:
    """A raw client for what the port deliberately cannot do (delete versions, inspect locks)."""
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                        aws_access_key_id=S3_ACCESS_KEY, aws_secret_access_key=S3_SECRET_KEY)


def _empty_and_delete(client: Any, bucket: str) -> None:
    versions = client.list_object_versions(Bucket=bucket)
    for entry in versions.get("Versions", []) + versions.get("DeleteMarkers", []):
        client.delete_object(Bucket=bucket, Key=entry["Key"], VersionId=entry["VersionId"],
                             BypassGovernanceRetention=True)  # test buckets use GOVERNANCE
    client.delete_bucket(Bucket=bucket)


@pytest.fixture(scope="session")
def lock_bucket(s3_client: Any) -> Iterator[str]:
    bucket = f"ft-lock-{uuid.uuid4().hex[:10]}"
    make_s3_store(bucket).init_bucket()
    yield bucket
    _empty_and_delete(s3_client, bucket)


@pytest.fixture(scope="session")
def plain_bucket(s3_client: Any) -> Iterator[str]:
    bucket = f"ft-plain-{uuid.uuid4().hex[:10]}"
    s3_client.create_bucket(Bucket=bucket)
    yield bucket
    _empty_and_delete(s3_client, bucket)


@pytest.fixture(params=[
    "local",
    pytest.param("s3-object-lock", marks=pytest.mark.s3),
    pytest.param("s3-if-none-match", marks=pytest.mark.s3),
])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    """Every ``ArtifactStore`` implementation; contract tests run against each."""
    if request.param == "local":
        with pytest.warns(Warning):
            return LocalDirectoryStore(tmp_path / "archive")
    bucket_fixture = "lock_bucket" if request.param == "s3-object-lock" else "plain_bucket"
    return make_s3_store(request.getfixturevalue(bucket_fixture))


@pytest.fixture()
def key_prefix() -> str:
    """A fresh prefix so tests sharing a session bucket never collide."""
    return f"runs/{uuid.uuid4()}"
