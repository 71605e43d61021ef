"""Submission → response shapes, and the strong ETag over the exact response bytes."""

from __future__ import annotations

import hashlib

from sqlalchemy.orm import Session

from app.auth.models import Role
from app.auth.service import Caller
from app.submissions.models import Submission
from app.submissions.repository import LatestRun, SubmissionRepository, SubmissionView
from app.submissions.schemas import RunSummary, SubmissionOut, SubmissionPublicOut


def provenance(sub: Submission | SubmissionView) -> str:
    return "self_attested" if sub.execution_mode == "self_attested" else "sealed"


def present(
    session: Session, caller: Caller, sub: Submission, latest: LatestRun | None = None
) -> SubmissionOut | SubmissionPublicOut:
    """``latest``: the submission's latest run, when the caller already loaded it (one query
    otherwise)."""
    if latest is None:
        latest = SubmissionRepository(session).latest_run(sub)
    return present_view(caller, SubmissionView.of(sub, latest))


def present_view(caller: Caller, sub: SubmissionView) -> SubmissionOut | SubmissionPublicOut:
    run = sub.latest_run
    report_url = f"/v1/runs/{run.id}/report" if run is not None and sub.has_report else None
    url = f"/v1/submissions/{sub.id}"
    if caller.role is Role.reader and sub.owner_id != caller.id:
        return SubmissionPublicOut(
            id=sub.id, status=sub.status, failure_reason=sub.failure_reason, tier=sub.tier,
            execution_mode=sub.execution_mode, provenance=provenance(sub), tasks=sub.tasks,
            model_name=str(sub.meta.get("model_name", "")),
            organization=str(sub.meta.get("organization", "")),
            platform_received_at=sub.platform_received_at, updated_at=sub.updated_at,
            report_url=report_url, url=url,
        )
    summary = None
    if run is not None:
        summary = RunSummary(id=run.id, kind=run.kind, status=run.status,
                            failure_reason=run.failure_reason, created_at=run.created_at,
                            url=f"/v1/runs/{run.id}")
    return SubmissionOut(
        id=sub.id, status=sub.status, failure_reason=sub.failure_reason, tier=sub.tier,
        execution_mode=sub.execution_mode, provenance=provenance(sub), tasks=sub.tasks,
        hardware_class=sub.hardware_class, image=sub.image_ref,
        image_digest=sub.image_digest, artifact_uri=sub.artifact_uri, metadata=sub.meta,
        platform_received_at=sub.platform_received_at, updated_at=sub.updated_at,
        latest_run=summary, report_url=report_url, url=url,
    )


def strong_etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    candidates = [c.strip() for c in if_none_match.split(",")]
    return "*" in candidates or etag in candidates
