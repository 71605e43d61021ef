"""The ``ArtifactStore`` contract, run against every implementation (local, S3 lock, S3 plain)."""

from __future__ import annotations

import hashlib

import pytest

from app.storage import (
    InvalidKey,
    ObjectAlreadyExists,
    ObjectNotFound,
    StoredObject,
    put_once_or_same,
)
from app.storage.port import ArtifactStore


def test_put_once_records_the_digest(store: ArtifactStore, key_prefix: str) -> None:
    data = bytes(range(256)) * 3
    stored = store.put_once(f"{key_prefix}/predictions.jsonl", data, "application/x-ndjson")
    assert isinstance(stored, StoredObject)
    assert stored.key == f"{key_prefix}/predictions.jsonl"
    assert (stored.sha256, stored.size) == (hashlib.sha256(data).hexdigest(), len(data))
    assert stored.uri == store.uri(stored.key) and stored.uri.endswith(stored.key)
    assert stored.write_once in {"object_lock", "if_none_match", "local"}
    assert store.get(stored.key) == data
    assert store.exists(stored.key)
    stat = store.stat(stored.key)
    assert (stat.sha256, stat.size) == (stored.sha256, stored.size)


def test_second_write_is_refused_and_changes_nothing(store: ArtifactStore, key_prefix: str) -> None:
    key = f"{key_prefix}/checkpoint"
    store.put_once(key, b"first")
    for attempt in (b"second", b"first"):
        with pytest.raises(ObjectAlreadyExists) as info:
            store.put_once(key, attempt)
        assert info.value.key == key
    assert store.get(key) == b"first"


def test_put_once_or_same_is_idempotent_for_identical_bytes(
    store: ArtifactStore, key_prefix: str
) -> None:
    key = f"{key_prefix}/run_manifest.json"
    first = put_once_or_same(store, key, b"{}")
    assert put_once_or_same(store, key, b"{}").sha256 == first.sha256
    with pytest.raises(ObjectAlreadyExists):
        put_once_or_same(store, key, b"{ }")


def test_missing_objects(store: ArtifactStore, key_prefix: str) -> None:
    key = f"{key_prefix}/nothing"
    assert not store.exists(key)
    with pytest.raises(ObjectNotFound):
        store.get(key)
    with pytest.raises(ObjectNotFound):
        store.stat(key)


def test_empty_object(store: ArtifactStore, key_prefix: str) -> None:
    stored = store.put_once(f"{key_prefix}/stderr.log", b"", "text/plain")
    assert stored.size == 0 and store.get(stored.key) == b""


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "../x", "runs/../x", "runs/.hidden", "a/b/",
                                 "a b", "runs/\u00e9", "a\\b"])
def test_unsafe_keys_are_refused(store: ArtifactStore, key: str) -> None:
    with pytest.raises(InvalidKey):
        store.put_once(key, b"x")


def test_check_passes(store: ArtifactStore) -> None:
    store.check()
