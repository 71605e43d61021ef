"""End-to-end platform overhead of one sealed run (issue: sealed execution).

Submits the seasonal-naive image on one task N times and runs each through the real pipeline
(claim, pull from the local cache, start, probe, stop, log, score, archive to the local store,
sign). Prints, per run, the wall time of each phase from the run's platform-stamped timeline
and the overhead: everything that is not the model's own compute (the sum of the platform's
per-prediction ``runtime_ms``, which itself includes the harness round trip).

    . .ci/state/env.sh && .venv/bin/python bench/e2e.py [--runs 5] [--task sunspots-yearly]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import uuid
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG = "postgresql+psycopg://postgres@127.0.0.1:5432"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--task", default="sunspots-yearly")
    args = ap.parse_args()
    from sqlalchemy import create_engine, text

    db = f"futurets_bench_e2e_{uuid.uuid4().hex[:6]}"
    admin = create_engine(f"{PG}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{db}"'))
    os.environ.update(FUTURE_TS_DATABASE_URL=f"{PG}/{db}", FUTURE_TS_ENVIRONMENT="test",
                      FUTURE_TS_DATA_DIR=tempfile.mkdtemp(prefix="fts-e2e-"),
                      FUTURE_TS_RUNNER_BACKEND="podman",
                      FUTURE_TS_BROKER_URL="redis://127.0.0.1:6379/8")
    warnings.simplefilter("ignore")
    try:
        rows = run_all(args.runs, args.task)
    finally:
        from app.db import get_engine

        get_engine().dispose()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    print_table(rows)


def run_all(n: int, task: str) -> list[dict[str, float]]:
    from fastapi.testclient import TestClient

    from app.auth.models import Role
    from app.auth.service import create_token
    from app.cli import main as cli
    from app.clock import SystemClock
    from app.db import session_scope
    from app.deps import get_run_queue
    from app.main import create_app
    from app.runs.models import Run, RunEvent
    from workers.pipeline import execute_run

    cli(["migrate"])
    with session_scope() as session:
        _, token = create_token(session, SystemClock(), name="bench", role=Role.author)
    sent: list[str] = []

    class Queue:
        def send_run(self, run_id: str, hardware_class: str) -> None:
            sent.append(run_id)

    app = create_app()
    app.dependency_overrides[get_run_queue] = lambda: Queue()
    client = TestClient(app)
    rows = []
    for i in range(n + 1):  # the first run warms the image cache and the catalog; not counted
        r = client.post("/v1/submissions", headers={"Authorization": f"Bearer {token}"}, json={
            "image": "127.0.0.1:5000/future-ts/seasonal-naive:latest", "tasks": [task],
            "tier": "public_dev",
            "metadata": {"model_name": "snaive", "organization": "bench",
                         "training_cutoff": "2010-01-01T00:00:00Z",
                         "frozen_at": "2010-01-02T00:00:00Z"}})
        r.raise_for_status()
        status = execute_run(sent[-1], "bench")
        assert status == "completed", status
        with session_scope() as session:
            run = session.get(Run, sent[-1])
            assert run is not None
            events = {e.status: e.at for e in session.query(RunEvent).filter_by(run_id=run.id)}
            predictions = run.summary["predictions"] if run.summary else 0
        compute_ms = sum_runtime(sent[-1])
        if i == 0:
            continue
        t = {k: v.timestamp() for k, v in events.items()}
        rows.append({
            "claim_ms": (t["claimed"] - t["queued"]) * 1000,
            "prepare_ms": (t["running"] - t["preparing"]) * 1000,
            "run_ms": (t["scoring"] - t["running"]) * 1000,
            "score_archive_sign_ms": (t["completed"] - t["scoring"]) * 1000,
            "total_ms": (t["completed"] - t["claimed"]) * 1000,
            "model_runtime_ms": compute_ms, "predictions": float(predictions),
        })
        rows[-1]["overhead_ms"] = rows[-1]["total_ms"] - compute_ms
    return rows


def sum_runtime(run_id: str) -> float:
    from app.evidence.prediction_log import iter_records
    from app.settings import get_settings
    from app.storage import build_store, layout

    data = build_store(get_settings()).get(layout.run_key(run_id, layout.PREDICTIONS))
    return sum(float(r.get("runtime_ms") or 0) for r in iter_records(data))


def print_table(rows: list[dict[str, float]]) -> None:
    keys = list(rows[0])
    print(" ".join(f"{k:>22}" for k in keys))
    for row in rows:
        print(" ".join(f"{row[k]:>22.1f}" for k in keys))
    print("median " + json.dumps({k: round(statistics.median(r[k] for r in rows), 1)
                                   for k in keys}))


if __name__ == "__main__":
    main()
