"""Request dependencies, visible in endpoint signatures and swapped in tests with
``app.dependency_overrides``."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Annotated

from fastapi import Depends, Header
from sqlalchemy.orm import Session

from app.auth.errors import RoleNotAllowed, TokenMissing
from app.auth.models import Role
from app.auth.service import Caller, authenticate
from app.catalog import Catalog
from app.clock import Clock, SystemClock
from app.db import request_session
from app.evidence.keys import KeyRing
from app.queue import CeleryRunQueue, RunQueue, get_celery_client
from app.registry.resolver import HttpRegistryResolver, ImageResolver
from app.settings import Settings, get_settings
from app.storage.port import ArtifactStore


def get_session() -> Iterator[Session]:
    yield from request_session()


def get_clock() -> Clock:
    return SystemClock()


@lru_cache(maxsize=1)
def _resolver() -> HttpRegistryResolver:
    s = get_settings()
    return HttpRegistryResolver(s.registry_insecure_hosts, s.registry_timeout_s)


def get_resolver() -> ImageResolver:
    return _resolver()


def get_run_queue() -> RunQueue:
    return CeleryRunQueue(get_celery_client())


# scope="function": commit before the response is sent, so a 202 is only ever answered for a
# submission that is durable (the default "request" scope would commit after sending).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
ClockDep = Annotated[Clock, Depends(get_clock)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ResolverDep = Annotated[ImageResolver, Depends(get_resolver)]
RunQueueDep = Annotated[RunQueue, Depends(get_run_queue)]


def get_caller(
    session: SessionDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Caller:
    if not authorization:
        raise TokenMissing("send Authorization: Bearer <token>",
                           headers={"WWW-Authenticate": "Bearer"})
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise TokenMissing("send Authorization: Bearer <token>",
                           headers={"WWW-Authenticate": "Bearer"})
    return authenticate(session, token.strip())


CallerDep = Annotated[Caller, Depends(get_caller)]


def require_staff(caller: CallerDep) -> Caller:
    if caller.role is not Role.staff:
        raise RoleNotAllowed("this action is for evaluator staff")
    return caller


def require_author_or_staff(caller: CallerDep) -> Caller:
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


def get_catalog() -> Catalog:
    from app.catalog import load_catalog

    return load_catalog(get_settings().catalog_version)


CatalogDep = Annotated[Catalog, Depends(get_catalog)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
KeyRingDep = Annotated[KeyRing, Depends(get_keyring)]
