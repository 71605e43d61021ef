from __future__ import annotations

import socket

import pytest
from fastapi.testclient import TestClient

from app.settings import get_settings


def test_healthz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_ok_then_names_what_is_down(client: TestClient,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ok = client.get("/readyz")
    assert ok.status_code == 200, ok.text
    assert ok.json()["down"] == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("FUTURE_TS_BROKER_URL", f"redis://127.0.0.1:{port}/0")
    get_settings.cache_clear()
    try:
        down = client.get("/readyz")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert down.status_code == 503
    assert down.json()["down"] == ["broker"]
    assert down.json()["checks"]["database"] == "ok"
