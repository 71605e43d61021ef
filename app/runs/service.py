"""Run state changes. Every change is a platform-stamped event and, for the submission, a mirror
of its latest run's state. Used by the API and by the worker pipeline alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.clock import Clock
from app.db import new_id
from app.runs.errors import RunNotFound
from app.runs.models import TERMINAL_RUN, Run, RunEvent, RunKind, RunStatus
from app.runs.repository import RunRepository
from app.submissions.models import Submission, SubmissionStatus

_SUBMISSION_STATUS = {
    RunStatus.queued: SubmissionStatus.queued,
    RunStatus.claimed: SubmissionStatus.running,
    RunStatus.preparing: SubmissionStatus.running,
    RunStatus.running: SubmissionStatus.running,
    RunStatus.scoring: SubmissionStatus.running,
    RunStatus.completed: SubmissionStatus.completed,
    RunStatus.failed: SubmissionStatus.failed,
    RunStatus.cancelled: SubmissionStatus.cancelled,
}


def create_run(
    session: Session, clock: Clock, submission: Submission, *, kind: RunKind, actor: str,
    hardware_class: str | None = None, reason: str | None = None,
    previous: Run | None = None,
) -> Run:
    """A queued run of ``submission``, its first event, and the submission pointing at it. A
    ``submission`` added but not yet flushed is inserted already pointing at the run (one
    INSERT, no UPDATE after it)."""
    now = clock.now()
    run = Run(
        id=new_id("run"), submission_id=submission.id,
        owner_id=submission.owner_id, kind=kind.value, status=RunStatus.queued.value,
        hardware_class=hardware_class or submission.hardware_class,
        image_digest_ref=submission.image_digest_ref,
        seed=previous.seed if previous else None,
        artifact_sha256=previous.artifact_sha256 if previous else None,
        previous_run_id=previous.id if previous else None,
        reason=reason, requested_by=actor, platform_attempts=0,
        created_at=now, status_changed_at=now,
    )
    submission.latest_run_id = run.id
    _mirror(submission, run, clock)
    RunRepository(session).add_with_event(run, RunEvent(
        run_id=run.id, at=now, status=run.status, actor=actor,
        detail={"kind": kind.value, "reason": reason}))
    return run


def queued_run_rows(
    *, run_id: str, submission_id: str, owner_id: str, hardware_class: str,
    image_digest_ref: str | None, kind: RunKind, actor: str, at: datetime,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``create_run``'s run and first event as column values, for a submission inserted with
    Core already pointing at ``run_id`` with the run's state mirrored (intake): no ORM objects.
    No predecessor: seed and artifact hash are chosen when the run starts."""
    run = {"id": run_id, "submission_id": submission_id, "owner_id": owner_id,
           "kind": kind.value, "status": RunStatus.queued.value,
           "hardware_class": hardware_class, "image_digest_ref": image_digest_ref,
           "requested_by": actor, "platform_attempts": 0, "created_at": at,
           "status_changed_at": at}
    event = {"run_id": run_id, "at": at, "status": RunStatus.queued.value, "actor": actor,
             "detail": {"kind": kind.value, "reason": None}}
    return run, event


def _mirror(submission: Submission, run: Run, clock: Clock) -> None:
    if submission.latest_run_id != run.id:
        return
    submission.status = _SUBMISSION_STATUS[RunStatus(run.status)].value
    submission.failure_reason = run.failure_reason
    submission.updated_at = clock.now()


def transition(
    session: Session, clock: Clock, run: Run, status: RunStatus, *, actor: str,
    detail: dict[str, Any] | None = None, failure_reason: str | None = None,
    failure_detail: str | None = None,
) -> None:
    """Move ``run`` to ``status`` and record the event. Terminal states are final."""
    if RunStatus(run.status) in TERMINAL_RUN:
        raise ValueError(f"run {run.id} is already {run.status}")
    now = clock.now()
    run.status = status.value
    run.status_changed_at = now
    if failure_reason is not None:
        run.failure_reason = failure_reason
        run.failure_detail = failure_detail
    if status in TERMINAL_RUN:
        run.finished_at = now
    RunRepository(session).add_event(RunEvent(
        run_id=run.id, at=now, status=status.value, actor=actor,
        detail={**(detail or {}), **({"failure_reason": failure_reason} if failure_reason else {})},
    ))
    submission = session.get(Submission, run.submission_id)
    if submission is not None:
        _mirror(submission, run, clock)
    session.flush()


def get_run(session: Session, run_id: str) -> Run:
    run = RunRepository(session).get(run_id)
    if run is None:
        raise RunNotFound(f"run {run_id} not found")
    return run
