"""The Celery application the worker processes run.

Queues: one per hardware class (``runs.<class>``), ``runs.self-attested`` for scoring-only runs,
and ``maintenance`` for the beat tasks. A worker consumes only the classes it can provision
exactly (``future-ts worker --hardware-class ID``).
"""

from __future__ import annotations

import logging

from celery.signals import worker_ready

from app.queue import make_celery
from app.settings import get_settings

app = make_celery(get_settings(), "future_ts_worker")
app.conf.update(
    include=["workers.tasks", "workers.webhooks"],
    # Time limits are per task (runs.execute: 6 h; sweepers: 2 min): a global soft limit above
    # a task's hard limit makes Celery refuse to schedule it.
    worker_max_tasks_per_child=200,
    beat_schedule={
        "reap-stuck-runs": {"task": "runs.reap_stuck", "schedule": 30.0,
                            "options": {"queue": "maintenance"}},
        "requeue-stale-queued": {"task": "runs.requeue_stale", "schedule": 60.0,
                                 "options": {"queue": "maintenance"}},
        "resend-lost-webhooks": {"task": "webhooks.sweep", "schedule": 60.0,
                                 "options": {"queue": "maintenance"}},
    },
)


@worker_ready.connect  # type: ignore[untyped-decorator]
def _remove_orphans(**_: object) -> None:
    """Containers whose worker died (SIGKILL) keep running under conmon; remove them at start.
    Ownership is an flock held by the live run, so other workers' containers are left alone."""
    from workers.pipeline import get_deps

    try:
        get_deps().backend.cleanup_orphans()
    except Exception:
        logging.getLogger(__name__).exception("orphan cleanup failed")
