from __future__ import annotations

from fastapi import APIRouter

from app.auth.errors import RoleNotAllowed, TokenInvalid, TokenMissing
from app.auth.models import Role
from app.deps import CallerDep, SessionDep
from app.errors import error_responses
from app.submissions import service as submissions
from app.submissions.errors import SubmissionNotFound
from app.webhooks.repository import WebhookRepository
from app.webhooks.schemas import WebhookAttemptOut, WebhookDeliveryList, WebhookDeliveryOut

router = APIRouter(prefix="/v1/submissions", tags=["webhooks"])


@router.get("/{submission_id}/webhook-deliveries", response_model=WebhookDeliveryList,
            responses=error_responses(TokenMissing, TokenInvalid, RoleNotAllowed,
                                      SubmissionNotFound))
def list_webhook_deliveries(submission_id: str, session: SessionDep, caller: CallerDep
                            ) -> WebhookDeliveryList:
    """Webhook deliveries of a submission and every attempt (author's own, or staff)."""
    sub = submissions.get_visible(session, caller, submission_id)
    if caller.role is Role.reader:
        raise RoleNotAllowed("webhook deliveries are shown to the author and staff")
    repo = WebhookRepository(session)
    return WebhookDeliveryList(items=[
        WebhookDeliveryOut(
            id=d.id, run_id=d.run_id, event=d.event, url=d.url, status=d.status,
            attempts=d.attempts, created_at=d.created_at, next_attempt_at=d.next_attempt_at,
            delivered_at=d.delivered_at,
            attempt_log=[WebhookAttemptOut(attempt=a.attempt, at=a.at, status_code=a.status_code,
                                           error=a.error, duration_ms=a.duration_ms)
                         for a in repo.attempts(d.id)],
        )
        for d in repo.for_submission(sub.id)
    ])
