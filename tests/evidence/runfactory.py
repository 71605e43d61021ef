"""Build a complete, signed run archive with the public evidence API (used by several tests)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.evidence.checkpoint import Checkpoint, sign_checkpoint
from app.evidence.dsse import PAYLOAD_TYPE_IN_TOTO, sign_envelope
from app.evidence.jcs import canonical_bytes
from app.evidence.keys import KeyRing, Signer, SigningKey
from app.evidence.prediction_log import PredictionLog
from app.evidence.report import (
    ArchivedObject,
    BenchmarkPredicate,
    ContainerRecord,
    ImageSubject,
    SandboxSummary,
    build_statement,
    sign_report,
)
from app.storage import layout

KEYS_FROM = datetime(2026, 1, 1, tzinfo=UTC)
SIGNED_AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
VERIFY_NOW = SIGNED_AT + timedelta(hours=1)
ORIGIN_PREFIX = "future-ts.test/run"
REPOSITORY = "127.0.0.1:5000/acme/seasonal-naive"
MANIFEST_DIGEST = "sha256:" + hashlib.sha256(b"manifest").hexdigest()


def seeded_key(purpose: str, seed: int, not_before: datetime | None = KEYS_FROM,
               not_after: datetime | None = None) -> SigningKey:
    private = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    return SigningKey(purpose, private, not_before, not_after)  # type: ignore[arg-type]


def record(run_id: str, seq: int) -> dict[str, Any]:
    issued = SIGNED_AT - timedelta(minutes=30) + timedelta(seconds=seq)
    request_id = f"req-{seq:05d}"
    return {
        "run_id": run_id,
        "seq": seq,
        "task_id": "m4-hourly",
        "window_id": f"w{seq:04d}",
        "request_id": request_id,
        "platform_issued_at": issued.isoformat().replace("+00:00", "Z"),
        "runtime_ms": 3.25 + seq % 7,
        "memory_mb": 41.5,
        "status": "ok" if seq % 11 else "invalid",
        "request_sha256": hashlib.sha256(request_id.encode()).hexdigest(),
        "answer": {
            "type": "prediction",
            "request_id": request_id,
            "forecasts": [{
                "item_id": "H1",
                "mean": [round(100 + seq + h * 0.5, 3) for h in range(6)],
                "quantiles": {"0.1": [90.5] * 6, "0.9": [110.25] * 6},
            }],
        },
    }


@dataclass
class BuiltRun:
    run_id: str
    archive_dir: Path
    report_key: SigningKey
    log_key: SigningKey
    ring: KeyRing
    envelope: bytes
    statement: dict[str, Any]

    @property
    def jwks(self) -> dict[str, Any]:
        return self.ring.jwks()

    def path(self, name: str) -> Path:
        return self.archive_dir / name


def build_run(
    directory: Path,
    *,
    records: int = 25,
    run_id: str = "0b6c7a52-0000-4000-8000-000000000001",
    report_key: SigningKey | None = None,
    log_key: SigningKey | None = None,
    checkpoint_signer: Signer | None = None,
    mutate_statement: Callable[[dict[str, Any]], None] | None = None,
    payload_type: str = PAYLOAD_TYPE_IN_TOTO,
    signed_at: datetime = SIGNED_AT,
) -> BuiltRun:
    """Write every archive object of a run into ``directory`` and sign its report.

    ``mutate_statement`` edits the statement *before* signing (to produce validly signed but
    wrong reports); ``checkpoint_signer`` signs the checkpoint with another key.
    """
    report_key = report_key or seeded_key("report", 1)
    log_key = log_key or seeded_key("log", 2)
    directory.mkdir(parents=True, exist_ok=True)
    with PredictionLog.create(directory / layout.PREDICTIONS, durable=False) as log:
        for seq in range(records):
            log.append(record(run_id, seq))
        head = log.tree_head()
    checkpoint = Checkpoint(f"{ORIGIN_PREFIX}/{run_id}", head.size, head.root)
    note = sign_checkpoint(checkpoint, checkpoint_signer or log_key)
    objects = {
        layout.CHECKPOINT: note.encode(),
        layout.RUN_MANIFEST: canonical_bytes({"run_id": run_id, "tasks": ["m4-hourly"]}),
        layout.CONTAINER: ContainerRecord(
            image_ref=f"{REPOSITORY}:v1", repository=REPOSITORY,
            manifest_digest=MANIFEST_DIGEST, platform="linux/amd64").to_json_bytes(),
        layout.STDERR: b"model starting\nready\n",
    }
    for name, data in objects.items():
        (directory / name).write_bytes(data)
    predictions = (directory / layout.PREDICTIONS).read_bytes()
    listed = {layout.PREDICTIONS: predictions, **objects}
    predicate = BenchmarkPredicate(
        submission_id="sub-1", run_id=run_id, tier="public_dev", execution_mode="sealed",
        operational_level="hosted_sealed",
        platform_received_at=SIGNED_AT - timedelta(hours=1),
        platform_issued_at_first=SIGNED_AT - timedelta(minutes=30),
        platform_issued_at_last=SIGNED_AT - timedelta(minutes=5),
        hardware_class="cpu-1c-1g", host_cpu_model="Test CPU @ 2.0GHz",
        sandbox=SandboxSummary("podman", {"cpus": 1, "memory_mb": 1024, "network": "none"},
                               "sha256:" + "ab" * 32, "runc 1.1.5"),
        seed=1234, image_ref=f"{REPOSITORY}:v1",
        checkpoint=note, checkpoint_signed_at=signed_at - timedelta(seconds=2),
        metrics={"m4-hourly": {"mase": {"mean": 0.91, "std": None, "n": 1}}},
        latency_ms={"m4-hourly": {"p50": 4.0, "p95": 9.0, "p99": 9.0, "violations": 0}},
        memory_peak_mb=41.5, capability_vector={"accuracy": 0.5},
        archive_uri=f"file:///archive/runs/{run_id}/",
        archive_objects={n: ArchivedObject(hashlib.sha256(d).hexdigest(), len(d))
                         for n, d in listed.items()},
        harness_version="0.1.0", scorer_version="0.1.0", run_kind="initial",
    )
    image = ImageSubject(REPOSITORY, MANIFEST_DIGEST)
    predictions_sha = hashlib.sha256(predictions).hexdigest()
    manifest_sha = hashlib.sha256(objects[layout.RUN_MANIFEST]).hexdigest()
    if mutate_statement is None and payload_type == PAYLOAD_TYPE_IN_TOTO:
        signed = sign_report(image=image, predictions_sha256=predictions_sha,
                             run_manifest_sha256=manifest_sha, predicate=predicate,
                             signer=report_key, signed_at=signed_at)
        envelope, statement = signed.envelope_bytes, signed.statement
    else:
        statement = build_statement(image=image, predictions_sha256=predictions_sha,
                                    run_manifest_sha256=manifest_sha, predicate=predicate,
                                    signed_at=signed_at)
        if mutate_statement is not None:
            mutate_statement(statement)
        envelope = sign_envelope(payload_type, canonical_bytes(statement),
                                 [report_key]).to_json_bytes()
    (directory / layout.REPORT).write_bytes(envelope)
    ring = KeyRing([report_key, log_key])
    return BuiltRun(run_id, directory, report_key, log_key, ring, envelope, statement)
