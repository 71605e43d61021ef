from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

TierName = Literal["public_dev", "blind_archive", "live"]
ExecutionMode = Literal["sealed", "self_attested"]


class SubmissionMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(min_length=1, max_length=200)
    organization: str = Field(min_length=1, max_length=200)
    training_cutoff: AwareDatetime
    frozen_at: AwareDatetime
    pretraining_data_manifest: list[str] = Field(default_factory=list, max_length=1000)
    description: str | None = Field(default=None, max_length=4000)


class ForecastOut(BaseModel):
    item_id: str
    mean: list[float]
    quantiles: dict[str, list[float]] = Field(default_factory=dict)


class SelfAttestedWindow(BaseModel):
    window_id: str
    forecasts: list[ForecastOut]
    runtime_ms: float | None = None
    memory_mb: float | None = None


class SubmissionCreate(BaseModel):
    """What a model author asks for. Client-sent timestamps other than metadata are ignored."""

    model_config = ConfigDict(extra="ignore")

    image: str | None = Field(default=None, max_length=500,
                              description="OCI image reference; resolved to a digest at intake")
    artifact_uri: str | None = Field(
        default=None, max_length=1000,
        description="s3:// or https:// URI of the model artifact, mounted read-only at /artifact",
    )
    tasks: list[str] = Field(default_factory=list, max_length=200)
    suite: str | None = Field(default=None, max_length=100)
    tier: TierName
    execution_mode: ExecutionMode = "sealed"
    metadata: SubmissionMetadata
    predictions: dict[str, list[SelfAttestedWindow]] | None = Field(
        default=None, description="self_attested public_dev only: predictions instead of an image"
    )
    webhook_url: str | None = Field(default=None, max_length=1000)


class RunSummary(BaseModel):
    id: str
    kind: str
    status: str
    failure_reason: str | None
    created_at: datetime
    url: str


class SubmissionOut(BaseModel):
    id: str
    status: str
    failure_reason: str | None
    tier: str
    execution_mode: str
    provenance: str
    tasks: list[str]
    hardware_class: str
    image: str | None
    image_digest: str | None
    artifact_uri: str | None
    metadata: dict[str, Any]
    platform_received_at: datetime
    updated_at: datetime
    latest_run: RunSummary | None
    report_url: str | None
    url: str


class SubmissionPublicOut(BaseModel):
    """What a reader (the leaderboard frontend) sees of someone else's submission."""

    id: str
    status: str
    failure_reason: str | None
    tier: str
    execution_mode: str
    provenance: str
    tasks: list[str]
    model_name: str
    organization: str
    platform_received_at: datetime
    updated_at: datetime
    report_url: str | None
    url: str


class SubmissionPage(BaseModel):
    items: list[SubmissionOut | SubmissionPublicOut]
    next_cursor: str | None


class CancelRequest(BaseModel):
    reason: str | None = Field(default=None, max_length=2000)
