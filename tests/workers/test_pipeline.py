"""The whole run pipeline against real parts: registry resolution, podman+runc sealing, the
Merkle log, SeaweedFS with Object Lock as the archive, signing and offline verification."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.auth.models import Role
from app.evidence.verify import StoreArchive, verify_report
from app.scoring.reference import seasonal_naive_records
from app.scoring.scorer import score_task
from app.storage import layout
from app.storage.errors import ObjectAlreadyExists
from tests.workers.conftest import NullQueue, leftover_containers, make_token, submission_body
from workers import pipeline

pytestmark = pytest.mark.podman


def _submit(client: TestClient, token: str, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/submissions", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 202, r.text
    return dict(r.json())


def _run(client: TestClient, token: str, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_seasonal_naive_end_to_end(api: tuple[TestClient, NullQueue],
                                   deps: pipeline.Deps) -> None:
    client, queue = api
    token = make_token(Role.author)
    tasks = ["sunspots-yearly", "danish-money-quarterly"]
    sub = _submit(client, token, submission_body("seasonal-naive", tasks))
    assert sub["image_digest"].startswith("sha256:")  # resolved against the real registry
    run_id = queue.sent[0]

    assert pipeline.execute_run(run_id, "test-worker") == "completed"
    # A second delivery of the same message is a no-op: nothing left to claim.
    assert pipeline.execute_run(run_id, "test-worker") == "nothing to claim"

    run = _run(client, token, run_id)
    assert run["status"] == "completed", run
    assert run["operational_level"] == "hosted_sealed"
    assert [e["status"] for e in run["timeline"]] == [
        "queued", "claimed", "preparing", "running", "scoring", "completed"]
    assert leftover_containers(run_id) == []

    envelope = client.get(f"/v1/runs/{run_id}/report",
                          headers={"Authorization": f"Bearer {token}"}).content
    jwks = client.get("/v1/keys").json()
    result = verify_report(envelope, StoreArchive(deps.store, run_id), jwks)
    assert result.ok, result
    # Write-once: the archive refuses a second write of the report.
    with pytest.raises(ObjectAlreadyExists):
        deps.store.put_once(layout.run_key(run_id, layout.REPORT), b"{}")

    # The sealed pipeline scores exactly what the scorer computes directly for seasonal naive.
    from app.evidence.report import peek_statement

    predicate = peek_statement(envelope)["predicate"]
    for task in tasks:
        card, requests = deps.catalog.card(task), deps.catalog.requests(task)
        direct = score_task(card, requests, deps.catalog.labels(task),
                            seasonal_naive_records(card, requests),
                            pipeline._parse("2010-01-02T00:00:00Z"))
        for key, value in direct.flat_metrics().items():
            assert predicate["metrics"][task][key]["mean"] == value, (task, key)
        assert predicate["latency_ms"][task]["p99"] is not None
        assert predicate["extra"]["determinism"][task]["deterministic"] is True
    assert predicate["sandbox"]["limits"]["network"] == "none (loopback only)"
    assert predicate["prediction_hash"] == run["prediction_hash"]


def test_model_failures_end_with_reason_and_report(api: tuple[TestClient, NullQueue],
                                                   deps: pipeline.Deps) -> None:
    client, queue = api
    token = make_token(Role.author)
    expected = {"oom": "oom", "garbage": "protocol_error", "exit-midrun": "container_crashed"}
    for image in expected:
        _submit(client, token, submission_body(image, ["sunspots-yearly"]))
    for run_id, (image, reason) in zip(queue.sent, expected.items(), strict=True):
        pipeline.execute_run(run_id, "test-worker")
        run = _run(client, token, run_id)
        assert (run["status"], run["failure_reason"]) == ("failed", reason), (image, run)
        assert run["reports"], f"{image}: a failed run still gets a signed report"
        assert leftover_containers(run_id) == []
    # The next submission is unaffected.
    _submit(client, token, submission_body("seasonal-naive", ["sunspots-yearly"]))
    assert pipeline.execute_run(queue.sent[-1], "test-worker") == "completed"


def test_nondeterministic_model_is_repeated(api: tuple[TestClient, NullQueue],
                                            deps: pipeline.Deps) -> None:
    client, queue = api
    token = make_token(Role.author)
    _submit(client, token, submission_body("nondeterministic", ["sunspots-yearly"]))
    assert pipeline.execute_run(queue.sent[0], "test-worker") == "completed"
    envelope = client.get(f"/v1/runs/{queue.sent[0]}/report",
                          headers={"Authorization": f"Bearer {token}"}).content
    from app.evidence.report import peek_statement

    predicate = peek_statement(envelope)["predicate"]
    det = predicate["extra"]["determinism"]["sunspots-yearly"]
    card = deps.catalog.card("sunspots-yearly")
    assert det["deterministic"] is False and det["repeats"] == card.determinism_repeats
    mase = predicate["metrics"]["sunspots-yearly"]["all.model.mase"]
    assert mase["n"] == card.determinism_repeats and mase["std"] > 0


def test_cancel_stops_a_running_container(api: tuple[TestClient, NullQueue],
                                          deps: pipeline.Deps) -> None:
    client, queue = api
    token = make_token(Role.author)
    sub = _submit(client, token, submission_body("spin", ["sunspots-yearly"]))
    run_id = queue.sent[0]
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(
        pipeline.execute_run(run_id, "test-worker")))
    worker.start()
    deadline = time.monotonic() + 30
    while _run(client, token, run_id)["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    r = client.post(f"/v1/submissions/{sub['id']}/cancel",
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    worker.join(timeout=30)
    assert outcome == ["cancelled"]
    run = _run(client, token, run_id)
    assert run["status"] == "cancelled" and run["failure_reason"] == "cancelled"
    assert leftover_containers(run_id) == []


def test_self_attested_submission_is_scored_and_flagged(api: tuple[TestClient, NullQueue],
                                                        deps: pipeline.Deps) -> None:
    client, queue = api
    token = make_token(Role.author)
    task = "sunspots-yearly"
    card, requests = deps.catalog.card(task), deps.catalog.requests(task)
    predictions = [{"window_id": r["window_id"], "forecasts": r["answer"]["forecasts"]}
                   for r in seasonal_naive_records(card, requests)]
    body = submission_body("seasonal-naive", [task], image=None, execution_mode="self_attested",
                           predictions={task: predictions})
    sub = _submit(client, token, body)
    assert sub["provenance"] == "self_attested"
    assert pipeline.execute_run(queue.sent[0], "test-worker") == "completed"
    envelope = client.get(f"/v1/runs/{queue.sent[0]}/report",
                          headers={"Authorization": f"Bearer {token}"}).content
    result = verify_report(envelope, StoreArchive(deps.store, queue.sent[0]),
                           client.get("/v1/keys").json())
    assert result.ok, result
    from app.evidence.report import peek_statement

    predicate = peek_statement(envelope)["predicate"]
    assert predicate["execution_mode"] == "self_attested"
    assert predicate["capability_vector"]["provenance"] == "self_attested"
    e = predicate["capability_vector"]["dimensions"]["E"]
    assert e["comparable_across_models"] is False


def test_staff_recompute_makes_a_new_report_version(api: tuple[TestClient, NullQueue],
                                                    deps: pipeline.Deps) -> None:
    client, queue = api
    author, staff = make_token(Role.author), make_token(Role.staff)
    _submit(client, author, submission_body("seasonal-naive", ["sunspots-yearly"]))
    run_id = queue.sent[0]
    assert pipeline.execute_run(run_id, "test-worker") == "completed"
    denied = client.post(f"/v1/runs/{run_id}/recompute", json={"reason": "audit"},
                         headers={"Authorization": f"Bearer {author}"})
    assert denied.status_code == 403
    r = client.post(f"/v1/runs/{run_id}/recompute", json={"reason": "scheduled audit"},
                    headers={"Authorization": f"Bearer {staff}"})
    assert r.status_code == 201, r.text
    assert r.json()["version"] == 2 and r.json()["differences"] == []
    run = _run(client, staff, run_id)
    assert [v["version"] for v in run["reports"]] == [1, 2]
    for version in (1, 2):
        env = client.get(f"/v1/runs/{run_id}/report?version={version}",
                         headers={"Authorization": f"Bearer {staff}"}).content
        assert verify_report(env, StoreArchive(deps.store, run_id),
                             client.get("/v1/keys").json()).ok


def test_cli_verify_and_recompute_offline(api: tuple[TestClient, NullQueue],
                                          deps: pipeline.Deps, tmp_path: Any,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    import json

    from app.cli import main

    client, queue = api
    token = make_token(Role.author)
    _submit(client, token, submission_body("theta", ["elnino-nino12-monthly"]))
    run_id = queue.sent[0]
    assert pipeline.execute_run(run_id, "test-worker") == "completed"
    for name in (layout.PREDICTIONS, layout.CHECKPOINT, layout.RUN_MANIFEST, layout.CONTAINER,
                 layout.STDERR, layout.REPORT):
        (tmp_path / name).write_bytes(deps.store.get(layout.run_key(run_id, name)))
    (tmp_path / "jwks.json").write_text(json.dumps(client.get("/v1/keys").json()))
    report, jwks = str(tmp_path / layout.REPORT), str(tmp_path / "jwks.json")
    assert main(["verify", report, "--archive", str(tmp_path), "--jwks", jwks,
                 "--recompute"]) == 0
    assert main(["recompute-metric", run_id, "--archive", str(tmp_path)]) == 0
    # One changed byte in the archived log: verify names it and exits non-zero.
    data = bytearray((tmp_path / layout.PREDICTIONS).read_bytes())
    data[40] ^= 0x01
    (tmp_path / layout.PREDICTIONS).write_bytes(bytes(data))
    capfd.readouterr()
    assert main(["verify", report, "--archive", str(tmp_path), "--jwks", jwks]) == 1
    assert "FAIL  subject:predictions.jsonl" in capfd.readouterr().out


def test_staff_rerun_keeps_history_and_compares(api: tuple[TestClient, NullQueue],
                                                deps: pipeline.Deps) -> None:
    from app.evidence.report import peek_statement

    client, queue = api
    author, staff = make_token(Role.author), make_token(Role.staff)
    sub = _submit(client, author, submission_body("seasonal-naive", ["sunspots-yearly"]))
    first = queue.sent[0]
    assert pipeline.execute_run(first, "test-worker") == "completed"
    r = client.post(f"/v1/submissions/{sub['id']}/reruns", json={"reason": "audit rerun"},
                    headers={"Authorization": f"Bearer {staff}"})
    assert r.status_code == 202, r.text
    second = queue.sent[-1]
    assert second != first
    assert pipeline.execute_run(second, "test-worker") == "completed"
    runs = client.get(f"/v1/submissions/{sub['id']}/runs",
                      headers={"Authorization": f"Bearer {staff}"}).json()
    ids = [x["id"] for x in (runs["items"] if isinstance(runs, dict) else runs)]
    assert ids == [first, second]
    old, new = (_run(client, staff, x) for x in (first, second))
    assert old["reports"] and new["reports"] and new["seed"] == old["seed"]
    assert new["previous_run_id"] == first and new["image"] == old["image"]
    envelope = client.get(f"/v1/runs/{second}/report",
                          headers={"Authorization": f"Bearer {staff}"}).content
    comparison = peek_statement(envelope)["predicate"]["extra"]["comparison"]
    assert comparison["previous_run_id"] == first
    assert comparison["same_prediction_hash"] is False  # platform timestamps differ
    assert comparison["same_answers"] is True and comparison["max_abs_delta"] == 0


def test_leaderboard_provenance_and_e_comparison(api: tuple[TestClient, NullQueue],
                                                 deps: pipeline.Deps) -> None:
    client, queue = api
    author, reader = make_token(Role.author), make_token(Role.reader)
    task = "sunspots-yearly"
    for model in ("seasonal-naive", "theta"):
        _submit(client, author, submission_body(model, [task]))
    card, requests = deps.catalog.card(task), deps.catalog.requests(task)
    predictions = [{"window_id": r["window_id"], "forecasts": r["answer"]["forecasts"],
                    "runtime_ms": 0.01}
                   for r in seasonal_naive_records(card, requests)]
    _submit(client, author, submission_body("self-reported", [task], image=None,
                                            execution_mode="self_attested",
                                            predictions={task: predictions}))
    for run_id in queue.sent:
        assert pipeline.execute_run(run_id, "test-worker") == "completed"
    headers = {"Authorization": f"Bearer {reader}"}
    future = client.get("/v1/leaderboard", params={"tier": "public_dev", "task": task},
                        headers=headers).json()
    # Every sunspots label predates frozen_at: nothing is rankable future-only.
    assert [r["rank"] for r in future["rows"]] == [None, None]
    sealed = client.get("/v1/leaderboard", headers=headers,
                        params={"tier": "public_dev", "task": task, "basis": "all_windows"}).json()
    assert {r["model_name"] for r in sealed["rows"]} == {"seasonal-naive", "theta"}
    assert all(r["provenance"] == "sealed" and r["operational_level"] == "hosted_sealed"
               for r in sealed["rows"])
    assert [r["rank"] for r in sealed["rows"]] == [1, 2]
    mixed = client.get("/v1/leaderboard", params={"tier": "public_dev", "provenance": "all"},
                       headers=headers).json()
    flagged = [r for r in mixed["rows"] if r["provenance"] == "self_attested"]
    assert len(mixed["rows"]) == 3 and len(flagged) == 1
    assert flagged[0]["E_comparable"] is False and flagged[0]["E_rank"] is None
    assert {r["E_rank"] for r in mixed["rows"] if r["provenance"] == "sealed"} <= {1, 2}
    assert client.get("/v1/leaderboard", params={"tier": "public_dev", "task": "nope"},
                      headers=headers).status_code == 404


def test_artifact_is_fetched_hashed_and_mounted(api: tuple[TestClient, NullQueue],
                                                deps: pipeline.Deps) -> None:
    import hashlib
    import json

    client, queue = api
    token = make_token(Role.author)
    blob = b"model weights " * 1000
    key = f"artifacts/{time.time_ns()}/model.bin"
    deps.store.put_once(key, blob)
    uri = f"s3://{deps.settings.s3_bucket}/{key}"
    _submit(client, token, submission_body("seasonal-naive", ["sunspots-yearly"],
                                           artifact_uri=uri))
    run_id = queue.sent[0]
    assert pipeline.execute_run(run_id, "test-worker") == "completed"
    run = _run(client, token, run_id)
    assert run["artifact_sha256"] == "sha256:" + hashlib.sha256(blob).hexdigest()
    manifest = json.loads(deps.store.get(layout.run_key(run_id, layout.RUN_MANIFEST)))
    assert manifest["artifact"] == {"uri": uri, "sha256": run["artifact_sha256"]}
    config = manifest["tasks"][0]["sealed_config"]
    assert {"target": "/artifact", "read_only": True} in config["mounts"]


def test_missing_artifact_fails_with_reason(api: tuple[TestClient, NullQueue],
                                            deps: pipeline.Deps) -> None:
    client, queue = api
    token = make_token(Role.author)
    uri = f"s3://{deps.settings.s3_bucket}/artifacts/missing-{time.time_ns()}.bin"
    _submit(client, token, submission_body("seasonal-naive", ["sunspots-yearly"],
                                           artifact_uri=uri))
    pipeline.execute_run(queue.sent[0], "test-worker")
    run = _run(client, token, queue.sent[0])
    assert (run["status"], run["failure_reason"]) == ("failed", "artifact_unavailable")
