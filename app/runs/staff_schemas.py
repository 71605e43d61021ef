from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class RerunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000,
                        description="why the run is repeated; recorded in the audit trail")
    hardware_class: str | None = Field(
        default=None, max_length=40,
        description="run on another hardware class (default: the submission's)")


class RunListItem(BaseModel):
    id: str
    kind: str
    status: str
    failure_reason: str | None
    hardware_class: str
    previous_run_id: str | None
    reason: str | None
    prediction_hash: str | None
    created_at: datetime
    finished_at: datetime | None
    url: str
    report_url: str | None


class RunList(BaseModel):
    items: list[RunListItem]
