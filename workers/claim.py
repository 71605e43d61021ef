"""Claiming a run exactly once.

A message can be delivered twice (acks_late plus a worker that died, or a broker redelivery).
The claim is a compare-and-set on the run's status in the database: only the delivery that
moves it from ``queued`` to ``claimed`` proceeds; every other delivery is a no-op.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.clock import Clock
from app.runs.models import RunEvent, RunStatus
from app.runs.repository import RunRepository
from app.submissions.models import Submission, SubmissionStatus


def claim_run(session: Session, clock: Clock, run_id: str, worker: str) -> bool:
    """True when this caller now owns the run. Commits nothing; the caller's edge commits."""
    repo = RunRepository(session)
    now = clock.now()
    if not repo.compare_and_set_status(run_id, {RunStatus.queued.value}, RunStatus.claimed.value,
                                       now, worker=worker):
        return False
    run = repo.get(run_id)
    assert run is not None
    session.refresh(run)
    repo.add_event(RunEvent(run_id=run_id, at=now, status=RunStatus.claimed.value, actor=worker,
                            detail={"worker": worker}))
    sub = session.get(Submission, run.submission_id)
    if sub is not None and sub.latest_run_id == run_id:
        sub.status = SubmissionStatus.running.value
        sub.updated_at = now
    session.flush()
    return True
