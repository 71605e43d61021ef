"""No stuck runs: every non-terminal state has a maximum duration.

* ``queued`` for longer than ``settings.requeue_after_s`` without a claim: the message may have
  been lost (a broker restart without persistence); send it again. The claim is idempotent, so a
  duplicate is harmless.
* ``claimed``/``preparing``/``running``/``scoring`` with no worker heartbeat for
  ``settings.reaper_heartbeat_timeout_s``: the worker died. That is a platform fault: the run
  goes back to ``queued`` (a new attempt, a fresh container name and a fresh log) up to
  ``MAX_PLATFORM_ATTEMPTS`` times, then fails with ``platform_error``. It never counts against
  the author's quota.
* Any state older than its hard ceiling fails with ``timeout`` (the model's budgets are enforced
  by the driver; this is the backstop for a hung worker).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select

from app.clock import SystemClock
from app.db import session_scope
from app.queue import get_run_sender
from app.runs import service as runs
from app.runs.models import FailureReason, Run, RunStatus
from app.settings import get_settings
from app.webhooks.service import notify_terminal

log = logging.getLogger(__name__)

MAX_PLATFORM_ATTEMPTS = 3
HARD_CEILING = timedelta(hours=6)
ACTIVE = (RunStatus.claimed, RunStatus.preparing, RunStatus.running, RunStatus.scoring)


def reap_stuck_runs(actor: str) -> int:
    """Requeue or fail runs whose worker stopped beating. Returns how many were touched."""
    clock = SystemClock()
    now = clock.now()
    heartbeat_timeout = timedelta(seconds=get_settings().reaper_heartbeat_timeout_s)
    touched = 0
    requeue: list[tuple[str, str]] = []
    with session_scope() as session:
        stmt = (select(Run).where(Run.status.in_([s.value for s in ACTIVE]))
                .with_for_update(skip_locked=True))
        for run in session.scalars(stmt):
            beat = run.heartbeat_at or run.status_changed_at
            if now - run.created_at > HARD_CEILING:
                runs.transition(session, clock, run, RunStatus.failed, actor=f"reaper:{actor}",
                                failure_reason=FailureReason.timeout.value,
                                failure_detail="run exceeded the platform's hard ceiling")
                notify_terminal(session, run)
            elif now - beat > heartbeat_timeout:
                _retry_or_fail(session, clock, run, actor, requeue)
            else:
                continue
            touched += 1
    queue = get_run_sender()
    for run_id, hardware_class in requeue:
        queue.send_run(run_id, hardware_class)
    return touched


def _retry_or_fail(session: object, clock: SystemClock, run: Run, actor: str,
                   requeue: list[tuple[str, str]]) -> None:
    from sqlalchemy.orm import Session

    assert isinstance(session, Session)
    detail = {"lost_worker": run.worker, "last_heartbeat": str(run.heartbeat_at)}
    if run.platform_attempts + 1 >= MAX_PLATFORM_ATTEMPTS:
        runs.transition(session, clock, run, RunStatus.failed, actor=f"reaper:{actor}",
                        failure_reason=FailureReason.platform_error.value,
                        failure_detail="worker lost too many times", detail=detail)
        notify_terminal(session, run)
        return
    run.platform_attempts += 1
    run.worker = None
    runs.transition(session, clock, run, RunStatus.queued, actor=f"reaper:{actor}",
                    detail={**detail, "platform_attempt": run.platform_attempts})
    requeue.append((run.id, run.hardware_class))


def requeue_stale_runs() -> int:
    """Send again every run queued for longer than ``requeue_after_s`` (lost messages)."""
    clock = SystemClock()
    cutoff = clock.now() - timedelta(seconds=get_settings().requeue_after_s)
    sent: list[tuple[str, str]] = []
    with session_scope() as session:
        stmt = select(Run).where(Run.status == RunStatus.queued.value,
                                 Run.status_changed_at < cutoff)
        for run in session.scalars(stmt):
            last_sent = run.heartbeat_at or run.status_changed_at
            if last_sent < cutoff:
                run.heartbeat_at = clock.now()  # for queued runs: when it was last sent
                sent.append((run.id, run.hardware_class))
    queue = get_run_sender()
    for run_id, hardware_class in sent:
        queue.send_run(run_id, hardware_class)
    return len(sent)
