from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, bindparam, func, or_, select
from sqlalchemy.orm import Session

from app.auth.models import Principal
from app.runs.models import TERMINAL_RUN, FailureReason, Run, RunKind, RunStatus
from app.submissions.models import Submission

# A submission whose latest run ended like this does not count: the platform failed it, or the
# author (or staff) cancelled it.
_REFUNDED_REASONS = (FailureReason.platform_error.value, FailureReason.cancelled.value)
_IN_FLIGHT = tuple(s.value for s in RunStatus if s not in TERMINAL_RUN)


_REFUNDED = and_(Run.id.is_not(None),
                 func.coalesce(Run.failure_reason, "").in_(_REFUNDED_REASONS))
_COUNTED = (
    select(func.count(Submission.id).label("used"),
           func.min(Submission.platform_received_at).label("oldest"))
    .select_from(Submission)
    .outerjoin(Run, Run.id == Submission.latest_run_id)
    .where(Submission.owner_id == bindparam("owner_id"),
           Submission.platform_received_at > bindparam("since"),
           or_(Run.id.is_(None), ~_REFUNDED))
    .subquery()
)
_IN_FLIGHT_COUNT = (
    select(func.count(Run.id))
    .where(Run.owner_id == bindparam("owner_id"), Run.kind == RunKind.initial.value,
           Run.status.in_(_IN_FLIGHT))
    .scalar_subquery()
)
# Both quotas in one round trip (every author's POST asks), built once.
USAGE = select(_COUNTED.c.used, _COUNTED.c.oldest, _IN_FLIGHT_COUNT.label("in_flight"))
LOCK_PRINCIPAL = select(Principal.id).where(Principal.id == bindparam("id")).with_for_update()


class QuotaRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def lock_principal(self, principal_id: str) -> None:
        """Serialize one author's quota checks until the transaction ends (PostgreSQL row lock;
        SQLite serializes writers anyway), so two concurrent submissions cannot both take the
        last unit of quota."""
        # Both statements here return plain values: run on the session's connection, they skip
        # the ORM's execute path (py-spy: 8% of the API's CPU per POST went to it).
        self.session.connection().execute(LOCK_PRINCIPAL, {"id": principal_id})

    def usage(self, owner_id: str, since: datetime) -> tuple[int, datetime | None, int]:
        """How many of the owner's submissions received after ``since`` count, the oldest of
        them, and how many of the owner's own runs are not yet terminal (staff reruns never
        count against the author)."""
        used, oldest, in_flight = self.session.connection().execute(
            USAGE, {"owner_id": owner_id, "since": since}).one()
        return int(used or 0), oldest, int(in_flight or 0)
