from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.logs.endpoints import get_archive_store
from app.storage.layout import STDERR, run_key
from app.storage.local import LocalDirectoryStore
from tests.ops.conftest import auth, finish, submit

pytestmark = pytest.mark.filterwarnings("ignore::app.warnings.DevOnlyWarning")


@pytest.fixture()
def store(client: TestClient, tmp_path: Path) -> LocalDirectoryStore:
    archive = LocalDirectoryStore(tmp_path / "archive")  # the real local adapter of the port
    client.app.dependency_overrides[get_archive_store] = lambda: archive  # type: ignore[attr-defined]
    return archive


def _archived(client: TestClient, token: str, db: Session, store: LocalDirectoryStore,
              log: bytes, **over: Any) -> str:
    sub = submit(client, token, **over)
    run_id = str(sub["latest_run"]["id"])
    finish(db, run_id)
    store.put_once(run_key(run_id, STDERR), log, "text/plain; charset=utf-8")
    return run_id


def test_public_dev_logs_for_author_and_staff(client: TestClient, tokens: dict[str, str],
                                              db_session: Session,
                                              store: LocalDirectoryStore) -> None:
    run_id = _archived(client, tokens["alice"], db_session, store, "loading…\nready\n".encode())
    url = f"/v1/runs/{run_id}/logs"
    for who in ("alice", "staff"):
        r = client.get(url, headers=auth(tokens[who]))
        assert r.status_code == 200, r.text
        assert r.text == "loading…\nready\n" and r.headers["content-type"].startswith("text/plain")
        assert r.headers["X-Log-Truncated"] == "false"
    assert client.get(url, headers=auth(tokens["bob"])).status_code == 404
    reader = client.get(url, headers=auth(tokens["reader"]))
    assert reader.status_code == 403 and reader.json()["error"] == "RoleNotAllowed"
    assert client.get(url).status_code == 401
    assert client.get("/v1/runs/run_nope/logs", headers=auth(tokens["staff"])).status_code == 404


def test_blind_tier_logs_are_staff_only_and_audited(
    client: TestClient, tokens: dict[str, str], db_session: Session,
    store: LocalDirectoryStore,
) -> None:
    run_id = _archived(client, tokens["alice"], db_session, store, b"context\n",
                       tasks=["nile-yearly"], tier="blind_archive",
                       metadata={"model_name": "m", "organization": "o",
                                 "training_cutoff": "2020-01-01T00:00:00Z",
                                 "frozen_at": "2020-02-01T00:00:00Z",
                                 "pretraining_data_manifest": ["none"]})
    url = f"/v1/runs/{run_id}/logs"
    author = client.get(url, headers=auth(tokens["alice"]))
    assert author.status_code == 403 and author.json()["error"] == "LogRestricted"
    assert client.get(url, headers=auth(tokens["staff"])).text == "context\n"
    trail = client.get("/v1/audit", params={"action": "run.logs.read"},
                       headers=auth(tokens["staff"])).json()["items"]
    assert [(e["actor"], e["target_id"]) for e in trail] == [("staff", run_id)]


def test_missing_and_oversized_logs(client: TestClient, tokens: dict[str, str],
                                    db_session: Session, store: LocalDirectoryStore,
                                    override_settings: Any) -> None:
    sub = submit(client, tokens["alice"])
    missing = client.get(f"/v1/runs/{sub['latest_run']['id']}/logs",
                         headers=auth(tokens["alice"]))
    assert missing.status_code == 404 and missing.json()["error"] == "LogNotAvailable"
    override_settings(stderr_cap_bytes=10)
    run_id = _archived(client, tokens["alice"], db_session, store, b"0123456789abcdef")
    r = client.get(f"/v1/runs/{run_id}/logs", headers=auth(tokens["alice"]))
    assert r.text == "0123456789" and r.headers["X-Log-Truncated"] == "true"
    assert r.headers["X-Log-Size"] == "16"
