"""Fixtures for the operations tests: the API fixtures of ``tests/api`` (real PostgreSQL, a
rolled-back transaction per test) plus helpers that move runs through their states the way the
worker pipeline does (``app.runs.service.transition``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.clock import SystemClock
from app.deps import current_settings
from app.runs import service as runs
from app.runs.models import Run, RunStatus
from app.settings import Settings, get_settings
from tests.api.conftest import auth, body, client, queue, resolver, tokens

__all__ = ["auth", "body", "client", "queue", "resolver", "tokens"]


def submit(client: TestClient, token: str, **over: Any) -> dict[str, Any]:
    r = client.post("/v1/submissions", json=body(**over), headers=auth(token))
    assert r.status_code == 202, r.text
    return dict(r.json())


def finish(db: Session, run_id: str, status: RunStatus = RunStatus.completed, *,
           failure_reason: str | None = None, duration_s: float = 2.0,
           **fields: Any) -> Run:
    """Drive a queued run to ``status`` through running, as the pipeline would, and commit."""
    clock = SystemClock()
    run = db.get(Run, run_id)
    assert run is not None
    if status is not RunStatus.cancelled:
        runs.transition(db, clock, run, RunStatus.running, actor="worker-test")
        run.started_at = clock.now() - timedelta(seconds=duration_s)
    for name, value in fields.items():
        setattr(run, name, value)
    runs.transition(db, clock, run, status, actor="worker-test", failure_reason=failure_reason)
    db.commit()
    return run


@pytest.fixture()
def override_settings(client: TestClient) -> Iterator[Any]:
    """``override_settings(field=value, ...)``: the app sees a copy of the settings."""

    def apply(**values: Any) -> Settings:
        settings = get_settings().model_copy(update=values)
        client.app.dependency_overrides[current_settings] = lambda: settings  # type: ignore[attr-defined]
        return settings

    yield apply
    client.app.dependency_overrides.pop(current_settings, None)  # type: ignore[attr-defined]
