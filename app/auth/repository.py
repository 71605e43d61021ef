from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.auth.models import ApiToken, Principal

# Every authenticated request asks this (on a cache miss), so it is built once: SQLAlchemy
# memoizes the cache key on the statement object. Columns only: no ORM identity map on the way.
CALLER_BY_TOKEN_HASH = (
    select(Principal.id, Principal.name, Principal.role)
    .join(ApiToken, ApiToken.principal_id == Principal.id)
    .where(
        ApiToken.token_sha256 == bindparam("token_sha256"),
        ApiToken.revoked_at.is_(None),
        Principal.disabled_at.is_(None),
    )
)


class AuthRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def principal_by_token_hash(self, token_sha256: str) -> Principal | None:
        stmt = (
            select(Principal)
            .join(ApiToken, ApiToken.principal_id == Principal.id)
            .where(
                ApiToken.token_sha256 == token_sha256,
                ApiToken.revoked_at.is_(None),
                Principal.disabled_at.is_(None),
            )
        )
        return self.session.scalars(stmt).first()

    def principal_by_name(self, name: str) -> Principal | None:
        return self.session.scalars(select(Principal).where(Principal.name == name)).first()

    def add(self, obj: Principal | ApiToken) -> None:
        self.session.add(obj)
        self.session.flush()
