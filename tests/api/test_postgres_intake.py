"""The POST's PostgreSQL path (``app.submissions.intake.PostgresIntake``): the app as it runs,
with its lifespan, against the test database; rows are committed for real, by a new author per
test. The other API tests run the same rules through ``SessionIntake``. ``queue`` and ``resolver``
are the fixtures of ``tests/api/conftest.py``."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select, text, update

from app.audit.models import AuditEvent
from app.auth.models import ApiToken, Principal, Role
from app.auth.service import Caller, create_token
from app.clock import SystemClock
from app.db import session_scope
from app.deps import current_settings, get_resolver, get_run_queue
from app.main import create_app
from app.registry.reference import ImageReference
from app.registry.resolver import RegistryUnavailable, ResolvedImage
from app.runs.models import Run, RunEvent
from app.settings import get_settings
from app.submissions.intake import PostgresIntake
from app.submissions.models import Submission
from tests.api.conftest import RecordingQueue, StubResolver, auth, body


@dataclass
class Author:
    caller: Caller
    token: str


@pytest.fixture()
def make_author(database_url: str) -> Iterator[Callable[..., Author]]:
    """New principals with a token, committed; removed afterwards with everything they made
    (other tests list all submissions)."""
    made: list[Author] = []

    def make(role: Role = Role.author) -> Author:
        with session_scope() as session:
            caller, token = create_token(session, SystemClock(),
                                         name=f"pg-intake-{uuid.uuid4().hex[:8]}", role=role)
        made.append(Author(caller, token))
        return made[-1]

    yield make
    ids = [a.caller.id for a in made]
    with session_scope() as session:
        subs = select(Submission.id).where(Submission.owner_id.in_(ids))
        runs = select(Run.id).where(Run.owner_id.in_(ids))
        session.execute(delete(AuditEvent).where(AuditEvent.target_id.in_(subs)))
        session.execute(delete(RunEvent).where(RunEvent.run_id.in_(runs)))
        session.execute(update(Submission).where(Submission.owner_id.in_(ids))
                        .values(latest_run_id=None))
        session.execute(delete(Run).where(Run.owner_id.in_(ids)))
        session.execute(delete(Submission).where(Submission.owner_id.in_(ids)))
        session.execute(delete(ApiToken).where(ApiToken.principal_id.in_(ids)))
        session.execute(delete(Principal).where(Principal.id.in_(ids)))


@pytest.fixture()
def author(make_author: Callable[..., Author]) -> Author:
    return make_author()


@pytest.fixture()
def pg_client(database_url: str, queue: RecordingQueue, resolver: StubResolver
              ) -> Iterator[TestClient]:
    app = create_app()
    app.dependency_overrides[get_run_queue] = lambda: queue
    app.dependency_overrides[get_resolver] = lambda: resolver
    with TestClient(app, raise_server_exceptions=False) as client:
        assert isinstance(client.app_state["intake"], PostgresIntake)
        yield client


def _count(model: Any, *where: Any) -> int:
    with session_scope() as session:
        return int(session.scalar(select(func.count()).select_from(model).where(*where)) or 0)


def _submissions(owner: Author) -> int:
    return _count(Submission, Submission.owner_id == owner.caller.id)


def test_stores_the_submission_its_run_event_and_audit_row_then_enqueues(
        pg_client: TestClient, author: Author, queue: RecordingQueue) -> None:
    r = pg_client.post("/v1/submissions", json=body(), headers=auth(author.token))
    assert r.status_code == 202, r.text
    out = r.json()
    assert r.headers["Location"] == out["url"] == f"/v1/submissions/{out['id']}"
    assert r.headers["X-Quota-Remaining"] == str(get_settings().quota_submissions_per_day - 1)
    assert r.headers["X-Quota-In-Flight-Remaining"] == str(
        get_settings().quota_runs_in_flight - 1)
    run_id = out["latest_run"]["id"]
    with session_scope() as session:
        sub = session.get(Submission, out["id"])
        run = session.get(Run, run_id)
        assert sub is not None and run is not None
        assert (sub.latest_run_id, sub.status, sub.owner_id) == (run_id, "queued",
                                                                 author.caller.id)
        assert sub.image_digest == "sha256:" + "ab" * 32
        assert sub.meta["model_name"] == "snaive" and sub.tasks == ["sunspots-yearly"]
        assert sub.platform_received_at.tzinfo is not None
        assert (run.status, run.kind, run.submission_id) == ("queued", "initial", sub.id)
        events = session.scalars(select(RunEvent).where(RunEvent.run_id == run_id)).all()
        assert [(e.status, e.actor) for e in events] == [("queued", author.caller.name)]
        audit = session.scalars(select(AuditEvent).where(AuditEvent.target_id == sub.id)).all()
        assert [(a.action, a.detail["run_id"]) for a in audit] == [("submission.create", run_id)]
    assert queue.sent == [(run_id, out["hardware_class"])]
    # The status poll (another path, another pool) answers what the POST answered.
    assert pg_client.get(out["url"], headers=auth(author.token)).json() == out


def test_over_quota_is_refused_before_anything_is_stored(
        pg_client: TestClient, author: Author, queue: RecordingQueue,
        resolver: StubResolver) -> None:
    settings = get_settings().model_copy(update={"quota_submissions_per_day": 1})
    pg_client.app.dependency_overrides[current_settings] = lambda: settings  # type: ignore[attr-defined]
    assert pg_client.post("/v1/submissions", json=body(),
                          headers=auth(author.token)).status_code == 202
    refused = pg_client.post("/v1/submissions", json=body(), headers=auth(author.token))
    assert refused.status_code == 429 and refused.json()["error"] == "QuotaExceeded"
    assert int(refused.headers["Retry-After"]) > 0
    assert refused.headers["X-Quota-Remaining"] == "0"
    assert _submissions(author) == 1 and len(queue.sent) == 1
    assert resolver.calls == 1  # refused before the registry was asked


def test_idempotency_key_replays_and_refuses_another_body(
        pg_client: TestClient, author: Author, queue: RecordingQueue) -> None:
    headers = {**auth(author.token), "Idempotency-Key": "k-1"}
    first = pg_client.post("/v1/submissions", json=body(), headers=headers)
    again = pg_client.post("/v1/submissions", json=body(), headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    # A replay is not counted again: the quota is shown as it is.
    assert again.headers["X-Quota-Remaining"] == first.headers["X-Quota-Remaining"]
    other = pg_client.post("/v1/submissions", json=body(image="127.0.0.1:5000/other:latest"),
                           headers=headers)
    assert other.status_code == 409 and other.json()["error"] == "IdempotencyKeyReused"
    assert _submissions(author) == 1 and len(queue.sent) == 1


def test_concurrent_requests_with_one_key_make_one_submission(
        pg_client: TestClient, author: Author, queue: RecordingQueue) -> None:
    """All look the key up before the first commits (a slow registry holds the first, and the
    author's row lock the rest): the losers' inserts collide, and they replay the winner."""
    class Slow(StubResolver):
        def resolve(self, ref: ImageReference) -> ResolvedImage:
            time.sleep(0.2)
            return super().resolve(ref)

    slow = Slow()
    pg_client.app.dependency_overrides[get_resolver] = lambda: slow  # type: ignore[attr-defined]
    headers = {**auth(author.token), "Idempotency-Key": "k-race"}
    answers: list[Any] = []
    start = threading.Barrier(6)

    def post() -> None:
        start.wait()
        answers.append(pg_client.post("/v1/submissions", json=body(), headers=headers))

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [a.status_code for a in answers] == [202] * 6, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert _submissions(author) == 1 and len(queue.sent) == 1
    assert slow.calls > 1  # the race happened: more than one got past the key lookup


def test_registry_down_is_503_stores_nothing_and_releases_the_author(
        pg_client: TestClient, author: Author, queue: RecordingQueue) -> None:
    class Down:
        def resolve(self, ref: ImageReference) -> ResolvedImage:
            raise RegistryUnavailable("registry unreachable", headers={"Retry-After": "30"})

    pg_client.app.dependency_overrides[get_resolver] = lambda: Down()  # type: ignore[attr-defined]
    r = pg_client.post("/v1/submissions", json=body(), headers=auth(author.token))
    assert r.status_code == 503 and r.headers["Retry-After"] == "30"
    assert _submissions(author) == 0 and queue.sent == []
    pg_client.app.dependency_overrides[get_resolver] = StubResolver  # type: ignore[attr-defined]
    # The author's row lock went with the rolled-back transaction: the next one goes through.
    assert pg_client.post("/v1/submissions", json=body(),
                          headers=auth(author.token)).status_code == 202


def test_invalid_body_is_422_and_stores_nothing(pg_client: TestClient, author: Author) -> None:
    r = pg_client.post("/v1/submissions", json=body(tasks=["no-such-task"]),
                       headers=auth(author.token))
    assert r.status_code == 422 and r.json()["error"] == "invalid_submission"
    assert _submissions(author) == 0


def test_staff_are_not_counted(pg_client: TestClient, make_author: Callable[..., Author]
                               ) -> None:
    staff = make_author(Role.staff)
    r = pg_client.post("/v1/submissions", json=body(), headers=auth(staff.token))
    assert r.status_code == 202 and "X-Quota-Remaining" not in r.headers


def test_compiled_statement_binds_as_sqlalchemy_and_wants_every_parameter() -> None:
    from datetime import UTC, datetime

    from sqlalchemy.dialects.postgresql import psycopg as pg_dialect

    from app.db import PsycopgStatement
    from app.quotas.repository import USAGE

    stmt = PsycopgStatement.compile(USAGE, pg_dialect.dialect())
    assert "POSTCOMPILE" not in stmt.sql and "'queued'" not in stmt.sql  # IN lists: bound
    assert "queued" in stmt.defaults.values()
    with pytest.raises(KeyError, match="since"):
        stmt.params({"owner_id": "prn_x"})
    since = datetime(2026, 1, 1, tzinfo=UTC)
    assert stmt.params({"owner_id": "prn_x", "since": since})["since"] == since


def test_survives_connections_that_died_with_their_server(
        pg_client: TestClient, author: Author, queue: RecordingQueue) -> None:
    """No check on checkout: a pooled connection whose server side went away (a restart) fails
    at BEGIN, before anything is sent; the intake drops the broken ones and begins again."""
    intake = pg_client.app_state["intake"]
    assert pg_client.post("/v1/submissions", json=body(),
                          headers=auth(author.token)).status_code == 202
    with intake.pool.connection() as conn:
        pids = [conn.info.backend_pid]
    assert intake.pool.get_stats()["pool_size"] == 1  # the one the next submission gets
    with session_scope() as session:  # as a restart would
        killed = session.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pids[0]})
    assert killed
    r = pg_client.post("/v1/submissions", json=body(), headers=auth(author.token))
    assert r.status_code == 202, r.text
    assert _submissions(author) == 2 and len(queue.sent) == 2
