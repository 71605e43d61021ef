from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status

from app.auth.errors import RoleNotAllowed, TokenInvalid, TokenMissing
from app.auth.models import Role
from app.deps import (
    AuthorDep,
    CallerDep,
    CatalogDep,
    ClockDep,
    ResolverDep,
    RunQueueDep,
    SessionDep,
    SettingsDep,
    caller_of,
    intake_of,
    lifespan,
    reader_of,
)
from app.errors import error_responses
from app.quotas import service as quotas
from app.quotas.errors import QuotaExceeded
from app.registry.reference import InvalidImageReference
from app.registry.resolver import ImageUnresolvable, RegistryUnavailable
from app.submissions import service
from app.submissions.errors import (
    ArtifactUriRejected,
    IdempotencyKeyReused,
    InvalidCursor,
    SubmissionAlreadyTerminal,
    SubmissionInvalid,
    SubmissionNotFound,
)
from app.submissions.presenter import etag_matches, present, present_view, strong_etag
from app.submissions.repository import SubmissionRepository
from app.submissions.schemas import (
    CancelRequest,
    SubmissionCreate,
    SubmissionOut,
    SubmissionPage,
    SubmissionPublicOut,
)
from app.webhooks.errors import WebhookUrlRejected

# The lifespan opens the event loop's database reader (``app.deps.reader_of``) for the whole
# app: every app includes this router, and FastAPI merges a router's lifespan into the app's.
router = APIRouter(prefix="/v1/submissions", tags=["submissions"], lifespan=lifespan)
AUTH_ERRORS = (TokenMissing, TokenInvalid)


@router.post(
    "", status_code=status.HTTP_202_ACCEPTED, response_model=SubmissionOut,
    responses=error_responses(*AUTH_ERRORS, RoleNotAllowed, SubmissionInvalid,
                              InvalidImageReference, ImageUnresolvable, ArtifactUriRejected,
                              IdempotencyKeyReused, RegistryUnavailable, WebhookUrlRejected,
                              QuotaExceeded),
)
async def create_submission(
    body: SubmissionCreate, request: Request, caller: AuthorDep, clock: ClockDep,
    resolver: ResolverDep, catalog: CatalogDep, queue: RunQueueDep, settings: SettingsDep,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> Response:
    """Accept a submission. A 202 means it is durable: it is committed before the answer.

    Quotas (authors; staff are exempt): ``X-Quota-Limit``/``-Remaining``/``-Reset`` (Unix time)
    for submissions in a rolling 24 hours and ``X-Quota-In-Flight-Limit``/``-Remaining`` come
    with every answer; over a quota the answer is 429 ``QuotaExceeded`` with ``Retry-After``.
    """
    ctx = service.IntakeContext(
        clock=clock, resolver=resolver, catalog=catalog, queue=queue,
        artifact_allowed_hosts=settings.artifact_allowed_hosts,
        quota=quotas.QuotaPolicy.from_settings(settings),
        webhook_insecure_hosts=settings.webhook_insecure_hosts,
        allow_process_images=settings.environment != "production"
        and settings.runner_backend in ("auto", "process"))
    intake = await intake_of(request).accept(ctx, caller, body, idempotency_key)
    sub = intake.view
    headers = {"Location": f"/v1/submissions/{sub.id}"}
    if intake.quota is not None:
        headers.update(quotas.headers(intake.quota))
    # Serialized here, like the status GET: FastAPI would validate the model it was given
    # against ``response_model`` once more before encoding it. ``response_model`` still
    # documents the answer.
    return Response(content=present_view(caller, sub).model_dump_json(), status_code=202,
                    media_type="application/json", headers=headers)


# The status GET reads its two headers itself (the poll's CPU budget is a few hundred us, and
# FastAPI spends 10 to 20 us on each declared parameter or dependency); If-None-Match is still
# documented, exactly as a declared ``Header()`` would be.
_IF_NONE_MATCH = {"parameters": [{
    "name": "if-none-match", "in": "header", "required": False,
    "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "If-None-Match"},
}]}


@router.get(
    "/{submission_id}", response_model=SubmissionOut | SubmissionPublicOut,
    responses={304: {"description": "Not modified (If-None-Match)"},
               **error_responses(*AUTH_ERRORS, SubmissionNotFound)},
    openapi_extra=_IF_NONE_MATCH,
)
async def get_submission(submission_id: str, request: Request) -> Response:
    """Status for polling. Send the last ``ETag`` as ``If-None-Match`` to get a cheap 304."""
    # Polled: it runs on the event loop with one read (the submission, its latest run and the
    # report flag; batched with the polls arriving together), the caller from the token cache
    # (app.deps.caller_of, CallerDep's work), and no worker thread.
    caller = await caller_of(request, request.headers.get("authorization"))
    view = await service.visible_status(reader_of(request), caller, submission_id)
    body = present_view(caller, view).model_dump_json().encode()
    etag = strong_etag(body)
    headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
    if etag_matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    return Response(content=body, media_type="application/json", headers=headers)


@router.get("", response_model=SubmissionPage,
            responses=error_responses(*AUTH_ERRORS, InvalidCursor))
def list_submissions(
    session: SessionDep, caller: CallerDep,
    status_filter: Annotated[str | None, Query(alias="status")] = None,
    task: str | None = None, since: datetime | None = None, cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> SubmissionPage:
    """Newest first. Authors see their own submissions; readers and staff see all."""
    after = service.decode_cursor(cursor) if cursor else None
    owner = caller.id if caller.role is Role.author else None
    rows = SubmissionRepository(session).page(
        owner_id=owner, status=status_filter, task=task, since=since, after=after,
        limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return SubmissionPage(
        items=[present(session, caller, s) for s in rows],
        next_cursor=service.encode_cursor(rows[-1]) if more and rows else None,
    )


@router.post("/{submission_id}/cancel", response_model=SubmissionOut,
             responses=error_responses(*AUTH_ERRORS, SubmissionNotFound,
                                       SubmissionAlreadyTerminal))
def cancel_submission(
    submission_id: str, session: SessionDep, caller: CallerDep, clock: ClockDep,
    body: CancelRequest | None = None,
) -> SubmissionOut | SubmissionPublicOut:
    """Cancel by the author (own, not yet terminal) or staff."""
    sub = service.cancel(session, clock, caller, submission_id, body.reason if body else None)
    return present(session, caller, sub)
