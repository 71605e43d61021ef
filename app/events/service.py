from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

import anyio.to_thread
from sqlalchemy.orm import Session

from app.clock import isoformat
from app.db import SessionFactory
from app.events.repository import EventRepository
from app.submissions.models import TERMINAL_SUBMISSION, SubmissionStatus

PAGE = 200


@dataclass(frozen=True)
class RunEventView:
    id: int
    run_id: str
    run_kind: str
    at: datetime
    status: str
    actor: str
    detail: dict[str, Any]

    def data(self, public: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"event_id": self.id, "run_id": self.run_id,
                               "run_kind": self.run_kind, "status": self.status,
                               "at": isoformat(self.at),
                               "failure_reason": self.detail.get("failure_reason")}
        if not public:
            out.update(actor=self.actor, detail=self.detail)
        return out


@dataclass(frozen=True)
class Snapshot:
    submission_id: str
    status: str
    failure_reason: str | None
    latest_run_id: str | None
    updated_at: datetime
    events: list[RunEventView] = field(default_factory=list)
    more: bool = False  # a full page of events came back: poll again at once

    @property
    def terminal(self) -> bool:
        return SubmissionStatus(self.status) in TERMINAL_SUBMISSION

    def status_key(self) -> tuple[str, str | None, str | None]:
        return (self.status, self.failure_reason, self.latest_run_id)

    def status_data(self) -> dict[str, Any]:
        return {"submission_id": self.submission_id, "status": self.status,
                "failure_reason": self.failure_reason, "latest_run_id": self.latest_run_id,
                "updated_at": isoformat(self.updated_at)}


def poll(session: Session, submission_id: str, after_id: int, limit: int = PAGE
         ) -> Snapshot | None:
    """The submission's state, then its run events after ``after_id``.

    Order matters: the state is read first, so that the events read after it include every
    event committed with that state. A stream that ends on a terminal state has therefore always
    sent the event that made it terminal.
    """
    repo = EventRepository(session)
    state = repo.submission_state(submission_id)
    if state is None:
        return None
    rows = repo.run_events_after(submission_id, after_id, limit)
    events = [RunEventView(r[0], r[1], r[2], r[3], r[4], r[5], dict(r[6] or {})) for r in rows]
    return Snapshot(submission_id, state[0], state[1], state[2], state[3], events,
                    more=len(rows) == limit)


def _poll_with(open_session: SessionFactory, submission_id: str, after_id: int
               ) -> Snapshot | None:
    with open_session() as session:
        return poll(session, submission_id, after_id)


async def stream(
    open_session: SessionFactory, submission_id: str, *, after_id: int, public: bool,
    interval_s: float, max_stream_s: float,
) -> AsyncIterator[dict[str, Any]]:
    """SSE items (``event``/``id``/``data``): ``run_event`` with ``id`` = the run event id,
    ``status`` when the submission's status changes (no ``id``, so ``Last-Event-ID`` stays on the
    last run event), and a final ``end`` once the submission is terminal."""
    deadline = time.monotonic() + max_stream_s
    last_status: tuple[str, str | None, str | None] | None = None
    while True:
        snap = await anyio.to_thread.run_sync(
            partial(_poll_with, open_session, submission_id, after_id))
        if snap is None:
            yield {"event": "end", "data": json.dumps({"submission_id": submission_id,
                                                       "status": None})}
            return
        for ev in snap.events:
            yield {"event": "run_event", "id": str(ev.id), "data": json.dumps(ev.data(public))}
            after_id = ev.id
        if snap.status_key() != last_status:
            last_status = snap.status_key()
            yield {"event": "status", "data": json.dumps(snap.status_data())}
        if snap.more:
            continue
        if snap.terminal:
            yield {"event": "end", "data": json.dumps(snap.status_data())}
            return
        if time.monotonic() >= deadline:
            return  # the client reconnects with Last-Event-ID and misses nothing
        await anyio.sleep(interval_s)


def parse_last_event_id(raw: str | None) -> int:
    """An unusable ``Last-Event-ID`` replays from the start rather than failing."""
    if raw is None:
        return 0
    try:
        return max(0, int(raw.strip()))
    except ValueError:
        return 0
