from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class AuditEntryOut(BaseModel):
    id: str = Field(description="'audit:<n>' for an action, 'run_event:<n>' for a run state "
                                "change (the id the run's SSE stream uses)")
    source: Literal["audit", "run_event"]
    at: datetime
    actor: str
    action: str = Field(description="e.g. submission.create, submission.cancel, run.rerun, "
                                    "run.logs.read; run state changes are run.<status>")
    target_type: str
    target_id: str
    submission_id: str | None
    reason: str | None
    detail: dict[str, Any]


class AuditPage(BaseModel):
    items: list[AuditEntryOut]
    next_cursor: str | None
