"""The versioned task catalog: public task cards, platform-held labels, forecast requests."""

from app.catalog.catalog import (
    DEFAULT_VERSION,
    Catalog,
    available_versions,
    catalog_digest,
    load_catalog,
)
from app.catalog.errors import (
    CatalogDrift,
    CatalogError,
    UnknownCatalogVersion,
    UnknownSuite,
    UnknownTask,
)

__all__ = [
    "DEFAULT_VERSION",
    "Catalog",
    "CatalogDrift",
    "CatalogError",
    "UnknownCatalogVersion",
    "UnknownSuite",
    "UnknownTask",
    "available_versions",
    "catalog_digest",
    "load_catalog",
]
