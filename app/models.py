"""Every mapped class, imported once so that Alembic and ``Base.metadata`` see them all."""

from app.audit.models import AuditEvent
from app.auth.models import ApiToken, Principal
from app.db import Base
from app.runs.models import Report, Run, RunEvent
from app.submissions.models import Submission
from app.webhooks.models import WebhookAttempt, WebhookDelivery

__all__ = ["ApiToken", "AuditEvent", "Base", "Principal", "Report", "Run", "RunEvent", "Submission",
           "WebhookAttempt", "WebhookDelivery"]
