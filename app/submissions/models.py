from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class SubmissionStatus(StrEnum):
    queued = "queued"
    running = "running"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL_SUBMISSION = {SubmissionStatus.completed, SubmissionStatus.failed,
                       SubmissionStatus.cancelled}


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (
        UniqueConstraint("owner_id", "idempotency_key", name="uq_submissions_owner_idem"),
        Index("ix_submissions_status_received", "status", "platform_received_at"),
        Index("ix_submissions_owner_received", "owner_id", "platform_received_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("principals.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    image_ref: Mapped[str | None] = mapped_column(String(500), nullable=True)
    image_digest_ref: Mapped[str | None] = mapped_column(String(600), nullable=True)
    image_digest: Mapped[str | None] = mapped_column(String(80), nullable=True)
    image_media_type: Mapped[str | None] = mapped_column(String(120), nullable=True)
    artifact_uri: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    tasks: Mapped[list[str]] = mapped_column(JSON)
    tier: Mapped[str] = mapped_column(String(20))
    execution_mode: Mapped[str] = mapped_column(String(20))
    hardware_class: Mapped[str] = mapped_column(String(40))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    self_attested_predictions: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    webhook_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    platform_received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    status: Mapped[str] = mapped_column(String(20))
    failure_reason: Mapped[str | None] = mapped_column(String(40), nullable=True)
    latest_run_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
