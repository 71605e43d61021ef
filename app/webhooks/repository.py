from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery


class WebhookRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, obj: WebhookDelivery | WebhookAttempt) -> None:
        self.session.add(obj)
        self.session.flush()

    def for_run_event(self, run_id: str, event: str) -> WebhookDelivery | None:
        stmt = select(WebhookDelivery).where(WebhookDelivery.run_id == run_id,
                                             WebhookDelivery.event == event)
        return self.session.scalars(stmt).first()

    def lock(self, delivery_id: str) -> WebhookDelivery | None:
        """The delivery, row-locked for this attempt; None if missing or another worker holds it
        (a duplicate message must not send twice at the same time)."""
        stmt = (select(WebhookDelivery).where(WebhookDelivery.id == delivery_id)
                .with_for_update(skip_locked=True))
        return self.session.scalars(stmt).first()

    def due(self, before: datetime, limit: int = 500) -> Sequence[str]:
        stmt = (select(WebhookDelivery.id)
                .where(WebhookDelivery.status == DeliveryStatus.pending.value,
                       WebhookDelivery.next_attempt_at < before)
                .order_by(WebhookDelivery.next_attempt_at).limit(limit))
        return self.session.scalars(stmt).all()

    def for_submission(self, submission_id: str) -> Sequence[WebhookDelivery]:
        stmt = (select(WebhookDelivery).where(WebhookDelivery.submission_id == submission_id)
                .order_by(WebhookDelivery.created_at, WebhookDelivery.id))
        return self.session.scalars(stmt).all()

    def attempts(self, delivery_id: str) -> Sequence[WebhookAttempt]:
        stmt = (select(WebhookAttempt).where(WebhookAttempt.delivery_id == delivery_id)
                .order_by(WebhookAttempt.attempt))
        return self.session.scalars(stmt).all()
