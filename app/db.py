"""Database engine, sessions and the declarative base.

The edge owns the transaction: the request dependency (``app.deps.get_session``) and the worker
task base commit or roll back; services and repositories only ``flush()``. Work that must happen
only after a commit (enqueueing a run) is registered with ``after_commit`` and dropped on rollback.

The polled read paths (token lookup, submission status) do not use sessions: they await a
``Reader`` on the event loop (``PsycopgPoolReader`` on PostgreSQL), one statement per read.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol, cast

import anyio.to_thread
import psycopg
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import (
    DateTime,
    Dialect,
    Engine,
    MetaData,
    Select,
    create_engine,
    event,
    make_url,
)
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement
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


# --------------------------------------------------------------------------- reads on the loop

# Opens a session as a context manager (closed, or for tests left open, at its end).
SessionFactory = Callable[[], AbstractContextManager[Session]]
Record = Mapping[str, Any]
AnySelect = Select[*tuple[Any, ...]]


@dataclass(frozen=True, eq=False)
class KeyedLookup:
    """A read of at most one row by key, in two forms. ``one`` takes the key as the parameter
    ``key``. ``many`` (PostgreSQL) takes a list of keys as the array parameter ``keys`` and
    returns the rows found, each with its key in the column ``key_column``: a reader that
    batches answers concurrent lookups with one run of it."""

    one: AnySelect
    many: AnySelect
    key_column: str


class Reader(Protocol):
    """Reads for the hot request paths (token lookup, status polling), awaited on the event loop
    instead of holding a worker thread and a pooled connection per request. Each is one
    statement run alone (no surrounding transaction): a single SELECT is consistent by itself."""

    async def first(self, stmt: AnySelect, params: Mapping[str, Any]) -> Record | None:
        """The first row of ``stmt`` run with ``params``, by column key, or None."""
        ...

    async def lookup(self, lookup: KeyedLookup, key: Any) -> Record | None:
        """The row of ``lookup`` for ``key``, or None. The read starts after this call."""
        ...


@dataclass(frozen=True)
class PsycopgStatement:
    """A SQLAlchemy statement compiled once for psycopg: its SQL, the values it binds itself
    (literals), the bind processors of its parameters (``UTCDateTime``, JSON) and, for a
    ``select``, its columns' keys and result processors, so that rows hold the same values as
    through the ORM."""

    sql: str
    defaults: dict[str, Any]
    binds: tuple[tuple[str, Callable[[Any], Any]], ...]
    keys: tuple[str, ...]
    processors: tuple[Callable[[Any], Any] | None, ...]

    @classmethod
    def compile(cls, stmt: ClauseElement, dialect: Dialect) -> PsycopgStatement:
        compiled = cast(SQLCompiler, stmt.compile(dialect=dialect))
        # IN lists of constants are expanded at execution ("POSTCOMPILE"): expand them now,
        # with placeholders for the parameters a caller gives.
        expanded = compiled.construct_expanded_state(
            {name: None for name, value in compiled.params.items() if value is None})
        selected = getattr(stmt, "selected_columns", None)
        columns = list(selected) if selected is not None else []
        return cls(
            sql=expanded.statement, defaults=dict(expanded.parameters),
            binds=tuple((name, process) for name, bind in compiled.binds.items()
                        if name in compiled.params
                        and (process := bind.type.dialect_impl(dialect).bind_processor(dialect))
                        is not None),
            keys=tuple(selected.keys()) if selected is not None else (),
            processors=tuple(c.type.dialect_impl(dialect).result_processor(dialect, None)
                             for c in columns))

    def params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` as the statement binds them (processed as SQLAlchemy would). Every
        parameter must be given: column defaults are not applied."""
        out = {**self.defaults, **values}
        missing = [k for k, v in out.items() if v is None and k not in values]
        if missing:
            raise KeyError(f"no value for {missing}")
        for name, process in self.binds:
            out[name] = process(out[name])
        return out

    def record(self, row: tuple[Any, ...]) -> Record:
        return {key: value if proc is None else proc(value)
                for key, proc, value in zip(self.keys, self.processors, row, strict=True)}


_Waiters = dict[Any, list["asyncio.Future[Record | None]"]]


