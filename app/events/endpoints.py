from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response
from sse_starlette import EventSourceResponse

from app.auth.errors import TokenInvalid, TokenMissing
from app.auth.models import Role
from app.db import SessionFactory, get_sessionmaker
from app.deps import CallerDep, SessionDep, SettingsDep
from app.errors import error_responses
from app.events import service
from app.submissions import service as submissions
from app.submissions.errors import SubmissionNotFound

router = APIRouter(prefix="/v1/submissions", tags=["submissions"])


def get_session_factory() -> SessionFactory:
    """Short sessions for the stream's polls (one per poll, never held between them)."""
    return get_sessionmaker()


SessionFactoryDep = Annotated[SessionFactory, Depends(get_session_factory)]


@router.get(
    "/{submission_id}/events", response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}},
                     "description": "Server-Sent Events: run_event (id = run event id), status, "
                                    "end"},
               204: {"description": "Already terminal and nothing after Last-Event-ID: stop "
                                    "reconnecting"},
               **error_responses(TokenMissing, TokenInvalid, SubmissionNotFound)},
)
def submission_events(
    submission_id: str, session: SessionDep, caller: CallerDep, settings: SettingsDep,
    open_session: SessionFactoryDep,
    last_event_id: Annotated[str | None, Header()] = None,
    from_event_id: Annotated[str | None, Query(
        alias="last_event_id", description="for clients that cannot send Last-Event-ID")] = None,
) -> Response:
    """Status and run state changes as they happen (same visibility as GET submission).

    Events: ``run_event`` (``id:`` is the run event id, so ``Last-Event-ID`` resumes), ``status``
    (the submission's status changed), ``end`` (terminal: the stream closes). Comment lines are
    heartbeats. A stream also closes after ``sse_max_stream_s``; reconnect with Last-Event-ID.
    """
    sub = submissions.get_visible(session, caller, submission_id)
    public = caller.role is Role.reader and sub.owner_id != caller.id
    after = service.parse_last_event_id(last_event_id or from_event_id)
    first = service.poll(session, sub.id, after, limit=1)
    # SessionDep is function-scoped: this request's session ends when the endpoint returns, so
    # a stream (up to sse_max_stream_s) holds no connection; each poll opens its own session.
    if after and first is not None and first.terminal and not first.events:
        return Response(status_code=204)
    events = service.stream(open_session, sub.id, after_id=after, public=public,
                            interval_s=settings.sse_poll_interval_s,
                            max_stream_s=settings.sse_max_stream_s)
    return EventSourceResponse(events, ping=settings.sse_ping_s,
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
