"""Enqueueing runs: after commit, by task name, ids only.

The API builds a Celery *client* from settings and sends ``runs.execute`` by name; it never
imports the ``workers`` package. One queue per hardware class (``runs.<class id>``), so a run
waits until a worker that can provision that class exactly takes it.
"""

from __future__ import annotations

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


class CeleryRunQueue:
    def __init__(self, celery: Celery) -> None:
        self.celery = celery

    def send_run(self, run_id: str, hardware_class: str) -> None:
        queue = (SELF_ATTESTED_QUEUE if hardware_class == SELF_ATTESTED_CLASS
                 else get_hardware_class(hardware_class).queue)
        self.celery.send_task(RUN_TASK, args=[run_id], queue=queue)


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
            import logging

            logging.getLogger(__name__).exception("enqueue of %s failed; sweeper will retry",
                                                  run_id)

    after_commit(session, _send)
