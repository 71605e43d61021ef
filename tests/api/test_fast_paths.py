"""The hot request paths: the token cache, reads on the event loop (psycopg 3 async on the real
PostgreSQL), the request session that commits before the answer, and the status view read as
one row, which must present exactly like the ORM objects it stands for."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from app.auth.errors import TokenInvalid
from app.auth.models import ApiToken, Principal, Role
from app.auth.repository import CALLER_BY_TOKEN_HASH
from app.auth.service import Caller, CallerCache, authenticate_cached, create_token, hash_token
from app.clock import SystemClock
from app.db import (
    PsycopgPoolReader,
    Reader,
    SessionReader,
    ThreadedEngineReader,
    after_commit,
    get_engine,
    make_read_pool,
    session_scope,
)
from app.deps import SessionDep
from app.runs.models import Run, RunEvent, RunKind
from app.runs.service import create_run
from app.submissions.models import Submission
from app.submissions.repository import (
    STATUS,
    SubmissionRepository,
    SubmissionView,
    read_status,
)
from tests.api.conftest import auth, body

# --------------------------------------------------------------------------- token cache


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CountingReader:
    """Answers the token lookup from a dict and counts the reads."""

    def __init__(self, rows: dict[str, tuple[str, str, str]]) -> None:
        self.rows = rows
        self.reads = 0

    async def first(self, stmt: Any, params: Any) -> Any:
        assert stmt is CALLER_BY_TOKEN_HASH
        self.reads += 1
        row = self.rows.get(params["token_sha256"])
        return None if row is None else dict(zip(("id", "name", "role"), row, strict=True))


def test_cache_answers_within_ttl_then_asks_again() -> None:
    clock = FakeMonotonic()
    cache = CallerCache(ttl_s=2.0, monotonic=clock)
    reader = CountingReader({hash_token("fts_a"): ("prn_a", "a", "author")})

    async def call() -> Caller:
        return await authenticate_cached(reader, cache, "fts_a")

    assert asyncio.run(call()) == Caller("prn_a", "a", Role.author)
    clock.now += 1.9
    asyncio.run(call())
    assert reader.reads == 1
    # Revoked in the database: accepted until the entry expires, never after.
    reader.rows.clear()
    clock.now += 0.2
    with pytest.raises(TokenInvalid):
        asyncio.run(call())
    assert reader.reads == 2


def test_cache_keeps_only_successes_and_never_mixes_tokens() -> None:
    cache = CallerCache(ttl_s=60.0)
    reader = CountingReader({hash_token("fts_a"): ("prn_a", "a", "author"),
                             hash_token("fts_b"): ("prn_b", "b", "staff")})
    for _ in range(2):
        with pytest.raises(TokenInvalid):
            asyncio.run(authenticate_cached(reader, cache, "fts_unknown"))
    assert reader.reads == 2  # an unknown token is asked every time
    a = asyncio.run(authenticate_cached(reader, cache, "fts_a"))
    b = asyncio.run(authenticate_cached(reader, cache, "fts_b"))
    assert (a.id, a.role, b.id, b.role) == ("prn_a", Role.author, "prn_b", Role.staff)
    assert cache.get(hash_token("fts_a")) == a and cache.get(hash_token("fts_b")) == b


def test_cache_is_bounded() -> None:
    clock = FakeMonotonic()
    cache = CallerCache(ttl_s=1.0, max_entries=3, monotonic=clock)
    for i in range(3):
        cache.put(f"h{i}", Caller(f"p{i}", f"n{i}", Role.author))
    clock.now += 2  # all three expired: making room drops them
    cache.put("h3", Caller("p3", "n3", Role.author))
    assert [cache.get(f"h{i}") is not None for i in range(4)] == [False, False, False, True]
    for i in range(4, 7):  # full of live entries: all go
        cache.put(f"h{i}", Caller(f"p{i}", f"n{i}", Role.author))
    assert cache.get("h3") is None and cache.get("h6") is not None


# --------------------------------------------------------------------------- readers


@pytest.fixture()
def committed_token(database_url: str) -> Iterator[tuple[Caller, str]]:
    """A token committed for real (the event loop's reads use their own connections), removed
    afterwards."""
    with session_scope() as session:
        caller, token = create_token(session, SystemClock(), name=f"fast-{uuid.uuid4().hex[:8]}",
                                     role=Role.author)
    yield caller, token
    with session_scope() as session:
        session.execute(delete(ApiToken).where(ApiToken.principal_id == caller.id))
        session.execute(delete(Principal).where(Principal.id == caller.id))


def _lookup(reader: Reader, token: str) -> Any:
    return reader.first(CALLER_BY_TOKEN_HASH, {"token_sha256": hash_token(token)})


async def _with_pool_reader(body: Callable[[PsycopgPoolReader], Awaitable[Any]]) -> Any:
    pool, dialect = make_read_pool(get_engine().url.render_as_string(hide_password=False))
    await pool.open(wait=True)
    try:
        return await body(PsycopgPoolReader(pool, dialect))
    finally:
        await pool.close()


@pytest.fixture()
def committed_submission(committed_token: tuple[Caller, str]) -> Iterator[str]:
    caller, _ = committed_token
    clock = SystemClock()
    with session_scope() as session:
        now = clock.now()
        sub = Submission(
            id=f"sub_{uuid.uuid4().hex}", owner_id=caller.id, request_sha256="0" * 64,
            image_ref="127.0.0.1:5000/x:latest", image_digest="sha256:" + "a" * 64,
            tasks=["sunspots-yearly"], tier="public_dev", execution_mode="sealed",
            hardware_class="cpu-1c-1g", meta={"model_name": "m", "organization": "o"},
            platform_received_at=now, status="queued", updated_at=now)
        session.add(sub)
        create_run(session, clock, sub, kind=RunKind.initial, actor=caller.name)
        sub_id = sub.id
    yield sub_id
    with session_scope() as session:
        run_ids = select(Run.id).where(Run.submission_id == sub_id)
        session.execute(delete(RunEvent).where(RunEvent.run_id.in_(run_ids)))
        session.execute(delete(Run).where(Run.submission_id == sub_id))
        session.execute(delete(Submission).where(Submission.id == sub_id))


def test_pool_reader_reads_committed_rows(committed_token: tuple[Caller, str]) -> None:
    caller, token = committed_token

    async def body(reader: PsycopgPoolReader) -> tuple[Any, Any]:
        return await _lookup(reader, token), await _lookup(reader, "fts_nope")

    row, missing = asyncio.run(_with_pool_reader(body))
    assert row == {"id": caller.id, "name": caller.name, "role": "author"}
    assert missing is None


def test_pool_reader_rows_hold_what_the_orm_would(committed_submission: str) -> None:
    """Compiled once for psycopg and run without SQLAlchemy's engine, the status row still has
    SQLAlchemy's result processing (UTC datetimes, JSON): the same view as through a Session."""

    async def body(reader: PsycopgPoolReader) -> Any:
        return await read_status(reader, committed_submission)

    by_pool = asyncio.run(_with_pool_reader(body))
    with session_scope() as session:
        by_session = asyncio.run(read_status(SessionReader(session), committed_submission))
        sub = session.get(Submission, committed_submission)
        assert sub is not None
        by_orm = SubmissionView.of(sub, SubmissionRepository(session).latest_run(sub))
    assert by_pool == by_session == by_orm
    assert by_pool is not None and by_pool.platform_received_at.tzinfo is not None
    assert by_pool.meta == {"model_name": "m", "organization": "o"}


def test_pool_reader_answers_concurrent_lookups_with_one_statement(
    committed_submission: str,
) -> None:
    async def body(reader: PsycopgPoolReader) -> tuple[list[Any], list[Any]]:
        runs: list[Any] = []
        many = reader.many

        async def counting(stmt: Any, params: Any) -> Any:
            runs.append(sorted(params["keys"]))
            return await many(stmt, params)

        reader.many = counting  # type: ignore[method-assign]
        wanted = [committed_submission, "sub_missing", committed_submission]
        doomed = asyncio.ensure_future(reader.lookup(STATUS, "sub_cancelled"))
        pending = [asyncio.ensure_future(reader.lookup(STATUS, key)) for key in wanted]
        await asyncio.sleep(0)  # all of them are waiting now, in the same turn
        doomed.cancel()  # a request that went away leaves the others' answers alone
        rows = await asyncio.gather(*pending)
        later = await reader.lookup(STATUS, committed_submission)  # a turn later: its own read
        return [*rows, later], runs

    rows, runs = asyncio.run(_with_pool_reader(body))
    assert [None if r is None else r["id"] for r in rows] == [
        committed_submission, None, committed_submission, committed_submission]
    assert runs == [sorted([committed_submission, "sub_missing", "sub_cancelled"]),
                    [committed_submission]]


def test_both_forms_of_the_status_lookup_agree(committed_submission: str) -> None:
    with session_scope() as session:
        one = session.execute(STATUS.one, {"key": committed_submission}).mappings().all()
        many = session.execute(STATUS.many, {"keys": [committed_submission, "sub_nope"]}
                               ).mappings().all()
    assert len(one) == 1 and [dict(r) for r in one] == [dict(r) for r in many]


def test_pool_reader_survives_dropped_connections(committed_token: tuple[Caller, str]) -> None:
    """No check on checkout: connections whose server side went away (a restart) fail once
    inside the reader, which drops the broken ones and reads again."""
    caller, token = committed_token

    async def body(reader: PsycopgPoolReader) -> Any:
        async with reader.pool.connection() as a, reader.pool.connection() as b:
            pids = [a.info.backend_pid, b.info.backend_pid]
        with get_engine().connect() as admin:  # as a restart would
            for pid in pids:
                admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        return await _lookup(reader, token)

    row = asyncio.run(_with_pool_reader(body))
    assert row is not None and row["id"] == caller.id


def test_threaded_reader_and_revocation_through_the_api(
    committed_token: tuple[Caller, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real app (its lifespan opens the async reader) authenticates a committed token, and
    a revoked one is refused once the cache entry is older than its TTL."""
    caller, token = committed_token
    row = asyncio.run(_lookup(ThreadedEngineReader(get_engine()), token))
    assert row == {"id": caller.id, "name": caller.name, "role": "author"}
    import app.deps as deps
    from app.main import create_app

    uncached = CallerCache(ttl_s=0.0)  # no caching: revocation is seen at once
    monkeypatch.setattr(deps, "caller_cache", lambda: uncached)
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        assert isinstance(client.app_state["reader"], PsycopgPoolReader)
        assert client.get("/v1/me/quota", headers=auth(token)).status_code == 200
        with session_scope() as session:
            session.execute(update(ApiToken).where(ApiToken.principal_id == caller.id)
                            .values(revoked_at=SystemClock().now()))
        refused = client.get("/v1/me/quota", headers=auth(token))
        assert refused.status_code == 401 and refused.json()["error"] == "TokenInvalid"


# --------------------------------------------------------------------------- request session


def test_request_session_commits_before_the_answer_is_sent(database_url: str) -> None:
    order: list[str] = []
    app = FastAPI()

    @app.post("/probe")
    def probe(session: SessionDep) -> dict[str, int]:
        session.execute(text("SELECT 1"))
        after_commit(session, lambda: order.append("commit"))
        order.append("endpoint")
        return {"ok": 1}

    async def run() -> None:
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                order.append(f"response {message['status']}")

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "path": "/probe", "raw_path": b"/probe",
                 "query_string": b"", "headers": [], "scheme": "http",
                 "server": ("test", 80), "client": ("test", 1), "root_path": ""}
        await app(scope, receive, send)

    asyncio.run(run())
    assert order == ["endpoint", "commit", "response 200"]


def test_request_session_rolls_back_when_the_endpoint_raises(database_url: str) -> None:
    name = f"rolled-back-{uuid.uuid4().hex[:8]}"
    app = FastAPI()

    @app.post("/boom")
    def boom(session: SessionDep) -> None:
        create_token(session, SystemClock(), name=name, role=Role.reader)
        raise RuntimeError("after the write")

    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/boom").status_code == 500
    with session_scope() as session:
        assert session.scalar(select(Principal).where(Principal.name == name)) is None


# --------------------------------------------------------------------------- status view


def test_status_row_presents_like_the_orm_objects(client: TestClient, tokens: dict[str, str],
                                                  db_session: Session) -> None:
    """The POST answer is presented from the ORM objects, the status GET from one Core row:
    the same submission must give the same bytes (the ETag is over them)."""
    created = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert created.status_code == 202
    got = client.get(created.json()["url"], headers=auth(tokens["alice"]))
    assert got.json() == created.json()
    listed = client.get("/v1/submissions", headers=auth(tokens["alice"])).json()["items"]
    assert listed == [created.json()]
    reader = SessionReader(db_session)
    view = asyncio.run(read_status(reader, created.json()["id"]))
    assert view is not None and view.latest_run is not None and not view.has_report


def test_a_submission_takes_three_statements(client: TestClient, tokens: dict[str, str],
                                             db_session: Session) -> None:
    """The author's token is cached after the first request; a POST then locks the author,
    counts both quotas in one statement and inserts the submission (already pointing at its
    run), the run, its first event and the audit row in one statement, in that order (on
    PostgreSQL: data-modifying CTEs): no savepoint, no UPDATE, no re-count for the quota
    headers and no re-read for the answer."""
    from sqlalchemy import event

    assert client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"])
                       ).status_code == 202
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if "SAVEPOINT" not in sql:  # the test's own transaction around each commit
            statements.append(" ".join(sql.split()))

    connection = db_session.connection()
    event.listen(connection, "before_cursor_execute", record)
    try:
        r = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    finally:
        event.remove(connection, "before_cursor_execute", record)
    assert r.status_code == 202 and r.headers["X-Quota-Remaining"]
    inserts = [s.split()[2] for s in statements if s.startswith("INSERT")]
    if connection.dialect.name == "postgresql":
        assert [s.split()[0] for s in statements] == ["SELECT", "SELECT", "WITH"], statements
        inserts = [part.split()[0] for part in statements[2].split("INSERT INTO ")[1:]]
    else:
        assert [s.split()[0] for s in statements] == [
            "SELECT", "SELECT", "INSERT", "INSERT", "INSERT", "INSERT"], statements
    assert inserts == ["submissions", "runs", "run_events", "audit_events"], statements
