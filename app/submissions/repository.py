from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, exists, select, tuple_
from sqlalchemy.orm import Session, defer

from app.runs.models import Report, Run
from app.submissions.models import Submission


@dataclass(frozen=True)
class LatestRun:
    """A submission's latest run (None before it has one) and whether that run has a report."""

    run: Run | None
    has_report: bool


NO_RUN = LatestRun(None, False)

# The status path's statements are built once: SQLAlchemy memoizes a statement's cache key on
# the statement object, so reusing it skips building and keying the query on every poll (about
# 0.4 ms of CPU per request on the 2-core benchmark machine; bench/intake.py).
# Whether the run in the FROM clause has a report (correlated to it; false when it is NULL).
_HAS_REPORT = exists().where(Report.run_id == Run.id).label("has_report")
# Columns that can be large and that a status never shows (self-attested predictions, a run's
# summary and failure detail) are not loaded; touching them later loads them.
_WITH_LATEST_RUN = (
    select(Submission, Run, _HAS_REPORT)
    .outerjoin(Run, Run.id == Submission.latest_run_id)
    .where(Submission.id == bindparam("submission_id"))
    .options(defer(Submission.self_attested_predictions), defer(Run.summary),
             defer(Run.failure_detail))
)
_LATEST_RUN = select(Run, _HAS_REPORT).where(Run.id == bindparam("run_id"))


class SubmissionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, submission_id: str) -> Submission | None:
        return self.session.get(Submission, submission_id)

    def get_with_latest_run(self, submission_id: str) -> tuple[Submission, LatestRun] | None:
        """The submission, its latest run and whether that run has a report, in one query: the
        status endpoint is polled, and this is all it reads."""
        row = self.session.execute(_WITH_LATEST_RUN, {"submission_id": submission_id}).first()
        if row is None:
            return None
        sub, run, has_report = row
        return sub, LatestRun(run, bool(has_report))

    def latest_run(self, sub: Submission) -> LatestRun:
        """``sub``'s latest run and whether it has a report, in one query (none before a run)."""
        if sub.latest_run_id is None:
            return NO_RUN
        row = self.session.execute(_LATEST_RUN, {"run_id": sub.latest_run_id}).first()
        if row is None:
            return NO_RUN
        run, has_report = row
        return LatestRun(run, bool(has_report))

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
