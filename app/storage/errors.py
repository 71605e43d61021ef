"""Errors of the ``ArtifactStore`` port. Adapters translate vendor errors into these."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every storage error."""


class ObjectAlreadyExists(StoreError):
    """A write-once key was written before; the second write was refused, nothing was changed."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} already exists and is write-once")
        self.key = key


class ObjectNotFound(StoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} does not exist")
        self.key = key


class ObjectCorrupted(StoreError):
    """The stored bytes no longer match the SHA-256 recorded when they were written."""

    def __init__(self, key: str, expected: str, actual: str) -> None:
        super().__init__(f"object {key!r} has sha256 {actual}, recorded {expected}")
        self.key = key


class InvalidKey(StoreError, ValueError):
    """A key is empty, absolute, has ``.``/``..``/empty segments or unsafe characters."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or refuses our credentials (``/readyz`` reports this)."""


class StoreMisconfigured(StoreError):
    """The bucket or directory exists but lacks a required property (e.g. Object Lock)."""
