from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import AwareDatetime

from app.audit import trail
from app.audit.repository import AuditFilter
from app.audit.schemas import AuditPage
from app.auth.errors import RoleNotAllowed, TokenInvalid, TokenMissing
from app.deps import SessionDep, StaffDep
from app.errors import error_responses
from app.submissions.errors import InvalidCursor

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=AuditPage,
            responses=error_responses(TokenMissing, TokenInvalid, RoleNotAllowed, InvalidCursor))
def list_audit(
    session: SessionDep, _staff: StaffDep,
    actor: str | None = None, action: str | None = None,
    target_type: str | None = None, target_id: str | None = None,
    submission_id: Annotated[str | None, Query(
        description="everything about one submission: its actions, its runs' actions and "
                    "its runs' state changes")] = None,
    since: AwareDatetime | None = None, until: AwareDatetime | None = None,
    source: Annotated[Literal["audit", "run_events"] | None, Query(
        description="only actions (audit) or only run state changes (run_events)")] = None,
    cursor: str | None = None, limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> AuditPage:
    """Staff: the audit trail, newest first. Staff and author actions (``submission.create``,
    ``submission.cancel``, ``run.rerun``, ``run.logs.read``...) are merged with every run
    state change (``run.<status>``, from the runs' platform-stamped timelines)."""
    f = AuditFilter(actor=actor, action=action, target_type=target_type, target_id=target_id,
                    submission_id=submission_id, since=since, until=until, source=source)
    items, next_cursor = trail.page(session, f, cursor, limit)
    return AuditPage(items=items, next_cursor=next_cursor)
