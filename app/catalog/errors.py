"""Catalog errors. They read as facts; the API maps them to its one error shape."""

from __future__ import annotations


class CatalogError(Exception):
    """Base class for catalog errors."""


class UnknownCatalogVersion(CatalogError, LookupError):
    def __init__(self, version: str) -> None:
        super().__init__(f"no task catalog named {version!r}")
        self.version = version


class UnknownTask(CatalogError, LookupError):
    def __init__(self, task_id: str, version: str) -> None:
        super().__init__(f"catalog {version!r} has no task {task_id!r}")
        self.task_id = task_id
        self.version = version


class UnknownSuite(CatalogError, LookupError):
    def __init__(self, suite: str, version: str) -> None:
        super().__init__(f"catalog {version!r} has no suite {suite!r}")
        self.suite = suite
        self.version = version


class CatalogDrift(CatalogError):
    """The packaged data no longer matches the snapshot a catalog version was pinned to.

    A catalog version is immutable: if an upgrade of the data package changed the numbers, the
    scores would silently stop being comparable, so building the catalog refuses instead.
    """
