from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.audit.models import AuditEvent
from app.clock import Clock


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
    """Append one audit event in the caller's transaction (it commits or rolls back with it)."""
    session.add(
        AuditEvent(
            at=clock.now(), actor=actor, action=action, target_type=target_type,
            target_id=target_id, reason=reason, detail=detail or {},
        )
    )
