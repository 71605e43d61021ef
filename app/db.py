"""Database engine, sessions and the declarative base.

The edge owns the transaction: the request dependency (``get_session``) and the worker task base
commit or roll back; services and repositories only ``flush()``. Work that must happen only after a
commit (enqueueing a run) is registered with ``after_commit`` and dropped on rollback.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol

import anyio.to_thread
from sqlalchemy import DateTime, Engine, MetaData, Row, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.sql import Executable
from sqlalchemy.types import TypeDecorator

from app.settings import get_settings

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on PostgreSQL and SQLite alike (SQLite drops tzinfo)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=FULL")  # a 202 means durable
            cur.close()

        return engine
    # Per process. A sync endpoint holds a connection for its whole request, and each uvicorn
    # worker runs up to 40 of them at once (AnyIO's thread limit). Connections beyond pool_size
    # are closed when returned, so a pool smaller than the usual concurrency makes PostgreSQL
    # start a backend for many requests (measured: bench/intake.py); 20 kept connections cover
    # the benchmark's 32 clients over 2 workers, and the ceiling stays at 30 per process
    # (2 API workers + Celery fit in max_connections=100).
    return create_engine(url, pool_size=20, max_overflow=10, pool_pre_ping=True)


@lru_cache(maxsize=1)
def get_engine() -> Engine:
    # Every mapper must be registered before the first flush, whichever process this is
    # (API, worker, a one-off command): foreign keys are resolved across all models.
    import app.models  # noqa: F401

    return make_engine(get_settings().resolved_database_url)


@lru_cache(maxsize=1)
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


_AFTER_COMMIT_KEY = "future_ts_after_commit"


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the session's transaction commits; never if it rolls back."""
    session.info.setdefault(_AFTER_COMMIT_KEY, []).append(callback)


@event.listens_for(Session, "after_commit")
def _run_after_commit(session: Session) -> None:
    callbacks: list[Callable[[], None]] = session.info.pop(_AFTER_COMMIT_KEY, [])
    for callback in callbacks:
        callback()


@event.listens_for(Session, "after_rollback")
def _drop_after_commit(session: Session) -> None:
    session.info.pop(_AFTER_COMMIT_KEY, None)


@contextmanager
def session_scope() -> Iterator[Session]:
    """Edge-owned transaction for workers and commands: ``with session_scope() as session:``
    commits when the block ends normally (``return`` included), rolls back on an exception."""
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def request_session() -> Iterator[Session]:
    """The request dependency: commit after the endpoint returns, roll back if it raised."""
    with session_scope() as session:
        yield session


# --------------------------------------------------------------------------- reads on the loop


class Reader(Protocol):
    """One-statement reads for the hot request paths (token lookup, status polling), awaited on
    the event loop instead of holding a worker thread and a pooled connection per request."""

    async def first(self, stmt: Executable, params: Mapping[str, Any]) -> Row[Any] | None:
        """The first row of ``stmt`` run with ``params``, or None. The statement runs alone
        (no surrounding transaction): use it for single-statement reads only."""
        ...


class AsyncEngineReader:
    """PostgreSQL through psycopg 3's asyncio support. The engine runs in autocommit, so a read
    is one round trip (no BEGIN, no ROLLBACK); a single SELECT is consistent on its own."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def first(self, stmt: Executable, params: Mapping[str, Any]) -> Row[Any] | None:
        try:
            return await self._first(stmt, params)
        except DBAPIError as exc:
            # No pre-ping (a round trip per request): a connection that died with its server
            # (restart, failover) fails here instead, SQLAlchemy invalidates the pool's older
            # connections, and the read, which changes nothing, is tried once more.
            if not exc.connection_invalidated:
                raise
            return await self._first(stmt, params)

    async def _first(self, stmt: Executable, params: Mapping[str, Any]) -> Row[Any] | None:
        async with self.engine.connect() as conn:
            return (await conn.execute(stmt, params)).first()


class ThreadedEngineReader:
    """Any database, through the sync engine in a worker thread (SQLite in development, and any
    app whose event loop has no ``AsyncEngineReader``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def first(self, stmt: Executable, params: Mapping[str, Any]) -> Row[Any] | None:
        return await anyio.to_thread.run_sync(self._first, stmt, params)

    def _first(self, stmt: Executable, params: Mapping[str, Any]) -> Row[Any] | None:
        with self.engine.connect() as conn:
            return conn.execute(stmt, params).first()


class SessionReader:
    """Reads through an open ``Session``, inline (tests: the rolled-back test transaction)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def first(self, stmt: Executable, params: Mapping[str, Any]) -> Row[Any] | None:
        return self.session.execute(stmt, params).first()


def make_async_engine(url: str) -> AsyncEngine:
    # Per event loop (one per uvicorn worker). A read holds its connection for one round trip
    # only, so a few connections serve all of a worker's concurrent polls; requests beyond
    # pool_size wait for one (no overflow: PostgreSQL's max_connections is shared with the sync
    # pools of every API worker and the Celery workers).
    return create_async_engine(url, pool_size=8, max_overflow=0, pool_timeout=30,
                               isolation_level="AUTOCOMMIT")


@asynccontextmanager
async def reader_lifespan() -> AsyncIterator[Reader]:
    """The reader for one event loop's lifetime: ``AsyncEngineReader`` on PostgreSQL (its pool
    is bound to the loop that opened it, so it is made here and disposed when the loop's app
    stops), ``ThreadedEngineReader`` for other drivers (SQLite in development)."""
    url = get_settings().resolved_database_url
    if not url.startswith("postgresql+psycopg:"):  # psycopg 3, which has an asyncio mode
        yield ThreadedEngineReader(get_engine())
        return
    import app.models  # noqa: F401  (mappers, as in get_engine)

    engine = make_async_engine(url)
    try:
        yield AsyncEngineReader(engine)
    finally:
        await engine.dispose()
