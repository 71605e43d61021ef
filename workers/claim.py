"""Claiming runs: exactly once, and fairly across authors.

A run message is a *token* for one slot of its hardware class, not an order to run that very run.
The worker that receives it claims the fairest queued run of that class:

1. authors with fewer runs in flight first,
2. then the author served longest ago (never served first),
3. then the oldest run of that author.

So one author's hundred queued submissions delay another author's first one by at most one run
slot. Each queued run has one token in flight, so every run is eventually claimed; a duplicate
token (redelivery, sweeper re-send) finds nothing left to claim and is a no-op.

The claim itself is a compare-and-set on the run's status (``queued`` → ``claimed``): only one of
any number of concurrent claimers wins a given run, on PostgreSQL and SQLite alike.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.clock import Clock
from app.runs.models import Run, RunEvent, RunStatus
from app.runs.repository import RunRepository
from app.submissions.models import Submission, SubmissionStatus

IN_FLIGHT = (RunStatus.claimed, RunStatus.preparing, RunStatus.running, RunStatus.scoring)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CANDIDATES = 2000


def fair_order(session: Session, hardware_class: str) -> list[str]:
    """Queued run ids of ``hardware_class`` in the order they should be claimed."""
    queued = session.execute(
        select(Run.id, Run.owner_id, Run.created_at)
        .where(Run.status == RunStatus.queued.value, Run.hardware_class == hardware_class)
        .order_by(Run.created_at).limit(CANDIDATES)
    ).all()
    if not queued:
        return []
    owners = {row.owner_id for row in queued}
    in_flight = dict(session.execute(
        select(Run.owner_id, func.count()).where(
            Run.owner_id.in_(owners), Run.status.in_([s.value for s in IN_FLIGHT]))
        .group_by(Run.owner_id)
    ).all())
    last_served = dict(session.execute(
        select(Run.owner_id, func.max(Run.claimed_at))
        .where(Run.owner_id.in_(owners), Run.claimed_at.is_not(None)).group_by(Run.owner_id)
    ).all())

    def key(row: object) -> tuple[int, datetime, datetime]:
        owner = getattr(row, "owner_id")  # noqa: B009 - Row attribute access
        served = last_served.get(owner)
        return (in_flight.get(owner, 0), served or _EPOCH, getattr(row, "created_at"))  # noqa: B009

    return [row.id for row in sorted(queued, key=key)]


def claim_run(session: Session, clock: Clock, run_id: str, worker: str) -> bool:
    """Claim exactly ``run_id``. True when this caller now owns it; the edge commits."""
    repo = RunRepository(session)
    now = clock.now()
    if not repo.compare_and_set_status(run_id, {RunStatus.queued.value}, RunStatus.claimed.value,
                                       now, worker=worker):
        return False
    run = repo.get(run_id)
    assert run is not None
    session.refresh(run)
    run.claimed_at = now
    repo.add_event(RunEvent(run_id=run_id, at=now, status=RunStatus.claimed.value, actor=worker,
                            detail={"worker": worker}))
    sub = session.get(Submission, run.submission_id)
    if sub is not None and sub.latest_run_id == run_id:
        sub.status = SubmissionStatus.running.value
        sub.updated_at = now
    session.flush()
    return True


def claim_next_run(session: Session, clock: Clock, hardware_class: str, worker: str
                   ) -> str | None:
    """Claim the fairest queued run of ``hardware_class``; ``None`` when none is left."""
    for run_id in fair_order(session, hardware_class):
        if claim_run(session, clock, run_id, worker):
            return run_id
    return None
