"""Run history and staff reruns of a submission: ``/v1/submissions/{id}/runs`` and ``/reruns``."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from app.auth.errors import RoleNotAllowed, TokenInvalid, TokenMissing
from app.deps import CallerDep, ClockDep, RunQueueDep, SessionDep, StaffDep
from app.errors import error_responses
from app.runs import reruns
from app.runs.endpoints import get_run
from app.runs.models import Run
from app.runs.repository import RunRepository
from app.runs.schemas import RunOut
from app.runs.staff_errors import HardwareClassUnknown, RunInProgress
from app.runs.staff_schemas import RerunRequest, RunList, RunListItem
from app.submissions import service as submissions
from app.submissions.errors import SubmissionNotFound

router = APIRouter(prefix="/v1/submissions", tags=["runs"])
AUTH_ERRORS = (TokenMissing, TokenInvalid)


@router.post(
    "/{submission_id}/reruns", status_code=status.HTTP_202_ACCEPTED, response_model=RunOut,
    responses=error_responses(*AUTH_ERRORS, RoleNotAllowed, SubmissionNotFound, RunInProgress,
                              HardwareClassUnknown),
)
def create_rerun(
    submission_id: str, body: RerunRequest, response: Response, session: SessionDep,
    caller: StaffDep, clock: ClockDep, queue: RunQueueDep,
) -> RunOut:
    """Staff: run the submission again, pinned to the previous run's image digest, artifact
    digest and seed. Earlier runs and reports are kept; the new run is queued after commit."""
    run = reruns.request_rerun(session, clock, queue, caller, submission_id,
                               reason=body.reason, hardware_class=body.hardware_class)
    response.headers["Location"] = f"/v1/runs/{run.id}"
    return get_run(run.id, session, caller)


@router.get("/{submission_id}/runs", response_model=RunList,
            responses=error_responses(*AUTH_ERRORS, SubmissionNotFound))
def list_runs(submission_id: str, session: SessionDep, caller: CallerDep) -> RunList:
    """Every run of a submission, oldest first (initial run, reruns...)."""
    sub = submissions.get_visible(session, caller, submission_id)
    repo = RunRepository(session)
    return RunList(items=[_item(repo, r) for r in repo.for_submission(sub.id)])


def _item(repo: RunRepository, run: Run) -> RunListItem:
    has_report = repo.latest_report(run.id) is not None
    return RunListItem(
        id=run.id, kind=run.kind, status=run.status, failure_reason=run.failure_reason,
        hardware_class=run.hardware_class, previous_run_id=run.previous_run_id,
        reason=run.reason, prediction_hash=run.prediction_hash, created_at=run.created_at,
        finished_at=run.finished_at, url=f"/v1/runs/{run.id}",
        report_url=f"/v1/runs/{run.id}/report" if has_report else None,
    )
