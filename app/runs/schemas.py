from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class RunEventOut(BaseModel):
    at: datetime
    status: str
    actor: str
    detail: dict[str, Any]


class ReportVersionOut(BaseModel):
    version: int
    created_at: datetime
    reason: str
    envelope_sha256: str
    url: str


class RunOut(BaseModel):
    id: str
    submission_id: str
    kind: str
    status: str
    failure_reason: str | None
    failure_detail: str | None
    hardware_class: str
    seed: int | None
    image: str | None
    artifact_sha256: str | None
    operational_level: str | None
    prediction_hash: str | None
    previous_run_id: str | None
    reason: str | None
    platform_attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    summary: dict[str, Any] | None
    timeline: list[RunEventOut]
    reports: list[ReportVersionOut]
    report_url: str | None
