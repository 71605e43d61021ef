from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import DIGEST, RecordingQueue, StubResolver, auth, body


def test_submit_is_durable_and_enqueued_after_commit(client: TestClient, tokens: dict[str, str],
                                                     queue: RecordingQueue) -> None:
    r = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"]))
    assert r.status_code == 202, r.text
    sub = r.json()
    assert r.headers["Location"] == f"/v1/submissions/{sub['id']}"
    assert sub["status"] == "queued"
    assert sub["image_digest"] == DIGEST
    assert sub["latest_run"]["status"] == "queued"
    assert queue.sent == [(sub["latest_run"]["id"], "cpu-1c-1g")]
    got = client.get(sub["url"], headers=auth(tokens["alice"]))
    assert got.status_code == 200 and got.json()["id"] == sub["id"]


def test_client_timestamps_are_ignored(client: TestClient, tokens: dict[str, str]) -> None:
    r = client.post("/v1/submissions", json=body(platform_received_at="1999-01-01T00:00:00Z"),
                    headers=auth(tokens["alice"]))
    assert r.status_code == 202
    assert not r.json()["platform_received_at"].startswith("1999")


def test_rejected_submission_is_not_enqueued(client: TestClient, tokens: dict[str, str],
                                             queue: RecordingQueue) -> None:
    r = client.post("/v1/submissions", json=body(tasks=["nope"]), headers=auth(tokens["alice"]))
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_submission"
    assert queue.sent == []
    listing = client.get("/v1/submissions", headers=auth(tokens["staff"])).json()
    assert listing["items"] == []


@pytest.mark.parametrize(
    ("over", "error"),
    [
        ({"image": "UPPER/Case:tag"}, "invalid_image_reference"),
        ({"image": "repo@sha256:short"}, "invalid_image_reference"),
        ({"artifact_uri": "file:///etc/passwd"}, "artifact_uri_rejected"),
        ({"artifact_uri": "http://example.com/model.tar"}, "artifact_uri_rejected"),
        ({"artifact_uri": "https://127.0.0.1/model.tar"}, "artifact_uri_rejected"),
        ({"artifact_uri": "https://10.1.2.3/model.tar"}, "artifact_uri_rejected"),
        ({"artifact_uri": "https://169.254.169.254/latest/meta-data"}, "artifact_uri_rejected"),
        ({"artifact_uri": "https://[::1]/m"}, "artifact_uri_rejected"),
        ({"artifact_uri": "https://localhost/m"}, "artifact_uri_rejected"),
        ({"artifact_uri": "https://user:pw@example.com/m"}, "artifact_uri_rejected"),
        ({"tasks": ["sunspots-yearly"], "tier": "blind_archive"}, "invalid_submission"),
        ({"tasks": ["nile-yearly"], "tier": "blind_archive", "execution_mode": "self_attested",
          "predictions": {"nile-yearly": []}, "image": None}, "invalid_submission"),
        ({"tasks": []}, "invalid_submission"),
        ({"image": None}, "invalid_submission"),
        ({"tier": "gold"}, "RequestValidationFailed"),
        ({"metadata": {"model_name": "x", "organization": "y",
                       "training_cutoff": "2021-01-01T00:00:00Z",
                       "frozen_at": "2020-01-01T00:00:00Z"}}, "invalid_submission"),
        ({"metadata": {"model_name": "x", "organization": "y",
                       "training_cutoff": "2021-01-01T00:00:00",
                       "frozen_at": "2022-01-01T00:00:00Z"}}, "RequestValidationFailed"),
    ],
)
def test_bad_input_is_refused_with_the_error_shape(
    client: TestClient, tokens: dict[str, str], queue: RecordingQueue, over: dict[str, object],
    error: str,
) -> None:
    r = client.post("/v1/submissions", json=body(**over), headers=auth(tokens["alice"]))
    assert r.status_code == 422, r.text
    assert r.json()["error"] == error
    assert "detail" in r.json()
    assert queue.sent == []


def test_oversized_body_is_413(client: TestClient, tokens: dict[str, str]) -> None:
    huge = body(metadata={"model_name": "x" * (2 * 1024 * 1024)})
    r = client.post("/v1/submissions", json=huge, headers=auth(tokens["alice"]))
    assert r.status_code == 413
    assert r.json()["error"] == "PayloadTooLarge"


