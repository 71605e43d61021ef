"""Enqueueing runs: after commit, by task name, ids only.

The API builds a Celery *client* from settings and sends ``runs.execute`` by name; it never
imports the ``workers`` package. One queue per hardware class (``runs.<class id>``), so a run
waits until a worker that can provision that class exactly takes it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import queue as stdlib_queue
import threading
import time
import uuid
from functools import lru_cache
from typing import Any, Protocol

from celery import Celery
from sqlalchemy.orm import Session

from app.db import after_commit
from app.hardware import get_hardware_class
from app.settings import Settings, get_settings

RUN_TASK = "runs.execute"
SELF_ATTESTED_CLASS = "self-attested"  # scoring-only runs: no container, no hardware class
SELF_ATTESTED_QUEUE = "runs.self-attested"
# Longer than the longest run, so Redis never redelivers a run that is still executing.
VISIBILITY_TIMEOUT_S = 6 * 3600


def celery_config(settings: Settings) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "broker_url": settings.resolved_broker_url,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "broker_connection_retry_on_startup": True,
        "task_default_queue": "default",
        "task_serializer": "json",
        "accept_content": ["json"],
    }
    if settings.resolved_broker_url.startswith("filesystem"):
        folder = str(settings.broker_folder)
        conf["broker_transport_options"] = {
            "data_folder_in": folder, "data_folder_out": folder,
            "processed_folder": folder + "-processed", "store_processed": False,
            "control_folder": folder + "-control",  # kombu's default is ./control
        }
    else:
        conf["broker_transport_options"] = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
    return conf


def make_celery(settings: Settings, name: str = "future_ts") -> Celery:
    if settings.resolved_broker_url.startswith("filesystem"):
        settings.broker_folder.mkdir(parents=True, exist_ok=True)
        (settings.broker_folder.parent / (settings.broker_folder.name + "-processed")).mkdir(
            parents=True, exist_ok=True)
    app = Celery(name)
    app.conf.update(celery_config(settings))
    return app


@lru_cache(maxsize=1)
def get_celery_client() -> Celery:
    return make_celery(get_settings(), "future_ts_client")


class RunQueue(Protocol):
    def send_run(self, run_id: str, hardware_class: str) -> None:
        """Send one run to its hardware class's queue (now, not after commit)."""
        ...


class BatchRunQueue(RunQueue, Protocol):
    def send_runs(self, runs: list[tuple[str, str]]) -> None:
        """Send several ``(run_id, hardware_class)`` at once; on an error, any may be unsent."""
        ...


class CeleryRunQueue:
    def __init__(self, celery: Celery) -> None:
        self.celery = celery

    def send_run(self, run_id: str, hardware_class: str) -> None:
        self.celery.send_task(RUN_TASK, args=[run_id], queue=_queue_of(hardware_class))

    def send_runs(self, runs: list[tuple[str, str]]) -> None:
        # One producer and, on Redis, one pipelined round trip for all of them (kombu's
        # Producer.batch): per message, kombu otherwise makes a Redis client and a round trip.
        with self.celery.producer_or_acquire() as producer, producer.batch():
            for run_id, hardware_class in runs:
                self.celery.send_task(RUN_TASK, args=[run_id], queue=_queue_of(hardware_class),
                                      producer=producer)


class RedisRunQueue:
    """The API's sender on a Redis broker: the message ``CeleryRunQueue`` sends, built by
    Celery (``amqp.as_task_v2``: headers, body) and wrapped as kombu's Redis transport stores
    it, put on the class's list with one pipelined ``LPUSH`` per batch.

    Measured here per run, the Redis round trip included: 500 us of CPU through ``send_task``
    alone, 320 us in batches of four; 200 us and 110 us this way (every submission sends one).
    Workers consume it as any Celery message (``tests/api/test_run_queue.py`` compares it with
    kombu's own field by field; the worker tests run it through a real worker). Queues are
    declared by the workers that consume them; a message for a class no worker serves yet
    waits on its list.
    """

    def __init__(self, celery: Celery) -> None:
        import redis

        self.celery = celery
        self.redis = redis.Redis.from_url(celery.conf.broker_url)

    def send_run(self, run_id: str, hardware_class: str) -> None:
        self.send_runs([(run_id, hardware_class)])

    def send_runs(self, runs: list[tuple[str, str]]) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            for run_id, hardware_class in runs:
                queue = _queue_of(hardware_class)
                pipe.lpush(queue, self.message(run_id, queue))
            pipe.execute()

    def message(self, run_id: str, queue: str) -> bytes:
        task_id = str(uuid.uuid4())
        # ignore_result as send_task leaves it (None): the workers read task_ignore_result.
        task = self.celery.amqp.as_task_v2(task_id, RUN_TASK, args=[run_id], ignore_result=None)
        return json.dumps({
            "body": base64.b64encode(json.dumps(task.body).encode()).decode(),
            "content-encoding": "utf-8", "content-type": "application/json",
            "headers": task.headers,
            "properties": {**task.properties, "delivery_mode": 2,
                           "delivery_info": {"exchange": "", "routing_key": queue},
                           "priority": 0, "body_encoding": "base64",
                           "delivery_tag": str(uuid.uuid4())},
        }).encode()


