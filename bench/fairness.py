"""Fair scheduling under load (issue: operations).

N queued submissions from several authors (the first author floods the queue), one real worker
with 2 run slots (podman), the production API (uvicorn) on PostgreSQL. Prints, per author, how
long their first run waited for a slot after the worker started, and the status endpoint's
latency while the queue drains.

    .venv/bin/python bench/fairness.py [--submissions 200] [--authors 5]

Needs: PostgreSQL on 127.0.0.1:5432, Redis on 127.0.0.1:6379, the registry with the baseline
images (.ci/services.sh start && images/build.sh) and CONTAINERS_CONF (. .ci/state/env.sh).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import redis
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
PG = "postgresql+psycopg://postgres@127.0.0.1:5432"
IMAGE = "127.0.0.1:5000/future-ts/seasonal-naive:latest"
TASK = "sunspots-yearly"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submissions", type=int, default=200)
    ap.add_argument("--authors", type=int, default=5)
    args = ap.parse_args()
    db = f"futurets_bench_fair_{uuid.uuid4().hex[:6]}"
    admin = create_engine(f"{PG}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{db}"'))
    data = Path(tempfile.mkdtemp(prefix="fts-fair-"))
    broker = "redis://127.0.0.1:6379/9"
    redis.Redis.from_url(broker).flushdb()
    env = {**os.environ, "FUTURE_TS_DATABASE_URL": f"{PG}/{db}", "FUTURE_TS_BROKER_URL": broker,
           "FUTURE_TS_DATA_DIR": str(data), "FUTURE_TS_ENVIRONMENT": "test",
           "FUTURE_TS_RUNNER_BACKEND": "podman", "FUTURE_TS_QUOTA_SUBMISSIONS_PER_DAY": "100000",
           "FUTURE_TS_QUOTA_RUNS_IN_FLIGHT": "100000", "PYTHONWARNINGS": "ignore"}
    cli = [sys.executable, "-m", "app.cli"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        subprocess.run([*cli, "migrate"], env=env, cwd=ROOT, check=True, capture_output=True)
        tokens = [subprocess.run([*cli, "tokens", "create", "--role", "author", "--name",
                                  f"author-{i}"], env=env, cwd=ROOT, check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
                  for i in range(args.authors)]
        staff = subprocess.run([*cli, "tokens", "create", "--role", "staff", "--name", "s"],
                               env=env, cwd=ROOT, check=True, capture_output=True,
                               text=True).stdout.strip().splitlines()[-1]
        port = free_port()
        procs.append(subprocess.Popen([*cli, "api", "--port", str(port), "--workers", "2"],
                                      env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz")
        # The first author floods: half of all submissions, then the others share the rest.
        counts = [args.submissions // 2] + [0] * (args.authors - 1)
        for i in range(args.submissions - counts[0]):
            counts[1 + i % (args.authors - 1)] += 1
        owner_of: dict[str, int] = {}
        with httpx.Client(base_url=base, timeout=30) as client:
            for author, n in enumerate(counts):
                for _ in range(n):
                    r = client.post("/v1/submissions", headers=auth(tokens[author]), json={
                        "image": IMAGE, "tasks": [TASK], "tier": "public_dev",
                        "metadata": {"model_name": f"m{author}", "organization": "bench",
                                     "training_cutoff": "2010-01-01T00:00:00Z",
                                     "frozen_at": "2010-01-02T00:00:00Z"}})
                    r.raise_for_status()
                    owner_of[r.json()["id"]] = author
        print(f"queued {args.submissions} submissions from {args.authors} authors: {counts}")
        started = time.time()
        procs.append(subprocess.Popen([*cli, "worker", "--hardware-class", "cpu-1c-1g",
                                       "--concurrency", "2"], env=env, cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))
        latencies: list[float] = []
        stop = threading.Event()
        ids = list(owner_of)

        def poll() -> None:
            with httpx.Client(base_url=base, timeout=30) as c:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    c.get(f"/v1/submissions/{random.choice(ids)}", headers=auth(staff))
                    latencies.append((time.perf_counter() - t0) * 1000)
                    time.sleep(0.02)

        pollers = [threading.Thread(target=poll, daemon=True) for _ in range(4)]
        for t in pollers:
            t.start()
        engine = create_engine(f"{PG}/{db}")
        while True:
            with engine.connect() as c:
                left = c.execute(text("SELECT count(*) FROM runs WHERE status NOT IN "
                                      "('completed','failed','cancelled')")).scalar_one()
            if left == 0:
                break
            time.sleep(1)
        drained = time.time() - started
        stop.set()
        for t in pollers:
            t.join()
        with engine.connect() as c:
            rows = c.execute(text("SELECT s.id, r.claimed_at, r.status FROM runs r JOIN "
                                  "submissions s ON s.id = r.submission_id")).all()
        engine.dispose()
        report(rows, owner_of, counts, started, drained, latencies)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))


def report(rows: list[object], owner_of: dict[str, int], counts: list[int], started: float,
           drained: float, latencies: list[float]) -> None:
    claims = sorted((r.claimed_at.timestamp(), owner_of[r.id]) for r in rows  # type: ignore[attr-defined]
                    if r.claimed_at is not None)  # type: ignore[attr-defined]
    statuses = [r.status for r in rows]  # type: ignore[attr-defined]
    print(f"drained in {drained:.1f} s; statuses: "
          f"{ {s: statuses.count(s) for s in set(statuses)} }")
    print("author  submitted  first-run wait (s)  claim position")
    for author, n in enumerate(counts):
        first = next(((t, i) for i, (t, a) in enumerate(claims) if a == author), None)
        if first:
            print(f"{author:>6}  {n:>9}  {first[0] - started:>18.2f}  {first[1] + 1:>14}")
    print(f"status GET while draining: n={len(latencies)} "
          f"p50={statistics.median(latencies):.1f} ms p99={pct(latencies, 99):.1f} ms")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


if __name__ == "__main__":
    main()
