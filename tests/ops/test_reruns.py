from __future__ import annotations

import json

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.runs.models import Report, RunStatus
from app.runs.reruns import compare_runs
from tests.api.conftest import DIGEST, RecordingQueue
from tests.ops.conftest import auth, finish, submit

ARTIFACT = "sha256:" + "cd" * 32


def _add_report(db: Session, run_id: str) -> None:
    from app.clock import SystemClock

    db.add(Report(id=f"rep_{run_id[-12:]}", run_id=run_id, version=1, envelope="{}",
                  envelope_sha256="0" * 64, reason="initial", created_by="worker-test",
                  created_at=SystemClock().now()))
    db.commit()


def test_staff_rerun_is_a_new_pinned_run_and_history_is_kept(
    client: TestClient, tokens: dict[str, str], queue: RecordingQueue, db_session: Session,
) -> None:
    sub = submit(client, tokens["alice"])
    first = sub["latest_run"]["id"]
    finish(db_session, first, seed=1234, artifact_sha256=ARTIFACT,
           prediction_hash="sha256:" + "11" * 32)
    _add_report(db_session, first)

    r = client.post(f"{sub['url']}/reruns", json={"reason": "scorer fix 1.2.1"},
                    headers=auth(tokens["staff"]))
    assert r.status_code == 202, r.text
    rerun = r.json()
    assert r.headers["Location"] == f"/v1/runs/{rerun['id']}"
    assert rerun["kind"] == "rerun" and rerun["status"] == "queued"
    assert rerun["previous_run_id"] == first and rerun["reason"] == "scorer fix 1.2.1"
    assert rerun["seed"] == 1234 and rerun["artifact_sha256"] == ARTIFACT
    assert rerun["image"].endswith("@" + DIGEST)
    assert rerun["hardware_class"] == "cpu-1c-1g"
    assert queue.sent[-1] == (rerun["id"], "cpu-1c-1g")  # enqueued after the commit

    listing = client.get(f"{sub['url']}/runs", headers=auth(tokens["alice"])).json()["items"]
    assert [(x["id"], x["kind"]) for x in listing] == [(first, "initial"), (rerun["id"], "rerun")]
    assert listing[0]["status"] == "completed" and listing[0]["report_url"]
    # The earlier run and its report are untouched; the submission follows the new run.
    old = client.get(f"/v1/runs/{first}", headers=auth(tokens["staff"])).json()
    assert old["status"] == "completed" and len(old["reports"]) == 1
    now = client.get(sub["url"], headers=auth(tokens["alice"])).json()
    assert now["status"] == "queued" and now["latest_run"]["id"] == rerun["id"]


def test_rerun_rules(client: TestClient, tokens: dict[str, str], queue: RecordingQueue,
                     db_session: Session) -> None:
    sub = submit(client, tokens["alice"])
    url = f"{sub['url']}/reruns"
    for who in ("alice", "bob", "reader"):
        r = client.post(url, json={"reason": "x"}, headers=auth(tokens[who]))
        assert r.status_code == 403 and r.json()["error"] == "RoleNotAllowed", who
    busy = client.post(url, json={"reason": "x"}, headers=auth(tokens["staff"]))
    assert busy.status_code == 409 and busy.json()["error"] == "RunInProgress"
    finish(db_session, sub["latest_run"]["id"], RunStatus.failed, failure_reason="oom")
    assert client.post(url, json={}, headers=auth(tokens["staff"])).status_code == 422
    bad = client.post(url, json={"reason": "x", "hardware_class": "gpu-9000"},
                      headers=auth(tokens["staff"]))
    assert bad.status_code == 422 and bad.json()["error"] == "HardwareClassUnknown"
    missing = client.post("/v1/submissions/sub_nope/reruns", json={"reason": "x"},
                          headers=auth(tokens["staff"]))
    assert missing.status_code == 404
    sent = len(queue.sent)
    moved = client.post(url, json={"reason": "more memory", "hardware_class": "cpu-2c-4g"},
                        headers=auth(tokens["staff"]))
    assert moved.status_code == 202 and moved.json()["hardware_class"] == "cpu-2c-4g"
    # The failed run is the previous one (no completed run exists).
    assert moved.json()["previous_run_id"] == sub["latest_run"]["id"]
    assert queue.sent[sent:] == [(moved.json()["id"], "cpu-2c-4g")]


def test_rerun_is_audited(client: TestClient, tokens: dict[str, str], db_session: Session
                          ) -> None:
    sub = submit(client, tokens["alice"])
    finish(db_session, sub["latest_run"]["id"])
    run = client.post(f"{sub['url']}/reruns", json={"reason": "audit me"},
                      headers=auth(tokens["staff"])).json()
    trail = client.get("/v1/audit", params={"action": "run.rerun"},
                       headers=auth(tokens["staff"])).json()["items"]
    assert len(trail) == 1
    entry = trail[0]
    assert entry["actor"] == "staff" and entry["reason"] == "audit me"
    assert entry["submission_id"] == sub["id"] and entry["detail"]["run_id"] == run["id"]


def test_compare_runs_reports_hash_equality_and_metric_deltas() -> None:
    prev = {"run_id": "run_a", "report_version": 1, "seed": 7,
            "prediction_hash": "sha256:aa",
            "metrics": {"t1": {"mase": {"mean": 1.0, "std": 0.0, "n": 1}, "crps": 0.5},
                        "t2": {"mase": 2.0}, "old": {"mase": 1.0}}}
    new = {"run_id": "run_b", "seed": 7, "prediction_hash": "sha256:aa",
           "metrics": {"t1": {"mase": {"mean": 1.25, "std": 0.1, "n": 3}, "crps": float("nan")},
                       "t2": {"mase": 2.0, "wql": 0.3}, "fresh": {"mase": 3.0}}}
    out = compare_runs(prev, new)
    assert out["same_prediction_hash"] is True and out["same_seed"] is True
    assert out["previous_run_id"] == "run_a"
    t1 = out["metric_deltas"]["t1"]
    assert t1["mase"] == {"previous": 1.0, "new": 1.25, "delta": 0.25, "relative": 0.25}
    assert t1["crps"]["new"] is None and t1["crps"]["delta"] is None
    assert out["metric_deltas"]["t2"]["mase"]["delta"] == 0.0
    assert out["metric_deltas"]["t2"]["wql"]["previous"] is None
    assert out["max_abs_delta"] == 0.25
    assert out["tasks_only_in_previous"] == ["old"] and out["tasks_only_in_new"] == ["fresh"]
    json.dumps(out, allow_nan=False)  # JCS-safe: no NaN or Infinity anywhere

    differs = compare_runs({"prediction_hash": "sha256:aa"}, {"prediction_hash": "sha256:bb"})
    assert differs["same_prediction_hash"] is False and differs["max_abs_delta"] is None
    assert compare_runs({}, {})["same_prediction_hash"] is False
