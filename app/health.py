"""Liveness and readiness. Readiness names what is down."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.db import get_engine
from app.settings import Settings, get_settings

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _check_database() -> None:
    with get_engine().connect() as conn:
        conn.execute(text("SELECT 1"))


def _check_broker(settings: Settings) -> None:
    url = settings.resolved_broker_url
    if url.startswith("redis"):
        import redis

        redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2).ping()
    elif url.startswith("filesystem") and not settings.broker_folder.is_dir():
        raise RuntimeError(f"broker folder {settings.broker_folder} missing")


def _check_store(settings: Settings) -> None:
    from app.storage import build_store

    build_store(settings).check()


@router.get("/readyz", responses={503: {"description": "A dependency is down"}})
def readyz() -> JSONResponse:
    """200 when the database, the broker and the archive store all answer; else 503."""
    settings = get_settings()
    checks: dict[str, Any] = {}
    for name, check in (("database", _check_database),
                        ("broker", lambda: _check_broker(settings)),
                        ("store", lambda: _check_store(settings))):
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:
            checks[name] = f"down: {type(exc).__name__}: {exc}"[:300]
    down = [k for k, v in checks.items() if v != "ok"]
    body = {"status": "ready" if not down else "unavailable", "checks": checks, "down": down}
    return JSONResponse(body, status_code=200 if not down else 503)
