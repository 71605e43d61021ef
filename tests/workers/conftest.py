"""Pipeline tests: real PostgreSQL (committed, then truncated), real podman + runc, the real
registry on 127.0.0.1:5000 for resolution and pulls, and the real SeaweedFS S3 as the archive."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.auth.models import Role
from app.auth.service import create_token
from app.catalog import load_catalog
from app.clock import SystemClock
from app.db import get_engine, session_scope
from app.deps import get_catalog, get_keyring, get_run_queue, get_store
from app.evidence.keys import load_keyring
from app.main import create_app
from app.settings import Settings
from app.storage import build_store, init_store
from app.warnings import DevOnlyWarning
from tests.conftest import need_service
from workers import pipeline
from workers.runner.factory import backend_from_settings
from workers.runner.slots import CpuSlots

REGISTRY = "127.0.0.1:5000"
S3 = os.environ.get("FUTURE_TS_TEST_S3_ENDPOINT", "http://127.0.0.1:8333")
TABLES = ["webhook_deliveries", "reports", "run_events", "runs", "submissions", "api_tokens",
          "principals", "audit_events"]


def need_podman() -> None:
    if shutil.which("podman") is None:
        from tests.conftest import in_ci

        if in_ci():
            pytest.fail("podman is not installed (run .ci/setup.sh)")
        pytest.skip("podman is not installed")
    need_service("OCI registry", "127.0.0.1", 5000)


@pytest.fixture()
def committed(database_url: str) -> Iterator[None]:
    """Data the pipeline (its own sessions, other processes) can see; truncated afterwards."""
    yield
    with get_engine().begin() as conn:
        existing = set(conn.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname='public'")).scalars())
        names = ", ".join(t for t in TABLES if t in existing)
        conn.execute(text(f"TRUNCATE {names} CASCADE"))


@pytest.fixture(scope="session")
def s3_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    need_service("SeaweedFS S3", "127.0.0.1", 8333)
    data = tmp_path_factory.mktemp("pipeline")
    settings = Settings(
        environment="test", data_dir=data, store="s3", s3_endpoint_url=S3,
        s3_bucket=f"fts-test-{uuid.uuid4().hex[:10]}", s3_access_key="futurets",  # type: ignore[arg-type]
        s3_secret_key="futurets-ci-secret", object_lock_days=1,  # type: ignore[arg-type]
        runner_backend="podman", containers_conf=os.environ.get("FUTURE_TS_CONTAINERS_CONF"),
    )
    init_store(settings)
    return settings


@pytest.fixture(scope="session")
def deps(s3_settings: Settings) -> pipeline.Deps:
    need_podman()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DevOnlyWarning)
        keyring = load_keyring(s3_settings)
    return pipeline.Deps(
        s3_settings, SystemClock(), backend_from_settings(s3_settings), build_store(s3_settings),
        keyring, load_catalog(), CpuSlots.from_settings(s3_settings),
    )


class NullQueue:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send_run(self, run_id: str, hardware_class: str) -> None:
        self.sent.append(run_id)


@contextmanager
def api_for(deps: pipeline.Deps, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[TestClient, NullQueue]]:
    """The API and the in-process pipeline sharing ``deps`` (store, keys, catalog); runs are
    recorded in the queue instead of sent, and tests call ``pipeline.execute_run``."""
    monkeypatch.setattr(pipeline, "get_deps", lambda: deps)
    queue = NullQueue()
    app = create_app()
    app.dependency_overrides[get_run_queue] = lambda: queue
    app.dependency_overrides[get_store] = lambda: deps.store
    app.dependency_overrides[get_keyring] = lambda: deps.keyring
    app.dependency_overrides[get_catalog] = lambda: deps.catalog
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, queue


@pytest.fixture()
def api(committed: None, deps: pipeline.Deps, monkeypatch: pytest.MonkeyPatch
        ) -> Iterator[tuple[TestClient, NullQueue]]:
    with api_for(deps, monkeypatch) as pair:
        yield pair


def make_token(role: Role, name: str | None = None) -> str:
    with session_scope() as session:
        _, token = create_token(session, SystemClock(), name=name or f"{role.value}-"
                                f"{uuid.uuid4().hex[:6]}", role=role)
    return token


def submission_body(model: str, tasks: list[str], **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "image": f"{REGISTRY}/future-ts/{model}:latest", "tasks": tasks, "tier": "public_dev",
        "metadata": {"model_name": model, "organization": "FUTURE-TS tests",
                     "training_cutoff": "2010-01-01T00:00:00Z",
                     "frozen_at": "2010-01-02T00:00:00Z"},
    }
    body.update(over)
    return body


def leftover_containers(run_id: str) -> list[str]:
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}", "--filter",
                          f"name=fts-{run_id}"], capture_output=True, text=True, check=False)
    return [n for n in out.stdout.split() if n]


def archive_dir(tmp: Path) -> Path:
    return tmp
