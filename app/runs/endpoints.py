from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app.auth.errors import TokenInvalid, TokenMissing
from app.deps import CallerDep, SessionDep
from app.errors import error_responses
from app.runs.errors import ReportNotFound, RunNotFound
from app.runs.models import Run
from app.runs.repository import RunRepository
from app.runs.schemas import ReportVersionOut, RunEventOut, RunOut
from app.submissions import service as submissions
from app.submissions.errors import SubmissionNotFound

router = APIRouter(prefix="/v1/runs", tags=["runs"])
DSSE_MEDIA_TYPE = "application/vnd.in-toto+json"


def visible_run(session: SessionDep, caller: CallerDep, run_id: str) -> Run:
    run = RunRepository(session).get(run_id)
    if run is None:
        raise RunNotFound(f"run {run_id} not found")
    try:
        submissions.get_visible(session, caller, run.submission_id)
    except SubmissionNotFound as exc:
        raise RunNotFound(f"run {run_id} not found") from exc
    return run


@router.get("/{run_id}", response_model=RunOut,
            responses=error_responses(TokenMissing, TokenInvalid, RunNotFound))
def get_run(run_id: str, session: SessionDep, caller: CallerDep) -> RunOut:
    """A run with its platform-stamped status timeline and its report versions."""
    run = visible_run(session, caller, run_id)
    repo = RunRepository(session)
    reports = [
        ReportVersionOut(version=r.version, created_at=r.created_at, reason=r.reason,
                         envelope_sha256=r.envelope_sha256,
                         url=f"/v1/runs/{run.id}/report?version={r.version}")
        for r in repo.reports(run.id)
    ]
    return RunOut(
        id=run.id, submission_id=run.submission_id, kind=run.kind, status=run.status,
        failure_reason=run.failure_reason, failure_detail=run.failure_detail,
        hardware_class=run.hardware_class, seed=run.seed, image=run.image_digest_ref,
        artifact_sha256=run.artifact_sha256, operational_level=run.operational_level,
        prediction_hash=run.prediction_hash, previous_run_id=run.previous_run_id,
        reason=run.reason, platform_attempts=run.platform_attempts, created_at=run.created_at,
        started_at=run.started_at, finished_at=run.finished_at, summary=run.summary,
        timeline=[RunEventOut(at=e.at, status=e.status, actor=e.actor, detail=e.detail)
                  for e in repo.events(run.id)],
        reports=reports,
        report_url=f"/v1/runs/{run.id}/report" if reports else None,
    )


@router.get(
    "/{run_id}/report",
    responses={200: {"content": {DSSE_MEDIA_TYPE: {}},
                     "description": "The signed BenchmarkReport: a DSSE envelope"},
               **error_responses(TokenMissing, TokenInvalid, RunNotFound, ReportNotFound)},
)
def get_report(
    run_id: str, session: SessionDep, caller: CallerDep,
    version: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    """The DSSE envelope exactly as signed and archived (latest version unless asked)."""
    run = visible_run(session, caller, run_id)
    repo = RunRepository(session)
    reports = repo.reports(run.id)
    chosen = [r for r in reports if version is None or r.version == version]
    if not chosen:
        raise ReportNotFound(f"run {run_id} has no report" +
                             (f" version {version}" if version else ""))
    report = chosen[-1]
    return Response(content=report.envelope, media_type=DSSE_MEDIA_TYPE,
                    headers={"X-Report-Version": str(report.version)})


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)
