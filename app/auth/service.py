"""Token issue and lookup. Tokens are shown once and stored as their sha256."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.auth.errors import TokenInvalid
from app.auth.models import ApiToken, Principal, Role
from app.auth.repository import AuthRepository
from app.clock import Clock
from app.db import new_id

TOKEN_PREFIX = "fts_"  # noqa: S105 - a public prefix, not a secret


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
