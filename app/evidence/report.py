"""The signed BenchmarkReport: an in-toto Statement v1 in a DSSE envelope (DESIGN section 5).

Statement::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "oci:<repository>",   "digest": {"sha256": <manifest digest hex>}},
                 {"name": "predictions.jsonl",  "digest": {"sha256": <file hex>}},
                 {"name": "run_manifest.json",  "digest": {"sha256": <file hex>}}],
     "predicateType": "https://future-ts.dev/attestation/benchmark-report/v1",
     "predicate": {...BenchmarkPredicate.to_dict(), "signed_at": <RFC 3339>}}

The statement is serialized once with RFC 8785 and that byte string is the DSSE payload
(``payloadType`` ``application/vnd.in-toto+json``); the envelope is signed with the **report** key
(``keyid`` = RFC 7638 thumbprint). ``SignedReport.envelope_bytes`` is what the API serves at
``GET /v1/runs/{id}/report`` and what is archived as ``report.dsse.json``.

Predicate fields the verifier relies on: ``signed_at``, ``prediction_hash``,
``prediction_log.{origin, tree_size, checkpoint, checkpoint_signed_at}`` and
``archive.objects.<name>.sha256``. Every number must be JSON-representable: map NaN to ``None``
before signing (JCS refuses NaN and Infinity rather than inventing a value).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from app.evidence.checkpoint import Checkpoint, parse_note
from app.evidence.dsse import PAYLOAD_TYPE_IN_TOTO, Envelope, sign_envelope
from app.evidence.errors import NoActiveKey
from app.evidence.jcs import canonical_bytes
from app.evidence.keys import Signer, SigningKey, format_time
from app.evidence.prediction_log import RECORD_FORMAT

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://future-ts.dev/attestation/benchmark-report/v1"
REPORT_MEDIA_TYPE = "application/vnd.in-toto.benchmark-report+dsse"
IMAGE_SUBJECT_PREFIX = "oci:"
PREDICTIONS_SUBJECT = "predictions.jsonl"
RUN_MANIFEST_SUBJECT = "run_manifest.json"
OperationalLevel = Literal["hosted_sealed", "local_sealed_mvp"]
_HEX64 = re.compile(r"[0-9a-f]{64}")


def digest_hex(digest: str) -> str:
    """Normalize ``"sha256:<hex>"`` or ``"<hex>"`` to the 64-char lowercase hex."""
    value = digest.removeprefix("sha256:")
    if not _HEX64.fullmatch(value):
        raise ValueError(f"{digest!r} is not a SHA-256 digest")
    return value


@dataclass(frozen=True)
class ImageSubject:
    """The container image the run executed, pinned by its manifest digest."""

    repository: str  # e.g. "127.0.0.1:5000/org/model": no tag, no digest
    manifest_digest: str  # "sha256:<hex>"

    def subject(self) -> dict[str, Any]:
        name = IMAGE_SUBJECT_PREFIX + self.repository
        return {"name": name, "digest": {"sha256": digest_hex(self.manifest_digest)}}


@dataclass(frozen=True)
class ContainerRecord:
    """``container.json``: the bit-exact image identity the runner pulled and ran.

    The verifier requires ``manifest_digest`` (and ``repository`` when present) to match the
    image subject. Write it with ``to_json_bytes`` and archive the bytes verbatim.
    """

    image_ref: str  # as submitted
    repository: str
    manifest_digest: str  # "sha256:<hex>": the platform-specific image manifest that ran
    config_digest: str | None = None
    index_digest: str | None = None
    platform: str | None = None  # e.g. "linux/amd64"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json_bytes(self) -> bytes:
        record = {k: v for k, v in vars(self).items() if k != "extra" and v is not None}
        return canonical_bytes({**self.extra, **record})


@dataclass(frozen=True)
class ArchivedObject:
    sha256: str  # hex
    size: int


@dataclass(frozen=True)
class SandboxSummary:
    backend: str  # "podman" | "kubernetes" | "process"
    limits: Mapping[str, Any]  # cpus, cpuset, memory_mb, swap_mb, pids, tmpfs_mb, network, ...
    sealed_config_digest: str  # "sha256:<hex>" of the exact sealed configuration
    runtime: str | None = None  # e.g. "runc 1.1.5"


@dataclass(frozen=True, kw_only=True)
class BenchmarkPredicate:
    """The predicate the lead fills in; ``to_dict`` gives its JSON form."""

    submission_id: str
    run_id: str
    tier: str
    execution_mode: str  # "sealed" | "self_attested"
    operational_level: OperationalLevel
    platform_received_at: datetime
    platform_issued_at_first: datetime | None
    platform_issued_at_last: datetime | None
    hardware_class: str
    host_cpu_model: str
    sandbox: SandboxSummary
    seed: int
    image_ref: str  # as submitted; the pinned identity is the image subject
    checkpoint: str  # the full signed checkpoint note of the run's prediction log
    checkpoint_signed_at: datetime
    metrics: Mapping[str, Any]  # per task: {metric: {"mean": .., "std": .., "n": ..}}
    latency_ms: Mapping[str, Any]  # per task: p50/p95/p99/max, violations, violation_pct
    memory_peak_mb: float | None
    capability_vector: Mapping[str, Any]
    archive_uri: str  # e.g. "s3://bucket/runs/<run_id>/"
    archive_objects: Mapping[str, ArchivedObject]  # every archived object except the report
    harness_version: str
    scorer_version: str
    run_kind: str | None = None  # "initial" | "rerun" | "determinism_repeat"
    report_version: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        text, _ = parse_note(self.checkpoint)
        checkpoint = Checkpoint.parse(text)
        return {
            "submission_id": self.submission_id,
            "run_id": self.run_id,
            "run_kind": self.run_kind,
            "report_version": self.report_version,
            "tier": self.tier,
            "execution_mode": self.execution_mode,
            "operational_level": self.operational_level,
            "platform_received_at": format_time(self.platform_received_at),
            "platform_issued_at": {
                "first": _time_or_none(self.platform_issued_at_first),
                "last": _time_or_none(self.platform_issued_at_last),
            },
            "hardware": {"class": self.hardware_class, "host_cpu_model": self.host_cpu_model},
            "sandbox": {
                "backend": self.sandbox.backend,
                "runtime": self.sandbox.runtime,
                "limits": dict(self.sandbox.limits),
                "sealed_config_digest": self.sandbox.sealed_config_digest,
            },
            "seed": self.seed,
            "image": {"ref": self.image_ref},
            "prediction_hash": checkpoint.prediction_hash,
            "prediction_log": {
                "origin": checkpoint.origin,
                "tree_size": checkpoint.size,
                "checkpoint": self.checkpoint,
                "checkpoint_signed_at": format_time(self.checkpoint_signed_at),
                "record_format": RECORD_FORMAT,
            },
            "metrics": dict(self.metrics),
            "latency_ms": dict(self.latency_ms),
            "memory_peak_mb": self.memory_peak_mb,
            "capability_vector": dict(self.capability_vector),
            "archive": {
                "uri": self.archive_uri,
                "objects": {
                    name: {"sha256": digest_hex(obj.sha256), "size": obj.size}
                    for name, obj in self.archive_objects.items()
                },
            },
            "versions": {"harness": self.harness_version, "scorer": self.scorer_version},
            "extra": dict(self.extra),
        }


def _time_or_none(when: datetime | None) -> str | None:
    return format_time(when) if when is not None else None


def build_statement(
    *,
    image: ImageSubject,
    predictions_sha256: str,
    run_manifest_sha256: str,
    predicate: BenchmarkPredicate | Mapping[str, Any],
    signed_at: datetime,
) -> dict[str, Any]:
    """The in-toto Statement v1 of a run; ``signed_at`` is added to the predicate."""
    body = predicate.to_dict() if isinstance(predicate, BenchmarkPredicate) else dict(predicate)
    body["signed_at"] = format_time(signed_at)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            image.subject(),
            {"name": PREDICTIONS_SUBJECT, "digest": {"sha256": digest_hex(predictions_sha256)}},
            {"name": RUN_MANIFEST_SUBJECT, "digest": {"sha256": digest_hex(run_manifest_sha256)}},
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": body,
    }


@dataclass(frozen=True)
class SignedReport:
    statement: dict[str, Any]
    payload: bytes  # the JCS bytes of the statement: the DSSE payload
    envelope: Envelope
    envelope_bytes: bytes  # served at GET /v1/runs/{id}/report, archived as report.dsse.json
    keyid: str
    signed_at: datetime


def sign_report(
    *,
    image: ImageSubject,
    predictions_sha256: str,
    run_manifest_sha256: str,
    predicate: BenchmarkPredicate | Mapping[str, Any],
    signer: Signer,
    signed_at: datetime | None = None,
) -> SignedReport:
    """Build, serialize once (JCS) and sign the report with the report key."""
    when = signed_at or datetime.now(UTC)
    if isinstance(signer, SigningKey) and (signer.purpose != "report" or not signer.covers(when)):
        raise NoActiveKey(f"key {signer.kid} may not sign a report at {format_time(when)}")
    statement = build_statement(
        image=image, predictions_sha256=predictions_sha256,
        run_manifest_sha256=run_manifest_sha256, predicate=predicate, signed_at=when,
    )
    payload = canonical_bytes(statement)
    envelope = sign_envelope(PAYLOAD_TYPE_IN_TOTO, payload, [signer])
    return SignedReport(statement, payload, envelope, envelope.to_json_bytes(), signer.kid, when)


def peek_statement(envelope_bytes: bytes) -> dict[str, Any]:
    """The statement inside an envelope, **unverified** (for display; trust needs ``verify``)."""
    statement = json.loads(Envelope.from_json_bytes(envelope_bytes).payload)
    if not isinstance(statement, dict):
        raise ValueError("the envelope payload is not a JSON object")
    return statement
