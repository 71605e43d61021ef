from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from app.runs.models import Run, RunEvent
from app.submissions.models import Submission


class EventRepository:
    """Column queries, not ORM entities: every poll reads the database, never a cached object."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def submission_state(self, submission_id: str
                         ) -> Row[str, str | None, str | None, datetime] | None:
        stmt = select(Submission.status, Submission.failure_reason, Submission.latest_run_id,
                      Submission.updated_at).where(Submission.id == submission_id)
        return self.session.execute(stmt).first()

    def run_events_after(self, submission_id: str, after_id: int, limit: int
                         ) -> Sequence[Row[int, str, str, datetime, str, str, dict[str, Any]]]:
        stmt = (
            select(RunEvent.id, RunEvent.run_id, Run.kind, RunEvent.at, RunEvent.status,
                   RunEvent.actor, RunEvent.detail)
            .join(Run, Run.id == RunEvent.run_id)
            .where(Run.submission_id == submission_id, RunEvent.id > after_id)
            .order_by(RunEvent.id).limit(limit)
        )
        return self.session.execute(stmt).all()
