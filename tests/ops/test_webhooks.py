from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.clock import SystemClock
from app.runs.models import Run, RunStatus
from app.settings import get_settings
from app.webhooks import service
from app.webhooks.models import WebhookAttempt, WebhookDelivery
from app.webhooks.sender import HttpxWebhookSender
from app.webhooks.signing import SIGNATURE_HEADER, verify
from app.webhooks.urls import check_webhook_url
from tests.conftest import need_service
from tests.ops.conftest import auth, body, finish, submit

SECRET = "whsec-test-0123456789"


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1 that answers with the next scripted status."""

    statuses: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append(({k.lower(): v for k, v in self.headers.items()}, data))
            code = state.statuses.pop(0) if state.statuses else 200
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


@dataclass
class RecordingDispatcher:
    sent: list[str] = field(default_factory=list)

    def send_delivery(self, delivery_id: str) -> None:
        self.sent.append(delivery_id)


def _terminal_with_webhook(client: TestClient, token: str, db: Session, url: str,
                           dispatcher: RecordingDispatcher) -> WebhookDelivery:
    sub = submit(client, token, webhook_url=url)
    run = finish(db, sub["latest_run"]["id"], prediction_hash="sha256:" + "ab" * 32)
    service.notify_terminal(db, run, dispatcher=dispatcher)
    service.notify_terminal(db, run, dispatcher=dispatcher)  # a second call is a no-op
    assert dispatcher.sent == []  # only after the commit
    db.commit()
    assert len(dispatcher.sent) == 1
    delivery = db.get(WebhookDelivery, dispatcher.sent[0])
    assert delivery is not None
    return delivery


def test_signed_delivery_is_retried_on_500_then_delivered(
    client: TestClient, tokens: dict[str, str], db_session: Session, receiver: Receiver,
    override_settings: Any,
) -> None:
    settings = override_settings(webhook_insecure_hosts=[f"127.0.0.1:{receiver.port}"],
                                 webhook_secret=SecretStr(SECRET), webhook_backoff_base_s=10.0)
    dispatcher = RecordingDispatcher()
    delivery = _terminal_with_webhook(client, tokens["alice"], db_session, receiver.url,
                                      dispatcher)
    receiver.statuses = [500]
    kwargs: dict[str, Any] = {"settings": settings, "clock": SystemClock(),
                              "sender": HttpxWebhookSender()}

    first = service.attempt_delivery(db_session, delivery.id, **kwargs)
    assert first.state == "retry" and first.retry_in_s is not None
    assert 9.0 <= first.retry_in_s <= 11.0  # base * 2**0, +-10 % jitter
    db_session.commit()
    # A duplicate message before the attempt is due sends nothing.
    assert service.attempt_delivery(db_session, delivery.id, **kwargs).state == "skipped"
    assert len(receiver.received) == 1
    delivery.next_attempt_at = SystemClock().now()  # time passes
    second = service.attempt_delivery(db_session, delivery.id, **kwargs)
    assert second.state == "delivered"
    db_session.commit()
    assert service.attempt_delivery(db_session, delivery.id, **kwargs).state == "skipped"

    assert len(receiver.received) == 2
    for headers, raw in receiver.received:
        assert verify(SECRET, headers[SIGNATURE_HEADER.lower()], raw, int(time.time()))
        assert not verify("wrong-secret", headers[SIGNATURE_HEADER.lower()], raw,
                          int(time.time()))
        assert not verify(SECRET, headers[SIGNATURE_HEADER.lower()], raw + b" ",
                          int(time.time()))
        assert not verify(SECRET, headers[SIGNATURE_HEADER.lower()], raw,
                          int(time.time()) + 3600)  # too old: a replay
        assert headers["x-futurets-delivery"] == delivery.id
        assert headers["x-futurets-event"] == "run.completed"
    assert receiver.received[0][1] == receiver.received[1][1]  # the same bytes every time
    payload = json.loads(receiver.received[1][1])
    assert payload["type"] == "run.completed" and payload["run"]["status"] == "completed"
    assert payload["run"]["prediction_hash"] == "sha256:" + "ab" * 32
    assert payload["submission"]["id"] == delivery.submission_id

    attempts = db_session.scalars(select(WebhookAttempt).where(
        WebhookAttempt.delivery_id == delivery.id).order_by(WebhookAttempt.attempt)).all()
    assert [(a.attempt, a.status_code) for a in attempts] == [(1, 500), (2, 200)]
    listed = client.get(f"/v1/submissions/{delivery.submission_id}/webhook-deliveries",
                        headers=auth(tokens["alice"])).json()["items"]
    assert listed[0]["status"] == "delivered" and listed[0]["attempts"] == 2
    assert [a["status_code"] for a in listed[0]["attempt_log"]] == [500, 200]
    assert client.get(f"/v1/submissions/{delivery.submission_id}/webhook-deliveries",
                      headers=auth(tokens["reader"])).status_code == 403


def test_delivery_gives_up_after_the_last_attempt(
    client: TestClient, tokens: dict[str, str], db_session: Session, receiver: Receiver,
    override_settings: Any,
) -> None:
    settings = override_settings(webhook_insecure_hosts=[f"127.0.0.1:{receiver.port}"],
                                 webhook_secret=SecretStr(SECRET), webhook_max_attempts=3)
    delivery = _terminal_with_webhook(client, tokens["alice"], db_session, receiver.url,
                                      RecordingDispatcher())
    receiver.statuses = [500, 503, 502, 200]
    states = []
    for _ in range(4):
        delivery.next_attempt_at = SystemClock().now()
        states.append(service.attempt_delivery(db_session, delivery.id, settings=settings,
                                               clock=SystemClock(),
                                               sender=HttpxWebhookSender()).state)
    assert states == ["retry", "retry", "failed", "skipped"]
    assert delivery.status == "failed" and delivery.attempts == 3
    assert len(receiver.received) == 3


def test_unreachable_or_unsigned_attempts_are_recorded_and_retried(
    client: TestClient, tokens: dict[str, str], db_session: Session, receiver: Receiver,
    override_settings: Any,
) -> None:
    settings = override_settings(webhook_insecure_hosts=[f"127.0.0.1:{receiver.port}"],
                                 webhook_secret=SecretStr(SECRET))
    delivery = _terminal_with_webhook(client, tokens["alice"], db_session, receiver.url,
                                      RecordingDispatcher())
    unsigned = settings.model_copy(update={"webhook_secret": SecretStr("")})
    out = service.attempt_delivery(db_session, delivery.id, settings=unsigned,
                                   clock=SystemClock(), sender=HttpxWebhookSender())
    assert out.state == "retry" and "WEBHOOK_SECRET" in (delivery.last_error or "")
    assert receiver.received == []  # never sent unsigned
    delivery.next_attempt_at = SystemClock().now()
    closed = settings.model_copy(update={"webhook_insecure_hosts": []})
    out = service.attempt_delivery(db_session, delivery.id, settings=closed,
                                   clock=SystemClock(), sender=HttpxWebhookSender())
    assert out.state == "retry" and (delivery.last_error or "").startswith("refused")
    assert receiver.received == []  # SSRF rules are checked again at send time


def test_no_webhook_url_no_delivery_and_cancel_notifies(
    client: TestClient, tokens: dict[str, str], db_session: Session, override_settings: Any,
    receiver: Receiver,
) -> None:
    dispatcher = RecordingDispatcher()
    plain = submit(client, tokens["alice"])
    run = finish(db_session, plain["latest_run"]["id"])
    service.notify_terminal(db_session, run, dispatcher=dispatcher)
    db_session.commit()
    assert dispatcher.sent == []
    queued = db_session.get(Run, submit(client, tokens["alice"])["latest_run"]["id"])
    assert queued is not None and queued.status == RunStatus.queued.value
    service.notify_terminal(db_session, queued, dispatcher=dispatcher)  # not terminal: ignored
    db_session.commit()
    assert dispatcher.sent == []

    override_settings(webhook_insecure_hosts=[f"127.0.0.1:{receiver.port}"])
    hooked = submit(client, tokens["alice"], webhook_url=receiver.url)
    assert client.post(f"{hooked['url']}/cancel", headers=auth(tokens["alice"])).status_code == 200
    events = db_session.scalars(select(WebhookDelivery.event).where(
        WebhookDelivery.submission_id == hooked["id"])).all()
    assert events == ["run.cancelled"]


@pytest.mark.parametrize("url", [
    "http://example.com/hook", "https://127.0.0.1/hook", "https://10.0.0.1/h",
    "https://169.254.169.254/latest", "https://localhost/h", "https://u:p@example.com/h",
    "ftp://example.com/h", "s3://bucket/key",
])
def test_webhook_url_rules_at_intake(client: TestClient, tokens: dict[str, str],
                                     url: str) -> None:
    r = client.post("/v1/submissions", json=body(webhook_url=url), headers=auth(tokens["alice"]))
    assert r.status_code == 422 and r.json()["error"] == "webhook_url_rejected", r.text


def test_insecure_hosts_only_lift_the_named_host() -> None:
    check_webhook_url("http://127.0.0.1:8080/h", ["127.0.0.1:8080"])
    check_webhook_url("https://93.184.215.14/h", [], resolve=False)  # a public literal
    from app.webhooks.errors import WebhookUrlRejected

    with pytest.raises(WebhookUrlRejected):
        check_webhook_url("http://127.0.0.1:9090/h", ["127.0.0.1:8080"])


def test_celery_dispatch_reaches_redis_and_task_is_registered() -> None:
    """The real send path: a ``webhooks.deliver`` message, by name, on a Redis queue."""
    need_service("redis", "127.0.0.1", 6379)
    import redis

    from app.queue import make_celery
    from workers.celery_app import app as worker_app

    worker_app.loader.import_default_modules()
    assert {"webhooks.deliver", "webhooks.sweep"} <= set(worker_app.tasks)
    assert any(e["task"] == "webhooks.sweep" for e in worker_app.conf.beat_schedule.values())
    settings = get_settings()
    queue = f"test-webhooks-{uuid.uuid4().hex[:8]}"
    service.CeleryDeliveryDispatcher(make_celery(settings), queue=queue).send_delivery("whd_x")
    r = redis.Redis.from_url(settings.resolved_broker_url)
    try:
        messages = [json.loads(m) for m in r.lrange(queue, 0, -1)]
        assert [m["headers"]["task"] for m in messages] == ["webhooks.deliver"]
        assert "whd_x" in messages[0]["headers"]["argsrepr"]
    finally:
        r.delete(queue)


def test_deliver_task_schedules_the_next_attempt_with_a_celery_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The task wiring: a ``retry`` outcome becomes a Celery retry with the backoff as
    countdown; the attempt logic itself is tested against a real server above."""
    import workers.webhooks as tasks

    outcomes = [service.DeliveryOutcome("retry", 12.5), service.DeliveryOutcome("delivered")]
    calls: list[str] = []

    def one_attempt(delivery_id: str) -> service.DeliveryOutcome:
        calls.append(delivery_id)
        return outcomes.pop(0)

    monkeypatch.setattr(tasks, "run_delivery", one_attempt)
    countdowns: list[float | None] = []
    retry = tasks.deliver.retry

    def spy(*args: Any, **kwargs: Any) -> Any:
        countdowns.append(kwargs.get("countdown"))
        return retry(*args, **kwargs)

    monkeypatch.setattr(tasks.deliver, "retry", spy)
    # Eagerly applied, the retry runs at once (a worker would wait ``countdown`` seconds).
    assert tasks.deliver.apply(args=["whd_1"]).get() == "delivered"
    assert calls == ["whd_1", "whd_1"] and countdowns == [12.5]
