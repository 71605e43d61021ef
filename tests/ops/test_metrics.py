from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from app.runs.models import Run, RunStatus
from tests.ops.conftest import auth, finish, submit


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_read_the_database_at_scrape_time(client: TestClient, tokens: dict[str, str],
                                                  db_session: Session) -> None:
    before = _samples(client.get("/metrics").text)
    ok = submit(client, tokens["alice"])
    finish(db_session, ok["latest_run"]["id"], duration_s=42.0,
           summary={"latency_ms": {"p50": 10.0, "p95": 30.0, "p99": 50.0}})
    bad = submit(client, tokens["bob"])
    finish(db_session, bad["latest_run"]["id"], RunStatus.failed, failure_reason="oom",
           duration_s=3.0, summary={"latency_ms": {"task-a": {"p50": 20.0, "p95": 40.0,
                                                              "p99": 70.0}}})
    submit(client, tokens["alice"])
    # Every catalog task uses cpu-1c-1g; a staff rerun on the bigger class queues there.
    wide = submit(client, tokens["alice"])
    wide_run = db_session.get(Run, wide["latest_run"]["id"])
    assert wide_run is not None
    wide_run.hardware_class = "cpu-2c-4g"
    db_session.commit()

    r = client.get("/metrics")  # no token needed
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    now = _samples(r.text)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return now[key] - before.get(key, 0.0)

    assert now[("futurets_database_up", ())] == 1.0
    assert delta("futurets_queue_depth", hardware_class="cpu-1c-1g") == 1
    assert delta("futurets_queue_depth", hardware_class="cpu-2c-4g") == 1
    assert delta("futurets_runs", state="queued") == 2
    assert delta("futurets_runs", state="completed") == 1
    assert delta("futurets_runs", state="failed") == 1
    assert delta("futurets_run_failures_total", reason="oom") == 1
    assert ("futurets_run_failures_total", (("reason", "platform_error"),)) in now
    hist = dict(hardware_class="cpu-1c-1g", state="completed")
    assert delta("futurets_run_duration_seconds_bucket", le="30", **hist) == 0
    assert delta("futurets_run_duration_seconds_bucket", le="60", **hist) == 1
    assert delta("futurets_run_duration_seconds_gcount", **hist) == 1
    p95 = ("futurets_prediction_latency_seconds",
           (("hardware_class", "cpu-1c-1g"), ("quantile", "0.95")))
    worst = ("futurets_prediction_latency_max_seconds",
             (("hardware_class", "cpu-1c-1g"), ("quantile", "0.99")))
    if not any(k[0] == "futurets_prediction_latency_seconds" for k in before):
        assert abs(now[p95] - 0.035) < 1e-9  # median of 30 ms and 40 ms
        assert abs(now[worst] - 0.070) < 1e-9
    assert now[("futurets_queue_oldest_age_seconds", (("hardware_class", "cpu-1c-1g"),))] >= 0
    # Aggregates only: no author, submission or run appears anywhere.
    for secret in ("alice", "bob", ok["id"], ok["latest_run"]["id"], "prn_"):
        assert secret not in r.text


def test_metrics_without_finished_runs(client: TestClient, tokens: dict[str, str]) -> None:
    submit(client, tokens["alice"])
    text = client.get("/metrics", headers=auth(tokens["reader"])).text
    assert "futurets_queue_depth" in text and "futurets_runs" in text
