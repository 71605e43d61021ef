"""Recomputing a run's scores from its archived predictions, without running the model.

The archived ``predictions.jsonl`` (whose Merkle root the report commits to) and
``run_manifest.json`` (which attempts count) are rescored with the platform's labels by the same
code the pipeline uses. Staff may turn a recompute into a new signed report version; earlier
versions stay in the archive and the database.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.catalog import Catalog, load_catalog
from app.clock import Clock
from app.evidence.keys import KeyRing
from app.evidence.prediction_log import iter_records
from app.evidence.report import ImageSubject, peek_statement
from app.reports import archive
from app.reports.scoring import RunScores, TaskPlan, metric_differences, score_run
from app.runs.errors import ReportNotFound
from app.runs.models import Report, Run
from app.runs.repository import RunRepository
from app.storage import layout
from app.storage.port import ArtifactStore
from app.submissions.models import Submission


@dataclass(frozen=True)
class Recomputed:
    scores: RunScores
    previous: dict[str, Any]  # the previous report's statement
    differences: list[str]


def _plans(manifest: dict[str, Any], tasks: list[str]) -> list[TaskPlan]:
    by_task = {t["task_id"]: t for t in manifest.get("tasks", [])}
    return [TaskPlan(t, list(by_task.get(t, {}).get("scored_attempts") or [0])) for t in tasks]


def rescore(catalog: Catalog, predictions: bytes, manifest: bytes, statement: dict[str, Any],
            tasks: list[str]) -> Recomputed:
    predicate = statement["predicate"]
    frozen = (predicate.get("extra") or {}).get("frozen_at")
    frozen_at = datetime.fromisoformat(frozen.replace("Z", "+00:00")) if frozen else None
    provenance = "self_attested" if predicate.get("execution_mode") == "self_attested" \
        else "sealed"
    scores = score_run(catalog, _plans(json.loads(manifest), tasks),
                       list(iter_records(predictions)), frozen_at, provenance)
    return Recomputed(scores, statement,
                      metric_differences(predicate.get("metrics", {}), scores.metrics))


def recompute_report(
    session: Session, clock: Clock, store: ArtifactStore, keyring: KeyRing, catalog: Catalog,
    *, run_id: str, actor: str, reason: str,
) -> tuple[Report, list[str]]:
    """Rescore run ``run_id`` from the archive and sign a new report version."""
    repo = RunRepository(session)
    run = repo.get(run_id)
    previous = repo.latest_report(run_id) if run is not None else None
    if run is None or previous is None:
        raise ReportNotFound(f"run {run_id} has no report to recompute")
    sub = session.get(Submission, run.submission_id)
    assert sub is not None
    predictions = store.get(layout.run_key(run_id, layout.PREDICTIONS))
    manifest = store.get(layout.run_key(run_id, layout.RUN_MANIFEST))
    statement = peek_statement(previous.envelope.encode())
    result = rescore(catalog, predictions, manifest, statement, list(sub.tasks))
    version = repo.next_report_version(run_id)
    predicate = _new_predicate(statement["predicate"], result, version, reason, previous)
    image = _image_subject(statement)
    signed, key = archive.sign_and_archive_report(
        store, keyring, run_id=run_id, version=version, image=image, predictions=predictions,
        run_manifest=manifest, predicate=predicate, signed_at=clock.now())
    report = Report(
        id=f"rep_{run_id.removeprefix('run_')}_{version}", run_id=run_id, version=version,
        envelope=signed.envelope_bytes.decode(),
        envelope_sha256=hashlib.sha256(signed.envelope_bytes).hexdigest(), archive_key=key,
        reason=reason, created_by=actor, created_at=clock.now())
    repo.add_report(report)
    audit.record(session, clock, actor=actor, action="report.recompute", target_type="run",
                 target_id=run_id, reason=reason,
                 detail={"version": version, "differences": result.differences[:50]})
    return report, result.differences


def _image_subject(statement: dict[str, Any]) -> ImageSubject:
    subject = statement["subject"][0]
    return ImageSubject(subject["name"].removeprefix("oci:"),
                        "sha256:" + subject["digest"]["sha256"])


def _new_predicate(old: dict[str, Any], result: Recomputed, version: int, reason: str,
                   previous: Report) -> dict[str, Any]:
    predicate = {k: v for k, v in old.items() if k != "signed_at"}
    predicate["report_version"] = version
    predicate["metrics"] = result.scores.metrics
    predicate["capability_vector"] = result.scores.capability.to_dict()
    extra = dict(predicate.get("extra") or {})
    extra["task_scores"] = result.scores.task_scores
    extra["recompute"] = {"reason": reason, "previous_version": previous.version,
                          "previous_envelope_sha256": previous.envelope_sha256,
                          "differences": result.differences}
    predicate["extra"] = extra
    return predicate


def run_recompute_cli(run_id: str, archive: str | None) -> int:
    """``future-ts recompute-metric RUN_ID [--archive DIR]``: rescore from the archive (a
    directory, or the configured store) and print any difference from the latest report."""
    from app.settings import get_settings
    from app.storage import build_store

    settings = get_settings()
    if archive:
        base = Path(archive)

        def read(name: str) -> bytes:
            return (base / name).read_bytes()
    else:
        store = build_store(settings)

        def read(name: str) -> bytes:
            return store.get(layout.run_key(run_id, name))

    report_names = sorted((n for n in _report_names(read)), key=_version_of)
    if not report_names:
        print(f"no report found for run {run_id}", file=sys.stderr)
        return 2
    statement = peek_statement(read(report_names[-1]))
    tasks = [t["task_id"] for t in json.loads(read(layout.RUN_MANIFEST)).get("tasks", [])] or \
        list(statement["predicate"].get("metrics", {}))
    result = rescore(load_catalog(settings.catalog_version), read(layout.PREDICTIONS),
                     read(layout.RUN_MANIFEST), statement, tasks)
    print(json.dumps({"run_id": run_id, "report": report_names[-1],
                      "metrics": result.scores.metrics}, indent=2, sort_keys=True))
    if result.differences:
        print("DIFFERENCES from the report:", *result.differences, sep="\n  ", file=sys.stderr)
        return 1
    print("recomputed metrics match the report", file=sys.stderr)
    return 0


def _report_names(read: Any) -> list[str]:
    names = []
    for version in range(1, 100):
        name = layout.report_name(version)
        try:
            read(name)
        except Exception:
            break
        names.append(name)
    return names


def _version_of(name: str) -> int:
    return 1 if name == layout.REPORT else int(name.split(".")[1].removeprefix("v"))


__all__ = ["Recomputed", "Run", "recompute_report", "rescore", "run_recompute_cli"]


def verify_metrics_hook(predicate: Any, reader: Any) -> list[str]:
    """``future-ts verify --recompute``: rescore the archived log with the platform's labels and
    return how the signed metrics differ (empty when they agree)."""
    from app.settings import get_settings

    manifest = reader.read(layout.RUN_MANIFEST)
    tasks = [t["task_id"] for t in json.loads(manifest).get("tasks", [])] or \
        list(predicate.get("metrics", {}))
    result = rescore(load_catalog(get_settings().catalog_version), reader.read(layout.PREDICTIONS),
                     manifest, {"predicate": dict(predicate)}, tasks)
    return result.differences
