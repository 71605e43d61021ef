from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from app.auth.models import Principal
from app.runs.models import TERMINAL_RUN, FailureReason, Run, RunKind, RunStatus
from app.submissions.models import Submission

# A submission whose latest run ended like this does not count: the platform failed it, or the
# author (or staff) cancelled it.
_REFUNDED_REASONS = (FailureReason.platform_error.value, FailureReason.cancelled.value)
_IN_FLIGHT = tuple(s.value for s in RunStatus if s not in TERMINAL_RUN)


class QuotaRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def lock_principal(self, principal_id: str) -> None:
        """Serialize one author's quota checks until the transaction ends (PostgreSQL row lock;
        SQLite serializes writers anyway), so two concurrent submissions cannot both take the
        last unit of quota."""
        stmt = select(Principal.id).where(Principal.id == principal_id).with_for_update()
        self.session.execute(stmt)

    def counted_submissions(self, owner_id: str, since: datetime) -> tuple[int, datetime | None]:
        """How many of the owner's submissions received after ``since`` count, and the oldest."""
        refunded = and_(Run.id.is_not(None),
                        func.coalesce(Run.failure_reason, "").in_(_REFUNDED_REASONS))
        stmt = (
            select(func.count(Submission.id), func.min(Submission.platform_received_at))
            .select_from(Submission)
            .outerjoin(Run, Run.id == Submission.latest_run_id)
            .where(Submission.owner_id == owner_id, Submission.platform_received_at > since,
                   or_(Run.id.is_(None), ~refunded))
        )
        count, oldest = self.session.execute(stmt).one()
        return int(count or 0), oldest

    def runs_in_flight(self, owner_id: str) -> int:
        """The owner's own runs not yet terminal. Staff reruns never count against the author."""
        stmt = select(func.count(Run.id)).where(
            Run.owner_id == owner_id, Run.kind == RunKind.initial.value,
            Run.status.in_(_IN_FLIGHT))
        return int(self.session.scalar(stmt) or 0)
