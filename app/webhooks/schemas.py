from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class WebhookAttemptOut(BaseModel):
    attempt: int
    at: datetime
    status_code: int | None
    error: str | None
    duration_ms: float | None


class WebhookDeliveryOut(BaseModel):
    id: str
    run_id: str
    event: str
    url: str
    status: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    attempt_log: list[WebhookAttemptOut]


class WebhookDeliveryList(BaseModel):
    items: list[WebhookDeliveryOut]
