from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class RunStatus(StrEnum):
    queued = "queued"
    claimed = "claimed"
    preparing = "preparing"
    running = "running"
    scoring = "scoring"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL_RUN = frozenset({RunStatus.completed, RunStatus.failed, RunStatus.cancelled})


class RunKind(StrEnum):
    initial = "initial"
    rerun = "rerun"
    recompute = "recompute"


class FailureReason(StrEnum):
    """The closed set of DESIGN section 7; extend deliberately."""

    invalid_submission = "invalid_submission"
    image_unresolvable = "image_unresolvable"
    image_pull_failed = "image_pull_failed"
    artifact_unavailable = "artifact_unavailable"
    startup_timeout = "startup_timeout"
    protocol_error = "protocol_error"
    invalid_predictions = "invalid_predictions"
    latency_budget_exceeded = "latency_budget_exceeded"
    oom = "oom"
    timeout = "timeout"
    container_crashed = "container_crashed"
    cancelled = "cancelled"
    platform_error = "platform_error"


PLATFORM_FAULTS = frozenset({FailureReason.platform_error})


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_status_class", "status", "hardware_class"),
        Index("ix_runs_submission", "submission_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"))
    owner_id: Mapped[str] = mapped_column(String(40), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    failure_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    failure_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    hardware_class: Mapped[str] = mapped_column(String(40))
    seed: Mapped[int | None] = mapped_column(Integer, nullable=True)
    image_digest_ref: Mapped[str | None] = mapped_column(String(600), nullable=True)
    artifact_sha256: Mapped[str | None] = mapped_column(String(80), nullable=True)
    previous_run_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    requested_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    platform_attempts: Mapped[int] = mapped_column(Integer, default=0)
    operational_level: Mapped[str | None] = mapped_column(String(40), nullable=True)
    prediction_hash: Mapped[str | None] = mapped_column(String(80), nullable=True)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    status_changed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class RunEvent(Base):
    __tablename__ = "run_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    status: Mapped[str] = mapped_column(String(20))
    actor: Mapped[str] = mapped_column(String(200))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class Report(Base):
    __tablename__ = "reports"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    envelope: Mapped[str] = mapped_column(Text)
    envelope_sha256: Mapped[str] = mapped_column(String(64))
    archive_key: Mapped[str | None] = mapped_column(String(500), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
