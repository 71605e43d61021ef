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

from app.queue import BackgroundRunQueue, CeleryRunQueue, make_celery
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
