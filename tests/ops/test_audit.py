from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.ops.conftest import auth, finish, submit


def _all(client: TestClient, token: str, **params: object) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/audit", params=query, headers=auth(token))
        assert page.status_code == 200, page.text
        out += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if not cursor:
            return out


def test_audit_trail_merges_actions_and_state_changes(
    client: TestClient, tokens: dict[str, str], db_session: Session,
) -> None:
    staff = tokens["staff"]
    sub = submit(client, tokens["alice"])
    other = submit(client, tokens["bob"])
    finish(db_session, sub["latest_run"]["id"], seed=1)
    rerun = client.post(f"{sub['url']}/reruns", json={"reason": "why not"},
                        headers=auth(staff)).json()
    client.post(f"{sub['url']}/cancel", json={"reason": "changed my mind"},
                headers=auth(staff))

    mine = _all(client, staff, submission_id=sub["id"])
    actions = [e["action"] for e in mine]
    # Newest first, across both sources, each entry once.
    # Newest first, across both sources, in platform-clock order, each entry once.
    assert actions == ["submission.cancel", "run.cancelled", "run.rerun", "run.queued",
                       "run.completed", "run.running", "submission.create", "run.queued"]
    assert len({e["id"] for e in mine}) == len(mine)
    ats = [e["at"] for e in mine]
    assert ats == sorted(ats, reverse=True)
    cancel = next(e for e in mine if e["action"] == "submission.cancel")
    assert cancel["actor"] == "staff" and cancel["reason"] == "changed my mind"
    assert cancel["detail"]["by_staff"] is True and cancel["detail"]["run_id"] == rerun["id"]
    cancelled = next(e for e in mine if e["action"] == "run.cancelled")
    assert cancelled["source"] == "run_event" and cancelled["target_id"] == rerun["id"]
    assert cancelled["actor"] == "staff" and cancelled["reason"] == "changed my mind"
    assert all(e["submission_id"] == sub["id"] for e in mine)

    everything = _all(client, staff)
    assert {e["id"] for e in mine} < {e["id"] for e in everything}
    assert any(e["submission_id"] == other["id"] for e in everything)

    by_actor = _all(client, staff, actor="worker-test")
    assert {e["action"] for e in by_actor} == {"run.running", "run.completed"}
    only_audit = _all(client, staff, source="audit", submission_id=sub["id"])
    assert {e["action"] for e in only_audit} == {"submission.create", "run.rerun",
                                                 "submission.cancel"}
    run_target = _all(client, staff, target_type="run", target_id=rerun["id"])
    assert [e["action"] for e in run_target] == ["run.cancelled", "run.queued"]
    by_status = _all(client, staff, action="run.completed")
    assert [e["target_id"] for e in by_status] == [sub["latest_run"]["id"]]
    assert _all(client, staff, action="run.nonsense") == []


def test_audit_is_staff_only_and_checks_cursors(client: TestClient,
                                                tokens: dict[str, str]) -> None:
    for who in ("alice", "reader"):
        r = client.get("/v1/audit", headers=auth(tokens[who]))
        assert r.status_code == 403 and r.json()["error"] == "RoleNotAllowed"
    assert client.get("/v1/audit").status_code == 401
    bad = client.get("/v1/audit", params={"cursor": "!!"}, headers=auth(tokens["staff"]))
    assert bad.status_code == 422 and bad.json()["error"] == "InvalidCursor"
