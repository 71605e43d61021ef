"""Webhook delivery tasks: thin and named; the rules are in ``app.webhooks.service``.

``webhooks.deliver`` makes one attempt per execution and schedules the next one with a Celery
retry (exponential backoff; the delivery row's ``attempts`` is the source of truth, so a
redelivered message never exceeds ``webhook_max_attempts``). ``webhooks.sweep`` (beat) re-sends
deliveries whose message was lost (a broker restart, a send that failed after the commit).
"""

from __future__ import annotations

import logging

from celery import Task

from app.clock import SystemClock
from app.db import session_scope
from app.settings import get_settings
from app.webhooks.sender import HttpxWebhookSender
from app.webhooks.service import (
    DeliveryOutcome,
    attempt_delivery,
    default_dispatcher,
    lost_deliveries,
)
from workers.celery_app import app

log = logging.getLogger(__name__)

# A ceiling for Celery's own retry counter; the delivery row decides when to stop.
CELERY_MAX_RETRIES = 32


def run_delivery(delivery_id: str) -> DeliveryOutcome:
    """One attempt in its own transaction (committed before the task schedules a retry)."""
    outcome = DeliveryOutcome("skipped")
    with session_scope() as session:
        outcome = attempt_delivery(session, delivery_id, settings=get_settings(),
                                   clock=SystemClock(), sender=HttpxWebhookSender())
    return outcome


def sweep_lost_deliveries() -> int:
    ids: list[str] = []
    with session_scope() as session:
        ids = lost_deliveries(session, SystemClock())
    dispatcher = default_dispatcher()
    for delivery_id in ids:
        dispatcher.send_delivery(delivery_id)
    return len(ids)


@app.task(name="webhooks.deliver", bind=True, acks_late=True, time_limit=120,  # type: ignore[untyped-decorator]
          max_retries=CELERY_MAX_RETRIES)
def deliver(self: Task, delivery_id: str) -> str:
    outcome = run_delivery(delivery_id)
    if outcome.state == "retry" and outcome.retry_in_s is not None:
        log.info("webhook delivery %s failed; next attempt in %.0f s", delivery_id,
                 outcome.retry_in_s)
        raise self.retry(countdown=outcome.retry_in_s)
    return outcome.state


@app.task(name="webhooks.sweep", acks_late=True, time_limit=120)  # type: ignore[untyped-decorator]
def sweep() -> int:
    return sweep_lost_deliveries()