def make_run_queue(celery: Celery) -> BatchRunQueue:
    """``RedisRunQueue`` on a Redis broker, ``CeleryRunQueue`` on any other."""
    if str(celery.conf.broker_url).startswith(("redis://", "rediss://")):
        return RedisRunQueue(celery)
    return CeleryRunQueue(celery)


@lru_cache(maxsize=1)
def get_run_sender() -> BatchRunQueue:
    """The process's sender, sending now (its broker connections are kept between sends)."""
    return make_run_queue(get_celery_client())


def _queue_of(hardware_class: str) -> str:
    return (SELF_ATTESTED_QUEUE if hardware_class == SELF_ATTESTED_CLASS
            else get_hardware_class(hardware_class).queue)


class BackgroundRunQueue:
    """Sends through ``queue`` on one daemon thread, in the order given, so that a request does
    not wait for the broker (a Celery publish is about half a millisecond of CPU and a Redis
    round trip, which the 202 used to wait for after the commit). The runs handed over while
    the thread was sending, or within ``linger_s`` of the first, go out together
    (``send_runs``): under load, a send for several runs instead of one each.

    Nothing accepted is lost by not waiting: the run is committed as ``queued`` before it is
    handed over, and the beat sweeper (``runs.requeue_stale``) sends again every run queued for
    longer than ``requeue_after_s``, so a send that fails, or that a crash or restart between
    the commit and the send never made, is made later. A duplicate is harmless: a worker claims
    a run once.
    """

    max_batch = 100

    def __init__(self, queue: BatchRunQueue, linger_s: float = 0.01) -> None:
        self.queue = queue
        self.linger_s = linger_s
        # SimpleQueue: its put is a C call, cheap on the request's thread.
        self._pending: stdlib_queue.SimpleQueue[tuple[str, str] | threading.Event] = (
            stdlib_queue.SimpleQueue())
        self._sender = threading.Thread(target=self._send_forever, name="run-queue-sender",
                                        daemon=True)
        self._sender.start()

    def send_run(self, run_id: str, hardware_class: str) -> None:
        """Hand the run to the sender thread and return at once."""
        self._pending.put((run_id, hardware_class))

    def join(self, timeout_s: float = 10.0) -> bool:
        """Wait until every run handed over so far has been sent (or failed to be)."""
        done = threading.Event()
        self._pending.put(done)
        return done.wait(timeout_s)

    def _send_forever(self) -> None:
        while True:
            items = [self._pending.get()]
            # Wait a little for more runs (or until someone joins): a send costs about the
            # same for one run as for several, and the runs wait in the database anyway.
            deadline = time.monotonic() + self.linger_s
            with contextlib.suppress(stdlib_queue.Empty):
                while len(items) < self.max_batch and not isinstance(items[-1], threading.Event):
                    items.append(self._pending.get(timeout=max(0.0,
                                                               deadline - time.monotonic())))
            runs = [item for item in items if not isinstance(item, threading.Event)]
            if runs:
                self._send(runs)
            for item in items:
                if isinstance(item, threading.Event):
                    item.set()

    def _send(self, runs: list[tuple[str, str]]) -> None:
        try:
            self.queue.send_runs(runs)
        except Exception:
            logging.getLogger(__name__).exception(
                "enqueue of %s failed; sweeper will retry", ", ".join(r for r, _ in runs))


def enqueue_run_after_commit(session: Session, queue: RunQueue, run_id: str,
                             hardware_class: str) -> None:
    """A run queued in a transaction that rolls back is never sent.

    If the send itself fails after the commit, the run stays ``queued`` in the database and the
    beat sweeper (``runs.requeue_stale``) sends it again; nothing accepted is lost.
    """
    def _send() -> None:
        try:
            queue.send_run(run_id, hardware_class)
        except Exception:
            logging.getLogger(__name__).exception("enqueue of %s failed; sweeper will retry",
                                                  run_id)

    after_commit(session, _send)
