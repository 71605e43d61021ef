"""Celery tasks: thin, named, idempotent. Each body calls a plain function tested against the
real database; the edge (``session_scope``) owns every transaction."""

from __future__ import annotations

import logging
import socket

from celery import Task

from workers.celery_app import app

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{__import__('os').getpid()}"


class RunTask(Task):  # type: ignore[misc]
    acks_late = True
    reject_on_worker_lost = True
    time_limit = 6 * 3600
    soft_time_limit = 6 * 3600 - 60


@app.task(name="runs.execute", base=RunTask, bind=True)  # type: ignore[untyped-decorator]
def execute(self: Task, run_id: str) -> str:
    """Claim and execute one run. A second delivery of the same message is a no-op."""
    from workers.pipeline import execute_run

    return execute_run(run_id, worker_name())


@app.task(name="runs.reap_stuck", acks_late=True, time_limit=120)  # type: ignore[untyped-decorator]
def reap_stuck() -> int:
    from workers.maintenance import reap_stuck_runs

    return reap_stuck_runs(worker_name())


@app.task(name="runs.requeue_stale", acks_late=True, time_limit=120)  # type: ignore[untyped-decorator]
def requeue_stale() -> int:
    from workers.maintenance import requeue_stale_runs

    return requeue_stale_runs()
