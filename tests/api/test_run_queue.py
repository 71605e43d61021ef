"""``BackgroundRunQueue``: the request hands a run over and returns; one thread sends, in order,
and a failed send is logged (the sweeper re-sends runs left queued) without stopping the rest."""

from __future__ import annotations

import base64
import json
import logging
import threading
from typing import Any

import pytest
import redis

from app.queue import (
    BackgroundRunQueue,
    CeleryRunQueue,
    RedisRunQueue,
    make_celery,
    make_run_queue,
)
from app.settings import get_settings
from tests.api.conftest import RecordingQueue
from tests.conftest import need_service


class BatchRecordingQueue(RecordingQueue):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def send_runs(self, runs: list[tuple[str, str]]) -> None:
        self.batches.append(len(runs))
        for run_id, hardware_class in runs:
            self.send_run(run_id, hardware_class)


class BlockingQueue(BatchRecordingQueue):
    def __init__(self) -> None:
        super().__init__()
        self.sending = threading.Event()
        self.release = threading.Event()

    def send_runs(self, runs: list[tuple[str, str]]) -> None:
        self.sending.set()
        assert self.release.wait(10)
        super().send_runs(runs)


class FlakyQueue(BatchRecordingQueue):
    def send_runs(self, runs: list[tuple[str, str]]) -> None:
        if any(run_id == "run_bad" for run_id, _ in runs):
            raise ConnectionError("broker down")
        super().send_runs(runs)


def test_send_returns_before_the_broker_answers_and_keeps_the_order() -> None:
    inner = BlockingQueue()
    background = BackgroundRunQueue(inner)
    background.send_run("run_0", "cpu-1c-1g")  # would hang here if it waited
    assert inner.sending.wait(10)
    background.send_run("run_1", "cpu-1c-1g")
    background.send_run("run_2", "cpu-1c-1g")
    assert inner.sent == []
    inner.release.set()
    assert background.join()
    assert inner.sent == [(f"run_{i}", "cpu-1c-1g") for i in range(3)]
    # The first went alone; the two handed over while it was being sent, together.
    assert inner.batches == [1, 2]


def test_a_failed_send_is_logged_and_the_next_still_sent(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    inner = FlakyQueue()
    background = BackgroundRunQueue(inner)
    with caplog.at_level(logging.ERROR, logger="app.queue"):
        background.send_run("run_bad", "cpu-1c-1g")
        assert background.join()
        background.send_run("run_good", "cpu-1c-1g")
        assert background.join()
    assert inner.sent == [("run_good", "cpu-1c-1g")]
    assert "run_bad" in caplog.text and "sweeper" in caplog.text


def _messages(client: redis.Redis[bytes], key: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(client.lrange(key, 0, -1))]


def test_celery_batch_sends_the_same_messages_as_single_sends() -> None:
    """Against the real Redis: ``send_runs`` (one pipeline) puts on each class's queue what
    ``send_run`` puts there, in order."""
    need_service("Redis", "127.0.0.1", 6379)
    url = "redis://127.0.0.1:6379/9"
    client = redis.Redis.from_url(url)
    key = "runs.cpu-1c-1g"
    client.delete(key)
    sender = CeleryRunQueue(make_celery(get_settings().model_copy(update={"broker_url": url})))
    try:
        sender.send_run("run_single", "cpu-1c-1g")
        sender.send_runs([("run_a", "cpu-1c-1g"), ("run_b", "cpu-1c-1g")])
        single, *batched = _messages(client, key)
    finally:
        client.delete(key)
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in (single, *batched)] == [
        ["run_single"], ["run_a"], ["run_b"]]
    for message in batched:
        assert message["headers"]["task"] == single["headers"]["task"] == "runs.execute"
        assert message["headers"].keys() == single["headers"].keys()
        assert message["properties"]["delivery_info"] == single["properties"]["delivery_info"]


def test_runs_handed_over_within_the_linger_go_as_one_batch() -> None:
    inner = BatchRecordingQueue()
    background = BackgroundRunQueue(inner, linger_s=5.0)
    for i in range(3):
        background.send_run(f"run_{i}", "cpu-1c-1g")
    assert background.join()  # a join ends the wait at once
    assert inner.batches == [3]
    assert inner.sent == [(f"run_{i}", "cpu-1c-1g") for i in range(3)]


def test_redis_sender_puts_what_celery_puts() -> None:
    """``RedisRunQueue`` (the API's sender) against Celery's own ``send_task``, on the real
    Redis: the same message but for the ids Celery draws per message."""
    need_service("Redis", "127.0.0.1", 6379)
    url = "redis://127.0.0.1:6379/9"
    client = redis.Redis.from_url(url)
    key = "runs.cpu-1c-1g"
    client.delete(key)
    celery = make_celery(get_settings().model_copy(update={"broker_url": url}))
    lean = make_run_queue(celery)
    assert isinstance(lean, RedisRunQueue)
    try:
        CeleryRunQueue(celery).send_run("run_x", "cpu-1c-1g")
        lean.send_runs([("run_x", "cpu-1c-1g"), ("run_y", "cpu-1c-1g")])
        reference, ours, second = _messages(client, key)
    finally:
        client.delete(key)
    drawn = {"id", "root_id", "origin", "correlation_id", "reply_to", "delivery_tag"}

    def shape(message: dict[str, Any]) -> dict[str, Any]:
        return {
            **{k: v for k, v in message.items() if k not in ("headers", "properties", "body")},
            "headers": {k: v for k, v in message["headers"].items()
                        if k not in drawn},
            "properties": {k: v for k, v in message["properties"].items() if k not in drawn},
            "body": json.loads(base64.b64decode(message["body"])),
        }

    assert shape(ours) == shape(reference)
    assert ours["headers"].keys() == reference["headers"].keys()
    assert ours["properties"].keys() == reference["properties"].keys()
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"][
        "correlation_id"] != second["headers"]["id"]
    assert json.loads(base64.b64decode(second["body"]))[0] == ["run_y"]
