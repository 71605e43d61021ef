"""Webhook rules: create a delivery when a run ends, and make one signed attempt at a time.

The pipeline (and the API's cancel) call ``notify_terminal`` inside the transaction that makes a
run terminal; the delivery row commits with that state change and the ``webhooks.deliver`` task
is sent, by name, only after the commit. The task calls ``attempt_delivery`` once per attempt
and schedules the next one (Celery retry with ``countdown``) while it returns ``retry``; the
``webhooks.sweep`` beat task re-sends deliveries whose message was lost.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from celery import Celery
from sqlalchemy.orm import Session

from app.clock import Clock, SystemClock, isoformat
from app.db import after_commit, new_id
from app.runs.models import TERMINAL_RUN, Run, RunStatus
from app.runs.repository import RunRepository
from app.settings import Settings, get_settings
from app.submissions.models import Submission
from app.webhooks.errors import WebhookUrlRejected
from app.webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery
from app.webhooks.repository import WebhookRepository
from app.webhooks.sender import SendResult, WebhookSender
from app.webhooks.signing import SIGNATURE_HEADER, signature_header
from app.webhooks.urls import check_webhook_url

log = logging.getLogger(__name__)

DELIVER_TASK = "webhooks.deliver"
WEBHOOK_QUEUE = "maintenance"  # every worker consumes it (see ``future-ts worker``)
MAX_BACKOFF = timedelta(hours=6)
# A message that arrives this much before its attempt is due is a duplicate (sweeper, redelivery).
EARLY_SLACK = timedelta(seconds=2)


class DeliveryDispatcher(Protocol):
    def send_delivery(self, delivery_id: str) -> None:
        """Send one ``webhooks.deliver`` message now."""
        ...


class CeleryDeliveryDispatcher:
    def __init__(self, celery: Celery, queue: str = WEBHOOK_QUEUE) -> None:
        self.celery = celery
        self.queue = queue

    def send_delivery(self, delivery_id: str) -> None:
        self.celery.send_task(DELIVER_TASK, args=[delivery_id], queue=self.queue)


def default_dispatcher() -> DeliveryDispatcher:
    from app.queue import get_celery_client

    return CeleryDeliveryDispatcher(get_celery_client())


def notify_terminal(
    session: Session, run: Run, *, dispatcher: DeliveryDispatcher | None = None,
    clock: Clock | None = None, settings: Settings | None = None,
) -> None:
    """Record a webhook delivery for ``run``'s terminal state and send it after the commit.

    Call it in the transaction that made the run terminal. A no-op when the submission has no
    ``webhook_url``, when the run is not terminal, or when this run's event was already recorded
    (so calling it twice is harmless). Only flushes; the caller's edge commits.
    """
    status = RunStatus(run.status)
    if status not in TERMINAL_RUN:
        log.warning("notify_terminal called for run %s in state %s; ignored", run.id, run.status)
        return
    sub = session.get(Submission, run.submission_id)
    if sub is None or not sub.webhook_url:
        return
    event = f"run.{status.value}"
    repo = WebhookRepository(session)
    if repo.for_run_event(run.id, event) is not None:
        return
    now = (clock or SystemClock()).now()
    delivery_id = new_id("whd")
    payload = _payload(session, settings or get_settings(), sub, run, event, delivery_id, now)
    repo.add(WebhookDelivery(
        id=delivery_id, submission_id=sub.id, run_id=run.id, event=event, url=sub.webhook_url,
        payload=payload, status=DeliveryStatus.pending.value, attempts=0, created_at=now,
        next_attempt_at=now,
    ))
    chosen = dispatcher

    def _send() -> None:
        try:
            (chosen or default_dispatcher()).send_delivery(delivery_id)
        except Exception:
            log.exception("sending webhook delivery %s failed; the sweeper will retry",
                          delivery_id)

    after_commit(session, _send)


def _payload(session: Session, settings: Settings, sub: Submission, run: Run, event: str,
             delivery_id: str, now: datetime) -> str:
    base = settings.public_base_url.rstrip("/")
    has_report = RunRepository(session).latest_report(run.id) is not None
    body: dict[str, Any] = {
        "type": event,
        "delivery_id": delivery_id,
        "created_at": isoformat(now),
        "submission": {"id": sub.id, "status": sub.status,
                       "url": f"{base}/v1/submissions/{sub.id}"},
        "run": {
            "id": run.id, "kind": run.kind, "status": run.status,
            "failure_reason": run.failure_reason,
            "finished_at": isoformat(run.finished_at) if run.finished_at else None,
            "prediction_hash": run.prediction_hash,
            "url": f"{base}/v1/runs/{run.id}",
            "report_url": f"{base}/v1/runs/{run.id}/report" if has_report else None,
        },
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class DeliveryOutcome:
    state: Literal["delivered", "retry", "failed", "skipped"]
    retry_in_s: float | None = None


def backoff(attempts: int, base_s: float) -> timedelta:
    """Exponential with +-10 % jitter: base, 2*base, 4*base... capped at six hours."""
    raw = base_s * 2 ** max(0, attempts - 1) * random.uniform(0.9, 1.1)
    return min(timedelta(seconds=raw), MAX_BACKOFF)


def attempt_delivery(
    session: Session, delivery_id: str, *, settings: Settings, clock: Clock,
    sender: WebhookSender,
) -> DeliveryOutcome:
    """Make one signed attempt, record it, and say what happens next.

    The row stays locked during the POST, so a duplicate message for the same delivery is a
    no-op instead of a second concurrent send. Receivers must still dedupe on
    ``X-FutureTS-Delivery``: a crash after the POST and before the commit resends it.
    """
    delivery = WebhookRepository(session).lock(delivery_id)
    if delivery is None or delivery.status != DeliveryStatus.pending.value:
        return DeliveryOutcome("skipped")
    now = clock.now()
    if delivery.next_attempt_at is not None and delivery.next_attempt_at - now > EARLY_SLACK:
        return DeliveryOutcome("skipped")
    started = clock.monotonic_ns()
    result = _send(delivery, settings, sender, int(now.timestamp()))
    elapsed_ms = (clock.monotonic_ns() - started) / 1e6
    return _record(session, delivery, result, now, elapsed_ms, settings)


def _send(delivery: WebhookDelivery, settings: Settings, sender: WebhookSender,
          timestamp: int) -> SendResult:
    secret = settings.webhook_secret.get_secret_value()
    if not secret:
        # Never send unsigned (or empty-key) webhooks; the attempt is retried once configured.
        return SendResult(None, "FUTURE_TS_WEBHOOK_SECRET is not configured")
    try:
        check_webhook_url(delivery.url, settings.webhook_insecure_hosts)
    except WebhookUrlRejected as exc:
        return SendResult(None, f"refused: {exc.detail}")
    body = delivery.payload.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "future-ts-webhooks/1",
        "X-FutureTS-Event": delivery.event,
        "X-FutureTS-Delivery": delivery.id,
        SIGNATURE_HEADER: signature_header(secret, timestamp, body),
    }
    return sender.post(delivery.url, body, headers, settings.webhook_timeout_s)


def _record(session: Session, delivery: WebhookDelivery, result: SendResult, now: datetime,
            elapsed_ms: float, settings: Settings) -> DeliveryOutcome:
    delivery.attempts += 1
    WebhookRepository(session).add(WebhookAttempt(
        delivery_id=delivery.id, attempt=delivery.attempts, at=now,
        status_code=result.status_code, error=result.error, duration_ms=elapsed_ms))
    delivery.last_attempt_at = now
    delivery.last_status_code = result.status_code
    delivery.last_error = result.error
    if result.ok:
        delivery.status = DeliveryStatus.delivered.value
        delivery.delivered_at = now
        delivery.next_attempt_at = None
        outcome = DeliveryOutcome("delivered")
    elif delivery.attempts >= settings.webhook_max_attempts:
        delivery.status = DeliveryStatus.failed.value
        delivery.next_attempt_at = None
        outcome = DeliveryOutcome("failed")
    else:
        wait = backoff(delivery.attempts, settings.webhook_backoff_base_s)
        delivery.next_attempt_at = now + wait
        outcome = DeliveryOutcome("retry", wait.total_seconds())
    session.flush()
    return outcome


def lost_deliveries(session: Session, clock: Clock,
                    grace: timedelta = timedelta(minutes=2)) -> list[str]:
    """Pending deliveries whose attempt is overdue by ``grace``: their message was lost."""
    return list(WebhookRepository(session).due(clock.now() - grace))
