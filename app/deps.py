"""Request dependencies, visible in endpoint signatures and swapped in tests with
``app.dependency_overrides``.

Sync dependencies run in a worker thread each (a hand-off of about 0.1 ms, measured with
``bench/intake.py``), so those that do no I/O are ``async def``: they run on the event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Annotated, Any

import anyio
from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.auth.errors import RoleNotAllowed, TokenMissing
from app.auth.models import Role
from app.auth.service import Caller, CallerCache, authenticate_cached
from app.catalog import Catalog
from app.clock import Clock, SystemClock
from app.db import Reader, ThreadedEngineReader, get_engine, get_sessionmaker, reader_lifespan
from app.evidence.keys import KeyRing
from app.queue import BackgroundRunQueue, RunQueue, get_run_sender
from app.registry.resolver import HttpRegistryResolver, ImageResolver
from app.settings import Settings, get_settings
from app.storage.port import ArtifactStore
from app.submissions.intake import Intake, default_session_intake, intake_lifespan


async def get_session() -> AsyncIterator[Session]:
    """The request's session: commit after the endpoint returns, roll back if it raised.

    Making a ``Session`` does no I/O (it takes a connection at its first statement), so it is
    made on the event loop; the commit or rollback, which talks to the database and runs the
    after-commit callbacks (enqueueing), goes to a worker thread, and is skipped when the
    session never began a transaction.
    """
    session = get_sessionmaker()()
    try:
        yield session
    except BaseException:
        await _end(session, commit=False)
        raise
    await _end(session, commit=True)


async def _end(session: Session, *, commit: bool) -> None:
    if not session.in_transaction():
        session.close()
        return
    # Shielded: a client that disconnects must not leave the transaction open.
    with anyio.CancelScope(shield=True):
        await run_in_threadpool(_commit_or_rollback, session, commit)


def _commit_or_rollback(session: Session, commit: bool) -> None:
    try:
        if commit:
            session.commit()
        else:
            session.rollback()
    finally:
        session.close()


@asynccontextmanager
async def lifespan(_: Any) -> AsyncIterator[dict[str, Any]]:
    """Per app (so per event loop): the ``Reader`` of its requests (``reader_of``) and the
    submission ``Intake`` (``intake_of``), in the lifespan state. Tests put their own there
    (``TestClient.app_state``)."""
    async with reader_lifespan() as reader, intake_lifespan() as intake:
        yield {"reader": reader, "intake": intake}


@lru_cache(maxsize=1)
def _threaded_reader() -> Reader:
    return ThreadedEngineReader(get_engine())


def reader_of(request: Request) -> Reader:
    """The reader made by ``lifespan``; without one (an app run without its lifespan), reads go
    through the sync engine in a thread.

    Taken from the request rather than declared as a dependency: FastAPI solves each declared
    dependency and parameter again on every request, at 10 to 20 us of CPU each (measured for
    the polled status GET, whose whole budget is a few hundred).
    """
    reader: Reader | None = getattr(request.state, "reader", None)
    return reader if reader is not None else _threaded_reader()


def intake_of(request: Request) -> Intake:
    """The intake made by ``lifespan`` (``reader_of``'s rule); without one, a session in a
    worker thread."""
    intake: Intake | None = getattr(request.state, "intake", None)
    return intake if intake is not None else _session_intake()


@lru_cache(maxsize=1)
def _session_intake() -> Intake:
    return default_session_intake()


@lru_cache(maxsize=1)
def caller_cache() -> CallerCache:
    """The process's token cache (``app.auth.service.CallerCache``)."""
    return CallerCache()


async def current_settings() -> Settings:
    """``get_settings`` as a dependency that runs on the event loop: a plain function one runs
    in a worker thread (a hop per request for a cached object). Tests override this one."""
    return get_settings()


async def get_clock() -> Clock:
    return SystemClock()


@lru_cache(maxsize=1)
def _resolver() -> HttpRegistryResolver:
    s = get_settings()
    return HttpRegistryResolver(s.registry_insecure_hosts, s.registry_timeout_s)


async def get_resolver() -> ImageResolver:
    return _resolver()


@lru_cache(maxsize=1)
def _run_queue() -> RunQueue:
    # The request hands the run over after its commit and answers; one thread per process
    # publishes (a lost send is re-sent by the sweeper: app.queue.BackgroundRunQueue).
    return BackgroundRunQueue(get_run_sender())


async def get_run_queue() -> RunQueue:
    return _run_queue()


# scope="function": commit before the response is sent, so a 202 is only ever answered for a
# submission that is durable (the default "request" scope would commit after sending).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
ClockDep = Annotated[Clock, Depends(get_clock)]
SettingsDep = Annotated[Settings, Depends(current_settings)]
ResolverDep = Annotated[ImageResolver, Depends(get_resolver)]
RunQueueDep = Annotated[RunQueue, Depends(get_run_queue)]


async def get_caller(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Caller:
    return await caller_of(request, authorization)


async def caller_of(request: Request, authorization: str | None) -> Caller:
    """The caller the bearer token in ``authorization`` names (``get_caller``'s work, for an
    endpoint that reads its headers itself)."""
    if not authorization:
        raise TokenMissing("send Authorization: Bearer <token>",
                           headers={"WWW-Authenticate": "Bearer"})
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise TokenMissing("send Authorization: Bearer <token>",
                           headers={"WWW-Authenticate": "Bearer"})
    return await authenticate_cached(reader_of(request), caller_cache(), token.strip())


CallerDep = Annotated[Caller, Depends(get_caller)]


async def require_staff(caller: CallerDep) -> Caller:
    if caller.role is not Role.staff:
        raise RoleNotAllowed("this action is for evaluator staff")
    return caller


async def require_author_or_staff(caller: CallerDep) -> Caller:
    if caller.role is Role.reader:
        raise RoleNotAllowed("readers cannot submit")
    return caller


StaffDep = Annotated[Caller, Depends(require_staff)]
AuthorDep = Annotated[Caller, Depends(require_author_or_staff)]


@lru_cache(maxsize=1)
def _store() -> ArtifactStore:
    from app.storage import build_store

    return build_store(get_settings())


def get_store() -> ArtifactStore:
    return _store()


@lru_cache(maxsize=1)
def _keyring() -> KeyRing:
    from app.evidence.keys import load_keyring

    return load_keyring(get_settings())


def get_keyring() -> KeyRing:
    return _keyring()


async def get_catalog() -> Catalog:
    from app.catalog import load_catalog

    # Built once per process and cached (the first request pays for it).
    return load_catalog(get_settings().catalog_version)


CatalogDep = Annotated[Catalog, Depends(get_catalog)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
KeyRingDep = Annotated[KeyRing, Depends(get_keyring)]
