"""Test setup: a fresh PostgreSQL database made with ``alembic upgrade head`` (never
``create_all``), a rolled-back transaction per test, and settings pointed at a temp data dir."""

from __future__ import annotations

import os
import socket
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("FUTURE_TS_TEST_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TEST_DB = f"futurets_test_{uuid.uuid4().hex[:8]}"
TEST_DB_URL = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + TEST_DB
_DATA_DIR = Path(os.environ.get("TMPDIR", "/tmp")) / f"future-ts-test-{TEST_DB}"

os.environ["FUTURE_TS_ENVIRONMENT"] = "test"
os.environ["FUTURE_TS_DATABASE_URL"] = TEST_DB_URL
os.environ["FUTURE_TS_DATA_DIR"] = str(_DATA_DIR)
os.environ.setdefault("FUTURE_TS_BROKER_URL", "redis://127.0.0.1:6379/15")

from app.warnings import DevOnlyWarning  # noqa: E402

warnings.filterwarnings("ignore", category=DevOnlyWarning)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def need_service(name: str, host: str, port: int) -> None:
    """Fail in CI, skip elsewhere, when a real service a test needs is not running."""
    if port_open(host, port):
        return
    message = f"{name} is not running on {host}:{port} (start it with .ci/services.sh start)"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{TEST_DB}"'))
    from alembic import command
    from alembic.config import Config

    root = Path(__file__).resolve().parent.parent
    cfg = Config(str(root / "alembic.ini"))
    cfg.attributes["url"] = TEST_DB_URL
    cfg.attributes["configure_logger"] = False
    command.upgrade(cfg, "head")
    yield TEST_DB_URL
    from app.db import get_engine

    get_engine().dispose()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture()
def db_session(database_url: str) -> Iterator[object]:
    """A session inside an outer transaction that is rolled back after the test; the code under
    test may commit (it commits a savepoint)."""
    from sqlalchemy.orm import Session

    from app.db import get_engine

    connection = get_engine().connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint",
                      expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        connection.close()
