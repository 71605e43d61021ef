from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.runs.models import RunStatus
from tests.api.conftest import RecordingQueue
from tests.ops.conftest import auth, body, finish, submit


def test_daily_quota_429_with_headers_and_platform_faults_refunded(
    client: TestClient, tokens: dict[str, str], queue: RecordingQueue, db_session: Session,
    override_settings: Any,
) -> None:
    override_settings(quota_submissions_per_day=2, quota_runs_in_flight=10)
    first = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert first.status_code == 202
    assert first.headers["X-Quota-Limit"] == "2" and first.headers["X-Quota-Remaining"] == "1"
    reset = int(first.headers["X-Quota-Reset"])
    assert time.time() + 86_300 < reset <= time.time() + 86_401
    second = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert second.headers["X-Quota-Remaining"] == "0"

    refused = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert refused.status_code == 429
    assert refused.json()["error"] == "QuotaExceeded"
    assert refused.json()["detail"]["exceeded"] == ["submissions_per_day"]
    assert 86_000 < int(refused.headers["Retry-After"]) <= 86_400
    assert refused.headers["X-Quota-Remaining"] == "0"
    assert len(queue.sent) == 2  # nothing was stored or enqueued for the refused one

    # A platform fault gives the unit back; so does a cancellation.
    finish(db_session, first.json()["latest_run"]["id"], RunStatus.failed,
           failure_reason="platform_error")
    again = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert again.status_code == 202 and again.headers["X-Quota-Remaining"] == "0"
    assert client.post("/v1/submissions", json=body(),
                       headers=auth(tokens["alice"])).status_code == 429
    assert client.post(f"{again.json()['url']}/cancel",
                       headers=auth(tokens["alice"])).status_code == 200
    assert client.post("/v1/submissions", json=body(),
                       headers=auth(tokens["alice"])).status_code == 202
    # The author's own failure (not a platform fault) still counts.
    finish(db_session, second.json()["latest_run"]["id"], RunStatus.failed, failure_reason="oom")
    assert client.post("/v1/submissions", json=body(),
                       headers=auth(tokens["alice"])).status_code == 429
    # Quotas are per author; staff are exempt and get no quota headers.
    assert client.post("/v1/submissions", json=body(),
                       headers=auth(tokens["bob"])).status_code == 202
    for _ in range(3):
        r = client.post("/v1/submissions", json=body(), headers=auth(tokens["staff"]))
        assert r.status_code == 202 and "X-Quota-Limit" not in r.headers


def test_runs_in_flight_quota(client: TestClient, tokens: dict[str, str], db_session: Session,
                              override_settings: Any) -> None:
    override_settings(quota_submissions_per_day=100, quota_runs_in_flight=1,
                      quota_in_flight_retry_after_s=42)
    sub = submit(client, tokens["alice"])
    refused = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "42"
    assert refused.json()["detail"]["exceeded"] == ["runs_in_flight"]
    assert refused.headers["X-Quota-In-Flight-Remaining"] == "0"
    # A staff rerun of an author's submission does not count against the author.
    finish(db_session, sub["latest_run"]["id"])
    assert client.post(f"{sub['url']}/reruns", json={"reason": "r"},
                       headers=auth(tokens["staff"])).status_code == 202
    ok = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert ok.status_code == 202 and ok.headers["X-Quota-In-Flight-Remaining"] == "0"


def test_idempotent_replay_is_not_refused_or_counted(
    client: TestClient, tokens: dict[str, str], override_settings: Any,
) -> None:
    override_settings(quota_submissions_per_day=1)
    h = {**auth(tokens["alice"]), "Idempotency-Key": "k"}
    first = client.post("/v1/submissions", json=body(), headers=h)
    replay = client.post("/v1/submissions", json=body(), headers=h)
    assert first.status_code == replay.status_code == 202
    assert replay.json()["id"] == first.json()["id"]
    assert client.get("/v1/me/quota",
                      headers=auth(tokens["alice"])).json()["submissions_per_day"]["used"] == 1


def test_me_quota(client: TestClient, tokens: dict[str, str], db_session: Session,
                  override_settings: Any) -> None:
    override_settings(quota_submissions_per_day=5, quota_runs_in_flight=3)
    sub = submit(client, tokens["alice"])
    submit(client, tokens["alice"])
    finish(db_session, sub["latest_run"]["id"])
    r = client.get("/v1/me/quota", headers=auth(tokens["alice"]))
    assert r.status_code == 200
    q = r.json()
    assert q["exempt"] is False
    assert q["submissions_per_day"]["used"] == 2 and q["submissions_per_day"]["remaining"] == 3
    assert q["submissions_per_day"]["window_s"] == 86_400
    assert q["runs_in_flight"] == {"limit": 3, "used": 1, "remaining": 2}
    assert r.headers["X-Quota-Remaining"] == "3"
    assert client.get("/v1/me/quota", headers=auth(tokens["staff"])).json()["exempt"] is True
    assert client.get("/v1/me/quota", headers=auth(tokens["bob"])).json()[
        "submissions_per_day"]["used"] == 0
    assert client.get("/v1/me/quota").status_code == 401
