from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select, tuple_
from sqlalchemy.orm import Session

from app.submissions.models import Submission


class SubmissionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, submission_id: str) -> Submission | None:
        return self.session.get(Submission, submission_id)

    def by_idempotency_key(self, owner_id: str, key: str) -> Submission | None:
        stmt = select(Submission).where(Submission.owner_id == owner_id,
                                        Submission.idempotency_key == key)
        return self.session.scalars(stmt).first()

    def add(self, submission: Submission) -> None:
        self.session.add(submission)
        self.session.flush()

    def page(
        self, *, owner_id: str | None, status: str | None, task: str | None,
        since: datetime | None, after: tuple[datetime, str] | None, limit: int,
    ) -> Sequence[Submission]:
        """Newest first; keyset pagination on (platform_received_at, id)."""
        stmt: Select[Any] = select(Submission)
        if owner_id is not None:
            stmt = stmt.where(Submission.owner_id == owner_id)
        if status is not None:
            stmt = stmt.where(Submission.status == status)
        if since is not None:
            stmt = stmt.where(Submission.platform_received_at >= since)
        if after is not None:
            stmt = stmt.where(tuple_(Submission.platform_received_at, Submission.id) < after)
        stmt = stmt.order_by(Submission.platform_received_at.desc(), Submission.id.desc())
        if task is None:
            return self.session.scalars(stmt.limit(limit)).all()
        # Task filtering on a JSON list is done here rather than in SQL so that it works the same
        # on SQLite and PostgreSQL; the scan is bounded by the page size times a small factor.
        out: list[Submission] = []
        for sub in self.session.scalars(stmt.limit(limit * 20)):
            if task in sub.tasks:
                out.append(sub)
                if len(out) == limit:
                    break
        return out
