"""``GET /metrics``: Prometheus text format, read from the database at scrape time.

A custom collector runs a handful of aggregate queries per scrape, so the numbers are right no
matter how many API and worker processes there are (no per-process counters to add up). Every
label is a hardware class, a state, a failure reason or a quantile: no submission, run, author
or model appears. The endpoint is unauthenticated so that Prometheus can scrape it without a
token; it reveals only platform-wide load. Keep it off the public ingress if even that is too
much.

Run durations and prediction latencies cover runs finished in the last ``metrics_window_s``
seconds, so they are gauges (a gauge histogram for durations), not cumulative counters.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.engine import Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.deps import ClockDep, SessionDep, SettingsDep
from app.hardware import HARDWARE_CLASSES
from app.runs.models import TERMINAL_RUN, FailureReason, Run, RunStatus
from app.webhooks.models import DeliveryStatus, WebhookDelivery

router = APIRouter(tags=["operations"])

DURATION_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
                      7200.0, 21600.0)
LATENCY_QUANTILES = (("p50", "0.5"), ("p95", "0.95"), ("p99", "0.99"))
MAX_FINISHED_ROWS = 10_000  # bounds one scrape's work on a busy platform
# hardware class, state, started_at, finished_at, summary
FinishedRun = Row[str, str, datetime | None, datetime | None, dict[str, Any] | None]


class MetricsRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def queued_by_class(self) -> Sequence[Row[str, int, datetime]]:
        stmt = (select(Run.hardware_class, func.count(Run.id), func.min(Run.status_changed_at))
                .where(Run.status == RunStatus.queued.value).group_by(Run.hardware_class))
        return self.session.execute(stmt).all()

    def runs_by_state(self) -> dict[str, int]:
        stmt = select(Run.status, func.count(Run.id)).group_by(Run.status)
        return {str(s): int(n) for s, n in self.session.execute(stmt)}

    def failures_by_reason(self) -> dict[str, int]:
        stmt = (select(Run.failure_reason, func.count(Run.id))
                .where(Run.status == RunStatus.failed.value).group_by(Run.failure_reason))
        return {str(r or "unknown"): int(n) for r, n in self.session.execute(stmt)}

    def finished_since(self, since: datetime
                       ) -> Sequence[FinishedRun]:
        stmt = (select(Run.hardware_class, Run.status, Run.started_at, Run.finished_at,
                       Run.summary)
                .where(Run.finished_at >= since,
                       Run.status.in_([s.value for s in TERMINAL_RUN]))
                .order_by(Run.finished_at.desc()).limit(MAX_FINISHED_ROWS))
        return self.session.execute(stmt).all()

    def deliveries_by_status(self) -> dict[str, int]:
        stmt = (select(WebhookDelivery.status, func.count(WebhookDelivery.id))
                .group_by(WebhookDelivery.status))
        return {str(s): int(n) for s, n in self.session.execute(stmt)}


class DatabaseCollector(Collector):
    """Collects every family from the database; if the database fails, reports ``up 0``."""

    def __init__(self, session: Session, now: datetime, window_s: int) -> None:
        self.session = session
        self.now = now
        self.window_s = window_s

    def collect(self) -> Iterable[Metric]:
        try:
            families = list(self._families(MetricsRepository(self.session)))
            up = 1.0
        except SQLAlchemyError:
            self.session.rollback()
            families, up = [], 0.0
        yield GaugeMetricFamily("futurets_database_up",
                                "1 if the metrics queries succeeded on this scrape", value=up)
        yield from families

    def _families(self, repo: MetricsRepository) -> Iterator[Metric]:
        yield from self._queue(repo)
        yield _labelled(GaugeMetricFamily, "futurets_runs", "Runs by current state",
                        "state", _with_zeros(repo.runs_by_state(), [s.value for s in RunStatus]))
        yield _labelled(CounterMetricFamily, "futurets_run_failures",
                        "Failed runs by failure reason, since the platform started", "reason",
                        _with_zeros(repo.failures_by_reason(),
                                    [r.value for r in FailureReason if r.value != "cancelled"]))
        finished = repo.finished_since(self.now - timedelta(seconds=self.window_s))
        yield self._durations(finished)
        yield from self._latencies(finished)
        yield _labelled(GaugeMetricFamily, "futurets_webhook_deliveries",
                        "Webhook deliveries by status", "status",
                        _with_zeros(repo.deliveries_by_status(), [s.value for s in DeliveryStatus]))

    def _queue(self, repo: MetricsRepository) -> Iterator[Metric]:
        depth = GaugeMetricFamily("futurets_queue_depth", "Queued runs per hardware class",
                                  labels=["hardware_class"])
        age = GaugeMetricFamily("futurets_queue_oldest_age_seconds",
                                "Age of the oldest queued run per hardware class",
                                labels=["hardware_class"])
        rows = {r[0]: (int(r[1]), r[2]) for r in repo.queued_by_class()}
        for hw in sorted(set(HARDWARE_CLASSES) | set(rows)):
            count, oldest = rows.get(hw, (0, None))
            depth.add_metric([hw], count)
            age.add_metric([hw], (self.now - oldest).total_seconds() if oldest else 0.0)
        yield depth
        yield age

    def _durations(self, finished: Sequence[FinishedRun]) -> Metric:
        family = GaugeHistogramMetricFamily(
            "futurets_run_duration_seconds",
            f"Run durations (started to finished) of runs finished in the last "
            f"{self.window_s} s", labels=["hardware_class", "state"])
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for hw, state, started, ended, _ in finished:
            if started is not None and ended is not None:
                groups[(hw, state)].append(max(0.0, (ended - started).total_seconds()))
        for (hw, state), values in sorted(groups.items()):
            buckets = [(_le(b), float(sum(v <= b for v in values))) for b in DURATION_BUCKETS_S]
            buckets.append(("+Inf", float(len(values))))
            family.add_metric([hw, state], buckets, gsum_value=sum(values))
        return family

    def _latencies(self, finished: Sequence[FinishedRun]) -> Iterator[Metric]:
        typical = GaugeMetricFamily(
            "futurets_prediction_latency_seconds",
            f"Median over runs finished in the last {self.window_s} s of each run's own "
            "prediction latency quantile", labels=["hardware_class", "quantile"])
        worst = GaugeMetricFamily(
            "futurets_prediction_latency_max_seconds",
            f"Worst run's prediction latency quantile over the last {self.window_s} s",
            labels=["hardware_class", "quantile"])
        per: dict[tuple[str, str], list[float]] = defaultdict(list)
        for hw, _state, _s, _e, summary in finished:
            for block in _latency_blocks(summary):
                for key, quantile in LATENCY_QUANTILES:
                    value = block.get(key)
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        per[(hw, quantile)].append(float(value) / 1000.0)
        for (hw, quantile), values in sorted(per.items()):
            typical.add_metric([hw, quantile], statistics.median(values))
            worst.add_metric([hw, quantile], max(values))
        yield typical
        yield worst


def _latency_blocks(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``summary.latency_ms`` as ``{"p50":..}``, or per task ``{task: {"p50":..}}``; absent ok."""
    latency = (summary or {}).get("latency_ms")
    if not isinstance(latency, dict):
        return []
    if any(k in latency for k, _ in LATENCY_QUANTILES):
        return [latency]
    return [v for v in latency.values() if isinstance(v, dict)]


def _with_zeros(counts: dict[str, int], known: Iterable[str]) -> dict[str, int]:
    return {**dict.fromkeys(known, 0), **counts}


def _labelled(kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, doc: str,
              label: str, values: dict[str, int]) -> Metric:
    family = kind(name, doc, labels=[label])
    for key in sorted(values):
        family.add_metric([key], values[key])
    return family


def _le(bound: float) -> str:
    return f"{bound:g}"


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}},
                             "description": "Prometheus text format"}})
def metrics(session: SessionDep, clock: ClockDep, settings: SettingsDep) -> Response:
    """Prometheus metrics (no authentication; aggregate only, nothing per author or run)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(session, clock.now(), settings.metrics_window_s))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
