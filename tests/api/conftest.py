from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.auth.models import Role
from app.auth.service import create_token
from app.clock import SystemClock
from app.db import SessionFactory, SessionReader
from app.deps import get_resolver, get_run_queue, get_session
from app.main import create_app
from app.registry.reference import ImageReference
from app.registry.resolver import ResolvedImage
from app.submissions.intake import SessionIntake

DIGEST = "sha256:" + "ab" * 32


@dataclass
class RecordingQueue:
    sent: list[tuple[str, str]] = field(default_factory=list)

    def send_run(self, run_id: str, hardware_class: str) -> None:
        self.sent.append((run_id, hardware_class))


class StubResolver:
    def __init__(self) -> None:
        self.calls = 0

    def resolve(self, ref: ImageReference) -> ResolvedImage:
        self.calls += 1
        return ResolvedImage(ref, ref.digest or DIGEST,
                             "application/vnd.oci.image.manifest.v1+json")


@pytest.fixture()
def queue() -> RecordingQueue:
    return RecordingQueue()


@pytest.fixture()
def resolver() -> StubResolver:
    return StubResolver()


@pytest.fixture()
def client(db_session: Session, queue: RecordingQueue, resolver: StubResolver
           ) -> Iterator[TestClient]:
    app = create_app()

    def _session() -> Iterator[Session]:
        try:
            yield db_session
            db_session.commit()
        except BaseException:
            db_session.rollback()
            raise

    app.dependency_overrides[get_session] = _session
    app.dependency_overrides[get_run_queue] = lambda: queue
    app.dependency_overrides[get_resolver] = lambda: resolver
    with TestClient(app, raise_server_exceptions=False) as c:
        # The event loop's reads (tokens, status) go through the same rolled-back transaction:
        # the reader is the lifespan's (app.deps.reader_of), and each request copies this state.
        c.app_state["reader"] = SessionReader(db_session)
        c.app_state["intake"] = SessionIntake(_shared(db_session))
        yield c


def _shared(db: Session) -> SessionFactory:
    @contextmanager
    def shared() -> Iterator[Session]:
        yield db  # the test's rolled-back transaction; not closed per request

    return shared


@pytest.fixture()
def tokens(db_session: Session) -> dict[str, str]:
    out = {}
    for name, role in [("alice", Role.author), ("bob", Role.author), ("reader", Role.reader),
                       ("staff", Role.staff)]:
        _, token = create_token(db_session, SystemClock(), name=name, role=role)
        out[name] = token
    db_session.commit()
    return out


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def body(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "image": "127.0.0.1:5000/future-ts/seasonal-naive:latest",
        "tasks": ["sunspots-yearly"], "tier": "public_dev", "execution_mode": "sealed",
        "metadata": {"model_name": "snaive", "organization": "FUTURE-TS",
                     "training_cutoff": "2020-01-01T00:00:00Z",
                     "frozen_at": "2020-02-01T00:00:00Z"},
    }
    base.update(over)
    return base
