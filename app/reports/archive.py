"""Archiving a finished run and signing its BenchmarkReport.

Order matters: every evidence object is written (write-once) before the report, and the report
is written last, so a report in the archive always has its evidence beside it. A second write
of any key is refused by the store; nothing is ever overwritten.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.evidence.jcs import canonical_bytes
from app.evidence.keys import KeyRing
from app.evidence.report import (
    ArchivedObject,
    BenchmarkPredicate,
    ContainerRecord,
    ImageSubject,
    SignedReport,
    sign_report,
)
from app.storage import layout
from app.storage.port import ArtifactStore, put_once_or_same


@dataclass(frozen=True)
class ArchivedRun:
    objects: dict[str, ArchivedObject]
    uri: str


def put_evidence(store: ArtifactStore, run_id: str, objects: Mapping[str, bytes]) -> ArchivedRun:
    """Write each evidence object once. An object that already exists with the very same bytes
    (a retried attempt that got this far before its worker died) is accepted; different bytes
    are refused by the store and surface as ``ObjectAlreadyExists``."""
    out: dict[str, ArchivedObject] = {}
    for name, data in objects.items():
        stored = put_once_or_same(store, layout.run_key(run_id, name), data,
                                  layout.CONTENT_TYPES.get(name, "application/json"))
        out[name] = ArchivedObject(stored.sha256, stored.size)
    first = store.uri(layout.run_key(run_id, layout.PREDICTIONS))
    return ArchivedRun(out, first.rsplit("/", 1)[0] + "/")


def container_json(image_ref: str, pinned: str, extra: Mapping[str, Any]) -> tuple[bytes,
                                                                                   ImageSubject]:
    repository, digest = pinned.rsplit("@", 1)
    record = ContainerRecord(image_ref=image_ref, repository=repository, manifest_digest=digest,
                             config_digest=extra.get("config_digest"), extra=dict(extra))
    return record.to_json_bytes(), ImageSubject(repository, digest)


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    return canonical_bytes(dict(manifest))


def sign_and_archive_report(
    store: ArtifactStore, keyring: KeyRing, *, run_id: str, version: int, image: ImageSubject,
    predictions: bytes, run_manifest: bytes, predicate: BenchmarkPredicate | Mapping[str, Any],
    signed_at: datetime,
) -> tuple[SignedReport, str]:
    signed = sign_report(
        image=image, predictions_sha256=hashlib.sha256(predictions).hexdigest(),
        run_manifest_sha256=hashlib.sha256(run_manifest).hexdigest(), predicate=predicate,
        signer=keyring.signer("report", signed_at), signed_at=signed_at,
    )
    key = layout.run_key(run_id, layout.report_name(version))
    store.put_once(key, signed.envelope_bytes, layout.CONTENT_TYPES[layout.REPORT])
    return signed, key
