from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.db import SessionFactory
from app.events import service
from app.events.endpoints import get_session_factory
from app.runs.models import RunStatus
from tests.ops.conftest import auth, finish, submit


def _factory(db: Session) -> SessionFactory:
    @contextmanager
    def shared() -> Iterator[Session]:
        yield db  # the test's rolled-back transaction; not closed per poll

    return shared


@pytest.fixture()
def sse_client(client: TestClient, db_session: Session, override_settings: Any) -> TestClient:
    client.app.dependency_overrides[get_session_factory] = lambda: _factory(db_session)  # type: ignore[attr-defined]
    override_settings(sse_poll_interval_s=0.02, sse_max_stream_s=0.5, sse_ping_s=0.1)
    return client


def _parse(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line:
                continue
            name, _, value = line.partition(":")
            fields[name or "comment"] = value.strip()
        if fields:
            events.append(fields)
    return events


def test_stream_emits_changes_as_they_happen_and_ends_on_terminal(
    client: TestClient, tokens: dict[str, str], db_session: Session,
) -> None:
    sub = submit(client, tokens["alice"])
    run_id = sub["latest_run"]["id"]

    lock = threading.Lock()  # the stream polls from a worker thread; one user of the session

    @contextmanager
    def locked() -> Iterator[Session]:
        with lock:
            yield db_session

    async def follow() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []

        async def consume() -> None:
            async for item in service.stream(locked, sub["id"], after_id=0, public=False,
                                             interval_s=0.01, max_stream_s=10):
                got.append(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.sleep(0.2)
            # About twenty polls saw no change: nothing more was emitted.
            assert [i["event"] for i in got] == ["run_event", "status"]
            with lock:
                finish(db_session, run_id)  # running, then completed; committed
        return got

    items = anyio.run(follow)
    kinds = [(i["event"], json.loads(i["data"]).get("status")) for i in items]
    assert kinds == [("run_event", "queued"), ("status", "queued"), ("run_event", "running"),
                     ("run_event", "completed"), ("status", "completed"), ("end", "completed")]
    ids = [int(i["id"]) for i in items if i["event"] == "run_event"]
    assert ids == sorted(ids) and "id" not in items[1]
    first = json.loads(items[0]["data"])
    assert first["run_id"] == run_id and first["run_kind"] == "initial" and "actor" in first


def test_stream_stops_at_its_time_limit_without_end(client: TestClient, tokens: dict[str, str],
                                                    db_session: Session) -> None:
    sub = submit(client, tokens["alice"])

    async def follow() -> list[dict[str, Any]]:
        gen = service.stream(_factory(db_session), sub["id"], after_id=0, public=True,
                             interval_s=0.01, max_stream_s=0.05)
        return [item async for item in gen]

    items = anyio.run(follow)
    assert [i["event"] for i in items] == ["run_event", "status"]
    assert "actor" not in json.loads(items[0]["data"])  # the public view


def test_sse_endpoint_replays_resumes_and_closes(
    sse_client: TestClient, tokens: dict[str, str], db_session: Session,
) -> None:
    client = sse_client
    sub = submit(client, tokens["alice"])
    client.post(f"{sub['url']}/cancel", headers=auth(tokens["alice"]))
    r = client.get(f"{sub['url']}/events", headers=auth(tokens["alice"]))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _parse(r.text)
    assert [e["event"] for e in events] == ["run_event", "run_event", "status", "end"]
    assert json.loads(events[-1]["data"])["status"] == "cancelled"
    first_id = events[0]["id"]

    resumed = _parse(client.get(f"{sub['url']}/events",
                                headers={**auth(tokens["alice"]), "Last-Event-ID": first_id}).text)
    assert [e.get("id") for e in resumed if e["event"] == "run_event"] == [events[1]["id"]]
    # Everything seen and terminal: 204 tells an EventSource to stop reconnecting.
    done = client.get(f"{sub['url']}/events",
                      headers={**auth(tokens["alice"]), "Last-Event-ID": events[1]["id"]})
    assert done.status_code == 204
    via_query = client.get(f"{sub['url']}/events", params={"last_event_id": events[1]["id"]},
                           headers=auth(tokens["alice"]))
    assert via_query.status_code == 204


def test_sse_visibility_and_heartbeats(sse_client: TestClient, tokens: dict[str, str],
                                       db_session: Session) -> None:
    client = sse_client
    sub = submit(client, tokens["alice"])
    assert client.get(f"{sub['url']}/events", headers=auth(tokens["bob"])).status_code == 404
    assert client.get(f"{sub['url']}/events").status_code == 401
    # Not terminal: the stream runs until sse_max_stream_s, with heartbeat comments.
    r = client.get(f"{sub['url']}/events", headers=auth(tokens["reader"]))
    events = _parse(r.text)
    assert any("comment" in e and e["comment"].startswith("ping") for e in events)
    data = [json.loads(e["data"]) for e in events if e.get("event") == "run_event"]
    assert data and all("actor" not in d and "detail" not in d for d in data)
    staff = _parse(client.get(f"{sub['url']}/events", headers=auth(tokens["staff"])).text)
    assert any("actor" in json.loads(e["data"]) for e in staff if e.get("event") == "run_event")
    finish(db_session, sub["latest_run"]["id"], RunStatus.failed, failure_reason="oom")
    last = _parse(client.get(f"{sub['url']}/events", headers=auth(tokens["reader"])).text)
    assert last[-1]["event"] == "end"
    assert json.loads(last[-2]["data"])["failure_reason"] == "oom"