class PsycopgPoolReader:
    """PostgreSQL through psycopg 3's asyncio mode and its connection pool, without SQLAlchemy's
    asyncio layer: measured per status read, about 0.17 ms of CPU here against 0.45 ms through
    ``create_async_engine`` (its greenlet hops and pool events cost more than the query).

    Statements are still SQLAlchemy ``select``s: each is compiled once for the psycopg dialect,
    and its columns' result processors (``UTCDateTime``, JSON) are applied, so rows hold the
    same values as through the ORM. Parameters are sent as given (no bind processors): pass
    strings, numbers and lists of them. Connections are in autocommit: a read is one round trip
    (no BEGIN, no ROLLBACK).

    ``lookup`` batches: the lookups of one ``KeyedLookup`` made in the same turn of the event
    loop are answered by one run of its ``many`` statement, started on the next turn. Under
    load many polls arrive together, and one round trip (client and server CPU, a pooled
    connection) then serves them all; alone, a lookup waits for nothing but that turn. Each
    read still starts after its request arrived: no answer is older than its request.
    (Holding the next batch until the one in flight is done made batches bigger but, measured
    with ``bench/intake.py``, no faster, and the p99 worse.)
    """

    def __init__(self, pool: AsyncConnectionPool[Any], dialect: Dialect) -> None:
        self.pool = pool
        self.dialect = dialect
        self._prepared: dict[AnySelect, PsycopgStatement] = {}
        self._waiting: dict[KeyedLookup, _Waiters] = {}
        self._running: set[asyncio.Task[None]] = set()  # a reference until each is done

    async def first(self, stmt: AnySelect, params: Mapping[str, Any]) -> Record | None:
        prepared = self._prepared.get(stmt) or self._prepare(stmt)
        rows = await self._fetch(prepared.sql, {**prepared.defaults, **params})
        return prepared.record(rows[0]) if rows else None

    async def lookup(self, lookup: KeyedLookup, key: Any) -> Record | None:
        loop = asyncio.get_running_loop()
        waiting = self._waiting.get(lookup)
        if waiting is None:
            waiting = self._waiting[lookup] = {}
            loop.call_soon(self._dispatch, lookup)
        future: asyncio.Future[Record | None] = loop.create_future()
        waiting.setdefault(key, []).append(future)
        return await future

    async def many(self, stmt: AnySelect, params: Mapping[str, Any]) -> list[Record]:
        prepared = self._prepared.get(stmt) or self._prepare(stmt)
        rows = await self._fetch(prepared.sql, {**prepared.defaults, **params})
        return [prepared.record(row) for row in rows]

    def _dispatch(self, lookup: KeyedLookup) -> None:
        task = asyncio.ensure_future(self._answer(lookup, self._waiting.pop(lookup)))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _answer(self, lookup: KeyedLookup, waiting: _Waiters) -> None:
        try:
            rows = await self.many(lookup.many, {"keys": list(waiting)})
        except BaseException as exc:  # every waiter gets it, a cancellation included
            for futures in waiting.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        found = {row[lookup.key_column]: row for row in rows}
        for key, futures in waiting.items():
            for future in futures:
                if not future.done():  # a waiter whose request was cancelled is gone
                    future.set_result(found.get(key))

    async def _fetch(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        try:
            return await self._fetchall(sql, params)
        except psycopg.OperationalError:
            # No check on checkout (a round trip per request): connections that died with
            # their server (restart, failover) fail here instead. Drop every broken idle one,
            # then read again (a read changes nothing).
            await self.pool.check()
            return await self._fetchall(sql, params)

    async def _fetchall(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(sql, params)  # prepared server-side after 5 uses
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
            return rows

    def _prepare(self, stmt: AnySelect) -> PsycopgStatement:
        prepared = self._prepared[stmt] = PsycopgStatement.compile(stmt, self.dialect)
        return prepared


class ThreadedEngineReader:
    """Any database, through the sync engine in a worker thread (SQLite in development, and any
    app whose event loop has no ``PsycopgPoolReader``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def first(self, stmt: AnySelect, params: Mapping[str, Any]) -> Record | None:
        return await anyio.to_thread.run_sync(self._first, stmt, params)

    async def lookup(self, lookup: KeyedLookup, key: Any) -> Record | None:
        return await self.first(lookup.one, {"key": key})

    def _first(self, stmt: AnySelect, params: Mapping[str, Any]) -> Record | None:
        with self.engine.connect() as conn:
            row = conn.execute(stmt, params).first()
            return None if row is None else dict(zip(row._fields, row, strict=True))


class SessionReader:
    """Reads through an open ``Session``, inline (tests: the rolled-back test transaction)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def first(self, stmt: AnySelect, params: Mapping[str, Any]) -> Record | None:
        row = self.session.execute(stmt, params).first()
        return None if row is None else dict(zip(row._fields, row, strict=True))

    async def lookup(self, lookup: KeyedLookup, key: Any) -> Record | None:
        return await self.first(lookup.one, {"key": key})


def make_read_pool(url: str) -> tuple[AsyncConnectionPool[Any], Dialect]:
    """A closed psycopg pool for ``url`` (a ``postgresql+psycopg`` URL), connecting the way
    SQLAlchemy's dialect would, and that dialect."""
    sa_url = make_url(url)
    dialect = sa_url.get_dialect()()
    _, kwargs = dialect.create_connect_args(sa_url)
    # Per event loop (one per uvicorn worker). A read holds its connection for one round trip,
    # so a few connections serve all of a worker's concurrent polls; more wait for one.
    # PostgreSQL's max_connections is shared with the sync pools and the Celery workers.
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        kwargs={**kwargs, "autocommit": True}, min_size=1, max_size=8,
        # How long a read waits for a connection, also while the database is unreachable
        # (the pool keeps reconnecting): then it fails (500), as a sync read would at once.
        timeout=10,
        open=False, name="future-ts-reads")
    return pool, dialect


@asynccontextmanager
async def reader_lifespan() -> AsyncIterator[Reader]:
    """The reader for one event loop's lifetime: ``PsycopgPoolReader`` on PostgreSQL through
    psycopg 3 (its pool is bound to the loop that opened it, so it is made here and closed when
    the loop's app stops), ``ThreadedEngineReader`` otherwise (SQLite in development)."""
    url = get_settings().resolved_database_url
    if not url.startswith("postgresql+psycopg:"):
        yield ThreadedEngineReader(get_engine())
        return
    import app.models  # noqa: F401  (mappers, as in get_engine)

    pool, dialect = make_read_pool(url)
    await pool.open(wait=False)
    try:
        yield PsycopgPoolReader(pool, dialect)
    finally:
        await pool.close()
