"""Token issue and lookup. Tokens are shown once and stored as their sha256."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.auth.errors import TokenInvalid
from app.auth.models import ApiToken, Principal, Role
from app.auth.repository import CALLER_BY_TOKEN_HASH, AuthRepository
from app.clock import Clock
from app.db import Reader, new_id

TOKEN_PREFIX = "fts_"  # noqa: S105 - a public prefix, not a secret
# How long a request process keeps a token it has looked up. This is also how long a token
# that was revoked (or whose principal was disabled) may still be accepted by a process that
# saw it just before: at most this many seconds (docs/operations.md, "Tokens").
CALLER_CACHE_TTL_S = 2.0


@dataclass(frozen=True)
class Caller:
    id: str
    name: str
    role: Role

    @property
    def is_staff(self) -> bool:
        return self.role is Role.staff


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class CallerCache:
    """token sha256 -> the ``Caller`` it authenticated, for ``ttl_s`` seconds, per process.

    Keyed by the hash of the whole token, so an entry only ever answers for the token that was
    looked up; only successful lookups are kept (an unknown token is asked every time). Bounded:
    when full, expired entries go, and if none had expired, all of them.
    """

    def __init__(self, ttl_s: float = CALLER_CACHE_TTL_S, max_entries: int = 10_000,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._monotonic = monotonic
        self._entries: dict[str, tuple[float, Caller]] = {}
        self._lock = threading.Lock()  # the sync endpoints' threads share it with the loop

    def get(self, token_sha256: str) -> Caller | None:
        entry = self._entries.get(token_sha256)
        if entry is None or entry[0] <= self._monotonic():
            return None
        return entry[1]

    def put(self, token_sha256: str, caller: Caller) -> None:
        with self._lock:
            if len(self._entries) >= self.max_entries:
                now = self._monotonic()
                self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
                if len(self._entries) >= self.max_entries:
                    self._entries = {}
            self._entries[token_sha256] = (self._monotonic() + self.ttl_s, caller)

    def clear(self) -> None:
        with self._lock:
            self._entries = {}


async def authenticate_cached(reader: Reader, cache: CallerCache, token: str) -> Caller:
    """``authenticate`` for request handlers: from ``cache`` when it has the token, else one
    read on the event loop."""
    digest = hash_token(token)
    caller = cache.get(digest)
    if caller is not None:
        return caller
    row = await reader.first(CALLER_BY_TOKEN_HASH, {"token_sha256": digest})
    if row is None:
        raise TokenInvalid("the bearer token is unknown or revoked")
    caller = Caller(row["id"], row["name"], Role(row["role"]))
    cache.put(digest, caller)
    return caller


def authenticate(session: Session, token: str) -> Caller:
    principal = AuthRepository(session).principal_by_token_hash(hash_token(token))
    if principal is None:
        raise TokenInvalid("the bearer token is unknown or revoked")
    return Caller(principal.id, principal.name, Role(principal.role))


def create_token(session: Session, clock: Clock, *, name: str, role: Role) -> tuple[Caller, str]:
    """Create (or reuse) the principal called ``name`` and issue it a new token."""
    repo = AuthRepository(session)
    principal = repo.principal_by_name(name)
    now = clock.now()
    if principal is None:
        principal = Principal(id=new_id("prn"), name=name, role=role.value, created_at=now)
        repo.add(principal)
    elif principal.role != role.value:
        raise ValueError(f"principal {name!r} exists with role {principal.role}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    repo.add(
        ApiToken(
            id=new_id("tok"),
            principal_id=principal.id,
            token_sha256=hash_token(token),
            prefix=token[:10],
            created_at=now,
        )
    )
    return Caller(principal.id, principal.name, role), token
