from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clock import Clock

_INSERT = insert(cast(Table, AuditEvent.__table__))


def record(
    session: Session,
    clock: Clock,
    *,
    actor: str,
    action: str,
    target_type: str,
    target_id: str,
    reason: str | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one audit event in the caller's transaction (it commits or rolls back with it).

    Inserted now, with a Core statement built once: the trail is append-only and nothing reads
    the row back, so an ORM object and its unit-of-work flush would buy nothing. Rows get their
    ids in the order they are recorded."""
    session.connection().execute(_INSERT, row(
        clock, actor=actor, action=action, target_type=target_type, target_id=target_id,
        reason=reason, detail=detail))


def row(clock: Clock, *, actor: str, action: str, target_type: str, target_id: str,
        reason: str | None = None, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    """An audit event's column values, for a caller that inserts it with its own rows."""
    return {"at": clock.now(), "actor": actor, "action": action, "target_type": target_type,
            "target_id": target_id, "reason": reason, "detail": detail or {}}
