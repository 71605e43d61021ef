"""Queries of the audit trail: ``audit_events`` (actions) and ``run_events`` (run state changes),
each paged newest first with the same keyset ``(at, source rank, id)`` so they can be merged."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import ColumnElement, and_, false, or_, select, tuple_
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.audit.models import AuditEvent
from app.runs.models import Run, RunEvent, RunStatus

Source = Literal["audit", "run_events"]
# (at, source rank, id): the total order of the merged trail, newest first.
Cursor = tuple[datetime, int, int]
AUDIT_RANK = 1
RUN_EVENT_RANK = 0
RUN_ACTION_PREFIX = "run."  # a run event's action is "run.<status>", e.g. "run.failed"


@dataclass(frozen=True)
class AuditFilter:
    actor: str | None = None
    action: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    submission_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    source: Source | None = None


def _before(at: InstrumentedAttribute[datetime], ident: InstrumentedAttribute[int], rank: int,
            after: Cursor) -> ColumnElement[bool]:
    c_at, c_rank, c_id = after
    if rank < c_rank:
        return at <= c_at
    if rank > c_rank:
        return at < c_at
    return tuple_(at, ident) < tuple_(c_at, c_id)


def _window(at: InstrumentedAttribute[datetime], f: AuditFilter) -> list[ColumnElement[bool]]:
    out = []
    if f.since is not None:
        out.append(at >= f.since)
    if f.until is not None:
        out.append(at < f.until)
    return out


class AuditRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def audit_events(self, f: AuditFilter, after: Cursor | None, limit: int
                     ) -> list[tuple[AuditEvent, str | None]]:
        """Audit events with the submission each concerns (directly, or through its run)."""
        if f.source not in (None, "audit"):
            return []
        where = _window(AuditEvent.at, f)
        for column, value in ((AuditEvent.actor, f.actor), (AuditEvent.action, f.action),
                              (AuditEvent.target_type, f.target_type),
                              (AuditEvent.target_id, f.target_id)):
            if value is not None:
                where.append(column == value)
        if f.submission_id is not None:
            where.append(or_(and_(AuditEvent.target_type == "submission",
                                  AuditEvent.target_id == f.submission_id),
                             Run.submission_id == f.submission_id))
        if after is not None:
            where.append(_before(AuditEvent.at, AuditEvent.id, AUDIT_RANK, after))
        stmt = (
            select(AuditEvent, Run.submission_id)
            .outerjoin(Run, and_(AuditEvent.target_type == "run", Run.id == AuditEvent.target_id))
            .where(*where)
            .order_by(AuditEvent.at.desc(), AuditEvent.id.desc()).limit(limit)
        )
        return [(event, sub) for event, sub in self.session.execute(stmt)]

    def run_events(self, f: AuditFilter, after: Cursor | None, limit: int
                   ) -> list[tuple[RunEvent, str]]:
        """Run state changes, as audit entries with target ``run`` and action ``run.<status>``."""
        if f.source not in (None, "run_events") or f.target_type not in (None, "run"):
            return []
        where = _window(RunEvent.at, f)
        if f.action is not None:
            status = f.action.removeprefix(RUN_ACTION_PREFIX)
            known = f.action.startswith(RUN_ACTION_PREFIX) and status in set(RunStatus)
            where.append(RunEvent.status == status if known else false())
        if f.actor is not None:
            where.append(RunEvent.actor == f.actor)
        if f.target_id is not None:
            where.append(RunEvent.run_id == f.target_id)
        if f.submission_id is not None:
            where.append(Run.submission_id == f.submission_id)
        if after is not None:
            where.append(_before(RunEvent.at, RunEvent.id, RUN_EVENT_RANK, after))
        stmt = (
            select(RunEvent, Run.submission_id).join(Run, Run.id == RunEvent.run_id)
            .where(*where)
            .order_by(RunEvent.at.desc(), RunEvent.id.desc()).limit(limit)
        )
        return [(event, sub) for event, sub in self.session.execute(stmt)]
