"""Real Celery workers over real Redis: claim exactly once, fair scheduling across authors,
a worker SIGKILLed mid-run, and a Redis restart with submissions queued."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.auth.models import Role
from app.db import session_scope
from app.queue import make_celery, make_run_queue
from app.runs.models import TERMINAL_RUN, Report, Run, RunEvent, RunStatus
from app.settings import Settings
from tests.workers.conftest import NullQueue, leftover_containers, make_token, submission_body
from workers import pipeline

pytestmark = [pytest.mark.podman, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(settings: Settings, broker: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "FUTURE_TS_BROKER_URL": broker, "FUTURE_TS_STORE": "s3",
        "FUTURE_TS_S3_ENDPOINT_URL": settings.s3_endpoint_url or "",
        "FUTURE_TS_S3_BUCKET": settings.s3_bucket, "FUTURE_TS_S3_ACCESS_KEY": "futurets",
        "FUTURE_TS_S3_SECRET_KEY": "futurets-ci-secret", "FUTURE_TS_OBJECT_LOCK_DAYS": "1",
        "FUTURE_TS_DATA_DIR": str(settings.data_dir), "FUTURE_TS_RUNNER_BACKEND": "podman",
        **extra,
    })
    return env


@contextmanager
def worker(env: dict[str, str], concurrency: int = 2) -> Iterator[subprocess.Popen[bytes]]:
    log = open(Path(env["FUTURE_TS_DATA_DIR"]) / f"worker-{time.time_ns()}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q",
         "runs.cpu-1c-1g,runs.self-attested,maintenance", "--concurrency", str(concurrency),
         "-O", "fair", "--without-gossip", "--without-mingle", "--loglevel", "INFO",
         "--hostname", f"test-{time.time_ns()}@%h"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def _runs(run_ids: list[str]) -> dict[str, Run]:
    with session_scope() as session:
        rows = session.scalars(select(Run).where(Run.id.in_(run_ids))).all()
        return {r.id: r for r in rows}
    return {}


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def all_terminal(run_ids: list[str]) -> Callable[[], bool]:
    return lambda: all(RunStatus(r.status) in TERMINAL_RUN for r in _runs(run_ids).values())


def _submit_many(client: TestClient, token: str, n: int, queue: NullQueue) -> list[str]:
    start = len(queue.sent)
    for _ in range(n):
        r = client.post("/v1/submissions", headers={"Authorization": f"Bearer {token}"},
                        json=submission_body("seasonal-naive", ["sunspots-yearly"]))
        assert r.status_code == 202, r.text
    return queue.sent[start:]


def _count(model: Any, **where: str) -> int:
    with session_scope() as session:
        stmt = select(model)
        for key, value in where.items():
            stmt = stmt.where(getattr(model, key) == value)
        return len(session.scalars(stmt).all())
    return 0


@pytest.fixture()
def broker() -> str:
    url = "redis://127.0.0.1:6379/11"
    redis.Redis.from_url(url).flushdb()
    return url


def test_duplicate_delivery_starts_one_run(api: tuple[TestClient, NullQueue],
                                           deps: pipeline.Deps, broker: str) -> None:
    client, queue = api
    [run_id] = _submit_many(client, make_token(Role.author), 1, queue)
    sender = make_run_queue(make_celery(deps.settings.model_copy(update={"broker_url": broker})))
    sender.send_run(run_id, "cpu-1c-1g")
    sender.send_run(run_id, "cpu-1c-1g")  # the same message delivered twice
    assert redis.Redis.from_url(broker).llen("runs.cpu-1c-1g") == 2
    with worker(_env(deps.settings, broker)):
        wait_until(all_terminal([run_id]), 120, "the run to finish")
        time.sleep(1.0)  # let the duplicate be consumed too
    assert _runs([run_id])[run_id].status == "completed"
    assert _count(RunEvent, run_id=run_id, status="claimed") == 1
    assert _count(Report, run_id=run_id) == 1


def test_fair_scheduling_across_authors(api: tuple[TestClient, NullQueue],
                                        deps: pipeline.Deps, broker: str) -> None:
    client, queue = api
    heavy, light = make_token(Role.author), make_token(Role.author)
    heavy_runs = _submit_many(client, heavy, 8, queue)
    sender = make_run_queue(make_celery(deps.settings.model_copy(update={"broker_url": broker})))
    for run_id in heavy_runs:
        sender.send_run(run_id, "cpu-1c-1g")
    with worker(_env(deps.settings, broker), concurrency=2):
        wait_until(lambda: sum(r.status != "queued" for r in _runs(heavy_runs).values()) >= 2,
                   60, "both slots to be busy")
        [light_run] = _submit_many(client, light, 1, queue)
        submitted_at = _runs([light_run])[light_run].created_at
        sender.send_run(light_run, "cpu-1c-1g")
        wait_until(all_terminal([*heavy_runs, light_run]), 300, "the queue to drain")
    runs = _runs([*heavy_runs, light_run])
    light_claim = runs[light_run].claimed_at
    assert light_claim is not None
    overtook = [r for r in heavy_runs if runs[r].claimed_at and
                submitted_at < runs[r].claimed_at < light_claim]  # type: ignore[operator]
    # The newcomer waits for at most one slot to free; none of the heavy author's queued runs
    # is claimed before it (one may race the newcomer's commit).
    assert len(overtook) <= 1, overtook
    assert all(r.status == "completed" for r in runs.values())


def test_sigkilled_worker_run_completes_exactly_once(api: tuple[TestClient, NullQueue],
                                                     deps: pipeline.Deps, broker: str) -> None:
    client, queue = api
    [run_id] = _submit_many(client, make_token(Role.author), 1, queue)
    sender = make_run_queue(make_celery(deps.settings.model_copy(update={"broker_url": broker})))
    sender.send_run(run_id, "cpu-1c-1g")
    env = _env(deps.settings, broker, FUTURE_TS_REAPER_HEARTBEAT_TIMEOUT_S="3")
    with worker(env) as proc:
        wait_until(lambda: _runs([run_id])[run_id].status == "running", 60, "the run to start")
        os.killpg(proc.pid, signal.SIGKILL)  # the whole worker, children included
        proc.wait()
    assert _runs([run_id])[run_id].status == "running"  # stuck until the reaper sees it
    time.sleep(3.5)
    reaper = subprocess.run(
        [sys.executable, "-c", "from workers.maintenance import reap_stuck_runs;"
         "print(reap_stuck_runs('test-reaper'))"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert reaper.stdout.strip() == "1", reaper.stderr[-3000:]
    assert _runs([run_id])[run_id].status == "queued"
    with worker(env):  # a restarted worker removes the orphan and runs the retry
        wait_until(all_terminal([run_id]), 120, "the retried run to finish")
    run = _runs([run_id])[run_id]
    assert run.status == "completed" and run.platform_attempts == 1
    assert _count(Report, run_id=run_id) == 1
    assert leftover_containers(run_id) == []


def test_redis_restart_loses_no_submission(api: tuple[TestClient, NullQueue],
                                           deps: pipeline.Deps, tmp_path: Path) -> None:
    port = _free_port()
    server = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
              "--appendonly", "no", "--dir", str(tmp_path)]
    broker = f"redis://127.0.0.1:{port}/0"
    client, queue = api
    redis_proc = subprocess.Popen(server, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: _pings(broker), 10, "redis to start")
        run_ids = _submit_many(client, make_token(Role.author), 3, queue)
        sender = make_run_queue(make_celery(deps.settings.model_copy(
            update={"broker_url": broker})))
        for run_id in run_ids:
            sender.send_run(run_id, "cpu-1c-1g")
        assert redis.Redis.from_url(broker).llen("runs.cpu-1c-1g") == 3
        redis_proc.kill()  # no persistence: every queued message is gone
        redis_proc.wait()
        redis_proc = subprocess.Popen(server, stdout=subprocess.DEVNULL)
        wait_until(lambda: _pings(broker), 10, "redis to restart")
        assert redis.Redis.from_url(broker).llen("runs.cpu-1c-1g") == 0
        env = _env(deps.settings, broker, FUTURE_TS_REQUEUE_AFTER_S="0")
        subprocess.run([sys.executable, "-c", "from workers.maintenance import "
                        "requeue_stale_runs; print(requeue_stale_runs())"],
                       cwd=ROOT, env=env, check=True, timeout=60, capture_output=True)
        with worker(env):
            wait_until(all_terminal(run_ids), 180, "the re-sent runs to finish")
        assert all(r.status == "completed" for r in _runs(run_ids).values())
    finally:
        redis_proc.kill()
        redis_proc.wait()


def _pings(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.2).ping())
    except redis.exceptions.ConnectionError:
        return False
