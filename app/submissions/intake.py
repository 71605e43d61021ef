"""The submission POST's transaction, in two forms with the same steps (``app.submissions.service``
holds the rules both apply).

``PostgresIntake`` (PostgreSQL, the production path) uses psycopg 3 directly, without
SQLAlchemy's session: ``BEGIN``, the Idempotency-Key lookup, the author's row lock, the quota
count, one statement inserting the submission, its run, the run's first event and the audit
row, ``COMMIT``. Through a ``Session`` the same work cost about a third more of the API's CPU
per submission (bench/intake.py; the pool's ping, the ORM's execute path). psycopg's pipeline
mode (two round trips instead of five) was measured too: on loopback it took more client CPU
(485 against 370 us for the lock and the count) and saved no time.

``SessionIntake`` runs ``service.create_submission`` on a SQLAlchemy session (SQLite in
development; the tests pass their rolled-back session).

Both run in a worker thread, the registry call included. In both, the run is handed to the
queue only after the commit, and a 202 is answered only after it: an accepted submission is
durable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from weakref import WeakKeyDictionary

import anyio
import anyio.to_thread
import psycopg
from psycopg_pool import ConnectionPool
from sqlalchemy import Dialect, make_url
from sqlalchemy.orm import Session

from app.auth.service import Caller
from app.db import PsycopgStatement, SessionFactory, get_sessionmaker
from app.quotas import service as quotas
from app.quotas.repository import LOCK_PRINCIPAL, USAGE
from app.settings import get_settings
from app.submissions import service
from app.submissions.repository import (
    BY_IDEMPOTENCY_KEY,
    STATUS,
    SubmissionView,
    combined_insert,
    intake_rows,
)
from app.submissions.schemas import SubmissionCreate

# Submissions a worker process handles at once (each holds a pooled connection from its first
# round trip to its commit, the registry call included); more wait their turn, first come first
# served. With a task per request sharing the process round-robin, the slowest waited far longer
# than the rest (bench/intake.py, 32 clients: p99 about twice the median).
INTAKE_CONCURRENCY = 4


class Intake(Protocol):
    async def accept(self, ctx: service.IntakeContext, caller: Caller, body: SubmissionCreate,
                     idempotency_key: str | None) -> service.Intake:
        """Validate, resolve, store and enqueue ``body`` (or replay the submission stored under
        ``idempotency_key``); on return the submission is committed."""
        ...


_LIMITERS: WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    WeakKeyDictionary())


def intake_threads() -> anyio.CapacityLimiter:
    """The running event loop's worker threads for intake (one loop per uvicorn worker; tests
    run several). 2 threads were no better than 4 under load, 8 worse."""
    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(INTAKE_CONCURRENCY)
    return limiter


class _InWorkerThread:
    """An intake whose work (the registry call included) runs in one of the event loop's
    intake threads (``intake_threads``)."""

    async def accept(self, ctx: service.IntakeContext, caller: Caller, body: SubmissionCreate,
                     idempotency_key: str | None) -> service.Intake:
        return await anyio.to_thread.run_sync(self._accept, ctx, caller, body, idempotency_key,
                                              limiter=intake_threads())

    def _accept(self, ctx: service.IntakeContext, caller: Caller, body: SubmissionCreate,
                idempotency_key: str | None) -> service.Intake:
        raise NotImplementedError


class SessionIntake(_InWorkerThread):
    """``service.create_submission`` on a session from ``open_session``, committed in the same
    worker thread."""

    def __init__(self, open_session: SessionFactory) -> None:
        self.open_session = open_session

    def _accept(self, ctx: service.IntakeContext, caller: Caller, body: SubmissionCreate,
                idempotency_key: str | None) -> service.Intake:
        with self.open_session() as session:
            try:
                intake = service.create_submission(session, ctx, caller, body, idempotency_key)
                session.commit()  # runs the after-commit hand-over to the queue
            except BaseException:
                session.rollback()
                raise
            return intake


@contextmanager
def _new_session() -> Iterator[Session]:
    with get_sessionmaker()() as session:
        yield session


def default_session_intake() -> SessionIntake:
    return SessionIntake(_new_session)


@dataclass(frozen=True)
class _Statements:
    by_key: PsycopgStatement
    lock: PsycopgStatement
    usage: PsycopgStatement
    status: PsycopgStatement

    @classmethod
    def compile(cls, dialect: Dialect) -> _Statements:
        return cls(*(PsycopgStatement.compile(stmt, dialect)
                     for stmt in (BY_IDEMPOTENCY_KEY, LOCK_PRINCIPAL, USAGE, STATUS.one)))


class _Stale(Exception):
    """The pooled connection was dead before the transaction began."""

    def __init__(self, error: psycopg.OperationalError) -> None:
        self.error = error


@contextmanager
def _transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """``BEGIN`` on the autocommit connection ``conn`` (``_Stale`` if that fails: nothing was
    sent), then ``COMMIT``, or ``ROLLBACK`` if the block raised."""
    try:
        conn.execute("BEGIN")
    except psycopg.OperationalError as exc:
        raise _Stale(exc) from exc
    try:
        yield
    except BaseException:
        if not conn.broken:
            with contextlib.suppress(psycopg.Error):  # the block's error is the one to raise
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class _Replay(Exception):
    """Inside the transaction: the Idempotency-Key is taken; roll back and answer the stored
    submission."""

    def __init__(self, submission_id: str, request_sha256: str) -> None:
        self.submission_id = submission_id
        self.request_sha256 = request_sha256


class PostgresIntake(_InWorkerThread):
    """Intake on PostgreSQL: psycopg 3 on a pooled connection, in one worker thread per
    submission (the registry call included). Sync psycopg waits for the server in C; its
    asyncio mode waits in Python, which measured as a quarter of the API's CPU here."""

    def __init__(self, pool: ConnectionPool[Any], dialect: Dialect) -> None:
        self.pool = pool
        self.dialect = dialect
        self.sql = _Statements.compile(dialect)
        self._inserts: dict[tuple[tuple[str, tuple[str, ...]], ...], PsycopgStatement] = {}

    def _accept(self, ctx: service.IntakeContext, caller: Caller, body: SubmissionCreate,
                idempotency_key: str | None) -> service.Intake:
        try:
            return self._accept_once(ctx, caller, body, idempotency_key)
        except _Stale:
            # No check on checkout (a round trip per submission): connections that died with
            # their server (a restart, a failover) fail at BEGIN, before anything was sent.
            # Drop every broken idle one, then once more.
            self.pool.check()
        try:
            return self._accept_once(ctx, caller, body, idempotency_key)
        except _Stale as stale:
            raise stale.error from None

    def _accept_once(self, ctx: service.IntakeContext, caller: Caller, body: SubmissionCreate,
                     idempotency_key: str | None) -> service.Intake:
        raw = body.model_dump(mode="json")
        fingerprint = service.body_sha256(raw)
        policy = None if caller.is_staff else ctx.quota  # staff are not counted
        with self.pool.connection() as conn:
            usage: tuple[int, datetime | None, int] | None = None
            try:
                with _transaction(conn):
                    if idempotency_key and (hit := self._by_key(conn, caller, idempotency_key)):
                        raise _Replay(*hit)
                    quota = None
                    if policy is not None:
                        # Concurrent submissions of one author are counted one after the
                        # other: the row lock is held until COMMIT.
                        conn.execute(self.sql.lock.sql, self.sql.lock.params({"id": caller.id}))
                        usage = self._usage(conn.execute(self.sql.usage.sql, self.sql.usage.params(
                            {"owner_id": caller.id, "since": ctx.clock.now() - quotas.WINDOW}
                        )).fetchone())
                        quota = quotas.admit(quotas.counted(policy, caller, ctx.clock.now(),
                                                            usage))
                    cards = service.validate_body(raw, ctx.catalog, ctx.clock.now())
                    new = service.new_submission(ctx, caller, body, cards,
                                                 service.check_and_resolve(ctx, body),
                                                 fingerprint, idempotency_key)
                    self._insert(conn, new)
            except _Replay as replay:
                return self._replayed(conn, ctx, caller, replay, fingerprint, usage)
            except psycopg.errors.UniqueViolation:
                # A concurrent request with the same Idempotency-Key won the insert.
                if idempotency_key and (hit := self._by_key(conn, caller, idempotency_key)):
                    return self._replayed(conn, ctx, caller, _Replay(*hit), fingerprint, usage)
                raise
        ctx.queue.send_run(new.run.id, new.submission["hardware_class"])
        return service.Intake(new.view, True, service.admitted(quota, new))

    def _insert(self, conn: psycopg.Connection[Any], new: service.NewSubmission) -> None:
        rows = intake_rows(new.submission, new.run_row, new.event_row, new.audit_row)
        shape = tuple((table.name, tuple(values)) for table, values in rows)
        stmt, params = combined_insert(rows)
        prepared = self._inserts.get(shape)
        if prepared is None:
            prepared = self._inserts[shape] = PsycopgStatement.compile(stmt, self.dialect)
        conn.execute(prepared.sql, prepared.params(params))

    def _usage(self, row: tuple[Any, ...] | None) -> tuple[int, datetime | None, int]:
        assert row is not None  # aggregates: always one row
        counted = self.sql.usage.record(row)
        return int(counted["used"] or 0), counted["oldest"], int(counted["in_flight"] or 0)

    def _by_key(self, conn: psycopg.Connection[Any], caller: Caller, key: str
                ) -> tuple[str, str] | None:
        row = conn.execute(self.sql.by_key.sql, self.sql.by_key.params(
            {"owner_id": caller.id, "idempotency_key": key})).fetchone()
        return None if row is None else (row[0], row[1])

    def _replayed(self, conn: psycopg.Connection[Any], ctx: service.IntakeContext,
                  caller: Caller, replay: _Replay, fingerprint: str,
                  usage: tuple[int, datetime | None, int] | None) -> service.Intake:
        """The stored submission, as ``service.create_submission`` answers a replay."""
        service.check_replay(replay.request_sha256, fingerprint)
        row = conn.execute(self.sql.status.sql, self.sql.status.params(
            {"key": replay.submission_id})).fetchone()
        assert row is not None  # committed before its key could be seen; never deleted
        quota = None
        if ctx.quota is not None and not caller.is_staff:  # not counted again: as it is now
            if usage is None:
                usage = self._usage(conn.execute(self.sql.usage.sql, self.sql.usage.params(
                    {"owner_id": caller.id, "since": ctx.clock.now() - quotas.WINDOW}
                )).fetchone())
            quota = quotas.counted(ctx.quota, caller, ctx.clock.now(), usage)
        return service.Intake(SubmissionView.from_row(self.sql.status.record(row)), False, quota)


@asynccontextmanager
async def intake_lifespan() -> AsyncIterator[Intake]:
    """The intake for one event loop's lifetime: ``PostgresIntake`` on PostgreSQL through
    psycopg 3 (its pool is bound to the loop that opened it), ``SessionIntake`` otherwise."""
    url = get_settings().resolved_database_url
    if not url.startswith("postgresql+psycopg:"):
        yield default_session_intake()
        return
    import app.models  # noqa: F401  (mappers, as in get_engine)

    sa_url = make_url(url)
    dialect = sa_url.get_dialect()()
    _, kwargs = dialect.create_connect_args(sa_url)
    # One connection per intake thread: a submission holds its connection from its first
    # round trip to its commit, the registry call included.
    pool: ConnectionPool[Any] = ConnectionPool(
        kwargs={**kwargs, "autocommit": True}, min_size=1, max_size=INTAKE_CONCURRENCY,
        timeout=10, open=False, name="future-ts-intake")
    pool.open(wait=False)
    try:
        yield PostgresIntake(pool, dialect)
    finally:
        await anyio.to_thread.run_sync(pool.close)
