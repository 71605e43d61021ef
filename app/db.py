"""Database engine, sessions and the declarative base.

The edge owns the transaction: the request dependency (``get_session``) and the worker task base
commit or roll back; services and repositories only ``flush()``. Work that must happen only after a
commit (enqueueing a run) is registered with ``after_commit`` and dropped on rollback.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import DateTime, Engine, MetaData, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
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
