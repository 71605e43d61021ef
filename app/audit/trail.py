"""The merged audit trail served at ``GET /v1/audit``.

Decision: run state changes are **not** copied into ``audit_events``. ``run_events`` already
holds each one (actor, platform time, detail) in the same transaction as the change; this module
merges both tables into one trail, newest first, with one keyset cursor. Actions (staff and
author: ``submission.create``, ``submission.cancel``, ``run.rerun``, ``run.logs.read``...) are
``audit_events``; a run state change appears as action ``run.<status>`` with target ``run``.
"""

from __future__ import annotations

import base64
import heapq
import json
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.audit.repository import (
    AUDIT_RANK,
    RUN_ACTION_PREFIX,
    RUN_EVENT_RANK,
    AuditFilter,
    AuditRepository,
    Cursor,
)
from app.audit.schemas import AuditEntryOut
from app.runs.models import RunEvent
from app.submissions.errors import InvalidCursor


def page(session: Session, f: AuditFilter, cursor: str | None, limit: int
         ) -> tuple[list[AuditEntryOut], str | None]:
    """One page of the merged trail (actions and run state changes), newest first."""
    after = decode_cursor(cursor) if cursor else None
    repo = AuditRepository(session)
    entries = [(_key_audit(e), _audit_entry(e, sub)) for e, sub in
               repo.audit_events(f, after, limit + 1)]
    events = [(_key_run(e), _run_entry(e, sub)) for e, sub in repo.run_events(f, after, limit + 1)]
    merged = list(heapq.merge(entries, events, key=lambda kv: kv[0], reverse=True))[:limit + 1]
    more = len(merged) > limit
    merged = merged[:limit]
    next_cursor = encode_cursor(merged[-1][0]) if more and merged else None
    return [entry for _, entry in merged], next_cursor


def _key_audit(e: AuditEvent) -> Cursor:
    return (e.at, AUDIT_RANK, e.id)


def _key_run(e: RunEvent) -> Cursor:
    return (e.at, RUN_EVENT_RANK, e.id)


def _audit_entry(e: AuditEvent, run_submission: str | None) -> AuditEntryOut:
    submission = e.target_id if e.target_type == "submission" else run_submission
    return AuditEntryOut(id=f"audit:{e.id}", source="audit", at=e.at, actor=e.actor,
                         action=e.action, target_type=e.target_type, target_id=e.target_id,
                         submission_id=submission, reason=e.reason, detail=e.detail)


def _run_entry(e: RunEvent, submission_id: str) -> AuditEntryOut:
    detail: dict[str, Any] = dict(e.detail or {})
    reason = detail.get("reason") or detail.get("failure_reason")
    return AuditEntryOut(id=f"run_event:{e.id}", source="run_event", at=e.at, actor=e.actor,
                         action=RUN_ACTION_PREFIX + e.status, target_type="run",
                         target_id=e.run_id, submission_id=submission_id,
                         reason=str(reason) if reason is not None else None, detail=detail)


def encode_cursor(key: Cursor) -> str:
    raw = json.dumps([key[0].isoformat(), key[1], key[2]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Cursor:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, rank, ident = json.loads(raw)
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError("naive cursor time")
        return when, int(rank), int(ident)
    except (ValueError, TypeError) as exc:
        raise InvalidCursor("cursor is not one this API issued") from exc