def test_malformed_json_is_422_not_500(client: TestClient, tokens: dict[str, str]) -> None:
    r = client.post("/v1/submissions", content=b"{not json",
                    headers={**auth(tokens["alice"]), "Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"] == "RequestValidationFailed"


def test_idempotency_key(client: TestClient, tokens: dict[str, str], queue: RecordingQueue,
                         resolver: StubResolver) -> None:
    h = {**auth(tokens["alice"]), "Idempotency-Key": "k-1"}
    first = client.post("/v1/submissions", json=body(), headers=h)
    again = client.post("/v1/submissions", json=body(), headers=h)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert len(queue.sent) == 1
    other = client.post("/v1/submissions", json=body(tasks=["elnino-nino12-monthly"]), headers=h)
    assert other.status_code == 409
    assert other.json()["error"] == "IdempotencyKeyReused"
    # The same key from another author is another submission.
    bob = client.post("/v1/submissions", json=body(),
                      headers={**auth(tokens["bob"]), "Idempotency-Key": "k-1"})
    assert bob.status_code == 202 and bob.json()["id"] != first.json()["id"]


def test_suite_expands_to_tasks(client: TestClient, tokens: dict[str, str]) -> None:
    r = client.post("/v1/submissions", json=body(tasks=[], suite="public_dev"),
                    headers=auth(tokens["alice"]))
    assert r.status_code == 202
    assert r.json()["tasks"] == ["sunspots-yearly", "elnino-nino12-monthly",
                                 "danish-money-quarterly"]


def test_auth_and_visibility(client: TestClient, tokens: dict[str, str]) -> None:
    assert client.post("/v1/submissions", json=body()).status_code == 401
    bad = client.get("/v1/submissions", headers=auth("fts_nope"))
    assert bad.status_code == 401 and bad.json()["error"] == "TokenInvalid"
    assert client.post("/v1/submissions", json=body(),
                       headers=auth(tokens["reader"])).status_code == 403
    sub = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"])).json()
    # Another author: not found, so existence does not leak.
    r = client.get(sub["url"], headers=auth(tokens["bob"]))
    assert r.status_code == 404 and r.json()["error"] == "SubmissionNotFound"
    assert client.get(f"/v1/runs/{sub['latest_run']['id']}",
                      headers=auth(tokens["bob"])).status_code == 404
    # A reader sees the public status only.
    pub = client.get(sub["url"], headers=auth(tokens["reader"])).json()
    assert pub["status"] == "queued" and "image" not in pub and pub["model_name"] == "snaive"
    # Staff see everything.
    assert client.get(sub["url"], headers=auth(tokens["staff"])).json()["image_digest"] == DIGEST
    assert [s["id"] for s in client.get("/v1/submissions",
                                        headers=auth(tokens["bob"])).json()["items"]] == []


def test_etag_and_304(client: TestClient, tokens: dict[str, str]) -> None:
    sub = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"])).json()
    first = client.get(sub["url"], headers=auth(tokens["alice"]))
    etag = first.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith('W/')
    again = client.get(sub["url"], headers={**auth(tokens["alice"]), "If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    client.post(f"{sub['url']}/cancel", headers=auth(tokens["alice"]))
    changed = client.get(sub["url"], headers={**auth(tokens["alice"]), "If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["status"] == "cancelled"


def test_list_pagination_and_filters(client: TestClient, tokens: dict[str, str]) -> None:
    tasks = ["elnino-nino12-monthly", "sunspots-yearly"]
    ids = [client.post("/v1/submissions", json=body(tasks=[tasks[i % 2]]),
                       headers=auth(tokens["alice"])).json()["id"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/submissions", params=params, headers=auth(tokens["alice"])).json()
        seen += [s["id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(reversed(ids))
    only_a = client.get("/v1/submissions", params={"task": "sunspots-yearly"},
                        headers=auth(tokens["alice"])).json()["items"]
    assert {s["id"] for s in only_a} == {ids[1], ids[3]}
    queued = client.get("/v1/submissions", params={"status": "completed"},
                        headers=auth(tokens["alice"])).json()["items"]
    assert queued == []
    assert client.get("/v1/submissions", params={"cursor": "!!"},
                      headers=auth(tokens["alice"])).status_code == 422


def test_cancel_rules(client: TestClient, tokens: dict[str, str]) -> None:
    sub = client.post("/v1/submissions", json=body(), headers=auth(tokens["alice"])).json()
    assert client.post(f"{sub['url']}/cancel", headers=auth(tokens["bob"])).status_code == 404
    assert client.post(f"{sub['url']}/cancel", headers=auth(tokens["reader"])).status_code == 404
    ok = client.post(f"{sub['url']}/cancel", headers=auth(tokens["alice"]))
    assert ok.status_code == 200 and ok.json()["status"] == "cancelled"
    again = client.post(f"{sub['url']}/cancel", headers=auth(tokens["alice"]))
    assert again.status_code == 409
    run = client.get(f"/v1/runs/{sub['latest_run']['id']}", headers=auth(tokens["alice"])).json()
    assert [e["status"] for e in run["timeline"]] == ["queued", "cancelled"]
    assert run["failure_reason"] == "cancelled"


def test_catalog_endpoints(client: TestClient) -> None:
    tasks = client.get("/v1/tasks").json()
    assert {t["task_id"] for t in tasks["tasks"]} >= {"sunspots-yearly", "nile-yearly"}
    assert "available_at" not in str(tasks) and "targets" not in str(tasks)
    assert client.get("/v1/tasks/sunspots-yearly").json()["horizon"] == 11
    assert client.get("/v1/tasks/nope").status_code == 404
    classes = client.get("/v1/hardware-classes").json()["hardware_classes"]
    assert {c["id"] for c in classes} >= {"cpu-1c-1g"}


def test_unknown_route_uses_error_shape(client: TestClient) -> None:
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"] == "NotFound"


def test_process_images_only_where_the_process_backend_may_run(
        client: TestClient, tokens: dict[str, str]) -> None:
    from app.deps import current_settings
    from app.settings import Settings

    image = "process:python3 -u -m app.baselines.forward_server seasonal-naive"
    ok = client.post("/v1/submissions", json=body(image=image), headers=auth(tokens["alice"]))
    assert ok.status_code == 202, ok.text
    app = client.app
    app.dependency_overrides[current_settings] = lambda: Settings(  # type: ignore[attr-defined]
        environment="test", runner_backend="podman")
    refused = client.post("/v1/submissions", json=body(image=image),
                          headers=auth(tokens["alice"]))
    assert refused.status_code == 422
    assert refused.json()["error"] == "invalid_image_reference"
