"""Score one task of one run: match prediction-log records with held labels.

Rules (also in ``docs/metrics.md``):

* A window is *valid* when exactly one record names it, its status is ``ok`` and its answer passes
  :func:`app.scoring.predictions.parse_forecasts`. Anything else (``invalid``, ``timeout``,
  ``error``, no record, several records) leaves the window invalid: it is counted in the window
  coverage and listed with its reason, never filled in.
* Model metrics are computed on the valid windows; the seasonal naive baseline
  (``app.baselines.seasonal_naive``, the same file the baseline image runs) is scored on the same
  windows, so ``skill = 1 - metric / metric_of_seasonal_naive`` compares like with like.
* Future-only ranking: a window whose labels were available at or before ``frozen_at`` is scored
  but excluded from ranking. ``ranked`` holds the metrics over the remaining windows; ``all``
  holds them over every window. Without ``frozen_at`` every window is ranked.
* Budgets: a window violates the latency budget when its platform-measured ``runtime_ms`` is above
  ``latency_ms`` or it timed out; more than ``max_latency_violation_pct`` percent of the task's
  windows in violation fails the task (``latency_budget_exceeded``), as does a memory sample above
  the budget (``memory_budget_exceeded``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np

from app.baselines.seasonal_naive import seasonal_naive
from app.catalog.calendar import iso, parse_iso
from app.catalog.cards import ForecastRequest, TaskCard, Tier, WindowLabels
from app.scoring import SCORER_VERSION
from app.scoring.metrics import FloatArray, MetricParts, MetricValues, combine, window_parts
from app.scoring.predictions import ParsedForecast, parse_forecasts, quantile_key

WindowStatus = Literal["ok", "invalid", "timeout", "error", "missing"]
RECORD_STATUSES = frozenset({"ok", "invalid", "timeout", "error"})
SKILL_METRICS: tuple[str, ...] = ("mase", "smape", "wql")
_FAILURE_BY_STATUS = {
    "invalid": "invalid_predictions",
    "timeout": "timeout",
    "error": "model_error",
    "missing": "missing_predictions",
}


@dataclass(frozen=True)
class WindowScore:
    window_id: str
    status: WindowStatus
    problems: list[str]
    ranked: bool
    labels_available_at: str
    runtime_ms: float | None
    memory_mb: float | None
    model: MetricValues | None  # None unless the window is valid
    baseline: MetricValues


@dataclass(frozen=True)
class SubsetScore:
    """Metrics over a set of windows (all of them, or the ranked ones)."""

    window_ids: list[str]
    n_valid: int
    window_coverage: float | None  # valid / windows; None for an empty set
    complete: bool  # every window in the set is valid
    model: MetricValues | None
    baseline: MetricValues | None  # seasonal naive on the same valid windows
    skill: dict[str, float | None]  # 1 - model / baseline, per metric in SKILL_METRICS


@dataclass(frozen=True)
class Efficiency:
    """Platform-measured telemetry against the task's resource budget."""

    latency_budget_ms: float
    max_latency_violation_pct: float
    memory_budget_mb: int
    n_timed: int  # windows with a runtime_ms
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_max_ms: float | None
    latency_violations: int
    latency_violation_pct: float
    latency_budget_exceeded: bool
    memory_peak_mb: float | None
    memory_budget_exceeded: bool


@dataclass(frozen=True)
class TaskScore:
    task_id: str
    tier: Tier
    frozen_at: str | None
    windows: list[WindowScore]
    ranked_window_ids: list[str]
    excluded_window_ids: list[str]
    all: SubsetScore
    ranked: SubsetScore
    efficiency: Efficiency
    failure_reasons: list[str]
    unmatched_records: list[str]  # window ids of records that name no window of this task
    scorer_version: str = SCORER_VERSION

    @property
    def failed(self) -> bool:
        """A task fails on a budget breach; invalid windows only lower its coverage."""
        return self.efficiency.latency_budget_exceeded or self.efficiency.memory_budget_exceeded

    def to_dict(self) -> dict[str, Any]:
        return _json_dict(asdict(self))

    def flat_metrics(self) -> dict[str, float | None]:
        """``<subset>.<model|baseline|skill>.<metric>`` -> value, for repeats and reports."""
        flat: dict[str, float | None] = {}
        for name, subset in (("all", self.all), ("ranked", self.ranked)):
            flat[f"{name}.window_coverage"] = subset.window_coverage
            for metric in ("mase", "smape", "wql", "interval_coverage"):
                flat[f"{name}.model.{metric}"] = subset.model.get(metric) if subset.model else None
            for metric, value in subset.skill.items():
                flat[f"{name}.skill.{metric}"] = value
        return flat


def _finite(value: Any) -> Any:
    """JSON has no NaN: undefined numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _json_dict(document: dict[str, Any]) -> dict[str, Any]:
    cleaned: dict[str, Any] = _finite(document)
    return cleaned


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _baseline_arrays(card: TaskCard, request: ForecastRequest) -> ParsedForecast:
    levels = sorted(card.quantile_levels)
    means, quants = [], []
    for series in request.series:
        mean, q = seasonal_naive(series.target, card.horizon, card.seasonality, levels)
        means.append(mean)
        quants.append([q[quantile_key(level)] for level in levels])
    quantiles = np.array(quants, dtype=np.float64).transpose(1, 0, 2)
    return ParsedForecast(mean=np.array(means, dtype=np.float64), quantiles=quantiles)


def _parts(
    card: TaskCard, request: ForecastRequest, y: FloatArray, fc: ParsedForecast
) -> MetricParts:
    histories = [s.target for s in request.series]
    levels = sorted(card.quantile_levels)
    return window_parts(y, fc.mean, fc.quantiles, histories, card.seasonality, levels)


def _label_matrix(request: ForecastRequest, labels: WindowLabels, horizon: int) -> FloatArray:
    rows = [labels.targets[s.item_id] for s in request.series]
    if any(len(r) != horizon for r in rows):
        raise ValueError(f"labels of {request.window_id} do not have {horizon} values per series")
    return np.array(rows, dtype=np.float64)


def _judge(
    card: TaskCard, request: ForecastRequest, records: list[Mapping[str, Any]]
) -> tuple[WindowStatus, list[str], ParsedForecast | None]:
    """Decide a window's status from its records; parse the answer when it is ``ok``."""
    if not records:
        return "missing", ["no prediction record for this window"], None
    if len(records) > 1:
        return "invalid", [f"{len(records)} prediction records for one window"], None
    record = records[0]
    status = record.get("status")
    if status not in RECORD_STATUSES:
        return "invalid", [f"unknown record status {status!r}"], None
    if status != "ok":
        return status, [str(record.get("reason") or f"record status {status}")], None
    answer = record.get("answer")
    if not isinstance(answer, Mapping) or answer.get("type") != "prediction":
        return "invalid", ["answer is not a prediction message"], None
    if "request_id" in record and answer.get("request_id") != record["request_id"]:
        return "invalid", ["answer request_id does not match the request"], None
    parsed, problems = parse_forecasts(card, request, answer.get("forecasts"))
    return ("ok", [], parsed) if parsed is not None else ("invalid", problems, None)


def _skill(model: MetricValues | None, baseline: MetricValues | None) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for metric in SKILL_METRICS:
        m = model.get(metric) if model else None
        b = baseline.get(metric) if baseline else None
        out[metric] = None if m is None or b is None or b == 0 else 1.0 - m / b
    return out


def _subset(ids: list[str], valid: dict[str, tuple[MetricParts, MetricParts]]) -> SubsetScore:
    chosen = [valid[w] for w in ids if w in valid]
    model = combine(p for p, _ in chosen) if chosen else None
    baseline = combine(b for _, b in chosen) if chosen else None
    return SubsetScore(
        window_ids=list(ids),
        n_valid=len(chosen),
        window_coverage=len(chosen) / len(ids) if ids else None,
        complete=len(chosen) == len(ids),
        model=model,
        baseline=baseline,
        skill=_skill(model, baseline),
    )


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _efficiency(card: TaskCard, windows: list[WindowScore]) -> Efficiency:
    budget = card.resource_budget
    runtimes = [w.runtime_ms for w in windows if w.runtime_ms is not None]
    memory = [w.memory_mb for w in windows if w.memory_mb is not None]
    violations = sum(
        1
        for w in windows
        if w.status == "timeout" or (w.runtime_ms is not None and w.runtime_ms > budget.latency_ms)
    )
    pct = 100.0 * violations / len(windows) if windows else 0.0
    peak = max(memory) if memory else None
    return Efficiency(
        latency_budget_ms=budget.latency_ms,
        max_latency_violation_pct=budget.max_latency_violation_pct,
        memory_budget_mb=budget.memory_mb,
        n_timed=len(runtimes),
        latency_p50_ms=_percentile(runtimes, 50),
        latency_p95_ms=_percentile(runtimes, 95),
        latency_max_ms=max(runtimes) if runtimes else None,
        latency_violations=violations,
        latency_violation_pct=pct,
        latency_budget_exceeded=pct > budget.max_latency_violation_pct,
        memory_peak_mb=peak,
        memory_budget_exceeded=peak is not None and peak > budget.memory_mb,
    )


def _failure_reasons(windows: list[WindowScore], eff: Efficiency) -> list[str]:
    statuses = {w.status for w in windows}
    reasons = [reason for status, reason in _FAILURE_BY_STATUS.items() if status in statuses]
    if eff.latency_budget_exceeded:
        reasons.append("latency_budget_exceeded")
    if eff.memory_budget_exceeded:
        reasons.append("memory_budget_exceeded")
    return reasons


def _is_ranked(labels: WindowLabels, frozen_at: datetime | None) -> bool:
    return frozen_at is None or parse_iso(labels.available_at) > frozen_at


def _group_records(
    task_id: str, records: Iterable[Mapping[str, Any]]
) -> dict[str, list[Mapping[str, Any]]]:
    """Records by window id; a record of another task is keyed ``task:window`` so it never
    matches a window here and is reported as unmatched."""
    by_window: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        key = str(record.get("window_id"))
        if record.get("task_id", task_id) != task_id:
            key = f"{record.get('task_id')}:{key}"
        by_window[key].append(record)
    return by_window


def _score_window(
    card: TaskCard,
    request: ForecastRequest,
    labels: WindowLabels,
    records: list[Mapping[str, Any]],
    frozen_at: datetime | None,
) -> tuple[WindowScore, tuple[MetricParts, MetricParts] | None]:
    """The window's score, and its (model, baseline) parts when the window is valid."""
    y = _label_matrix(request, labels, card.horizon)
    status, problems, parsed = _judge(card, request, records)
    baseline = _parts(card, request, y, _baseline_arrays(card, request))
    model = _parts(card, request, y, parsed) if parsed is not None else None
    only = records[0] if len(records) == 1 else {}
    window = WindowScore(
        window_id=request.window_id,
        status=status,
        problems=problems,
        ranked=_is_ranked(labels, frozen_at),
        labels_available_at=labels.available_at,
        runtime_ms=_number(only.get("runtime_ms")),
        memory_mb=_number(only.get("memory_mb")),
        model=combine([model]) if model is not None else None,
        baseline=combine([baseline]),
    )
    return window, ((model, baseline) if model is not None else None)


def score_task(
    card: TaskCard,
    requests: Sequence[ForecastRequest],
    labels: Mapping[str, WindowLabels],
    records: Iterable[Mapping[str, Any]],
    frozen_at: datetime | None,
) -> TaskScore:
    """Score one run of one task. ``records`` are prediction-log records of this task.

    ``frozen_at`` must be timezone-aware; ``None`` ranks every window (staff recomputation).
    """
    if frozen_at is not None and frozen_at.tzinfo is None:
        raise ValueError("frozen_at must be timezone-aware")
    by_window = _group_records(card.task_id, records)
    windows: list[WindowScore] = []
    valid: dict[str, tuple[MetricParts, MetricParts]] = {}
    for request in requests:
        recs = by_window.pop(request.window_id, [])
        window, parts = _score_window(card, request, labels[request.window_id], recs, frozen_at)
        windows.append(window)
        if parts is not None:
            valid[request.window_id] = parts
    ranked_ids = [w.window_id for w in windows if w.ranked]
    excluded_ids = [w.window_id for w in windows if not w.ranked]
    eff = _efficiency(card, windows)
    return TaskScore(
        task_id=card.task_id,
        tier=card.tier,
        frozen_at=iso(frozen_at) if frozen_at is not None else None,
        windows=windows,
        ranked_window_ids=ranked_ids,
        excluded_window_ids=excluded_ids,
        all=_subset([w.window_id for w in windows], valid),
        ranked=_subset(ranked_ids, valid),
        efficiency=eff,
        failure_reasons=_failure_reasons(windows, eff),
        unmatched_records=sorted(by_window),
    )


@dataclass(frozen=True)
class Spread:
    mean: float | None
    std: float | None  # sample standard deviation (ddof=1); 0.0 for a single value
    n: int  # repeats in which the metric was defined


@dataclass(frozen=True)
class RepeatSummary:
    """Mean and standard deviation per metric over determinism repeats of one task."""

    task_id: str
    n_repeats: int
    metrics: dict[str, Spread]  # keys of TaskScore.flat_metrics()

    def to_dict(self) -> dict[str, Any]:
        return _json_dict(asdict(self))


def _spread(values: list[float]) -> Spread:
    if not values:
        return Spread(mean=None, std=None, n=0)
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return Spread(mean=float(np.mean(values)), std=std, n=len(values))


def score_repeats(scores: Sequence[TaskScore]) -> RepeatSummary:
    """Summarise determinism repeats of one task. Metrics undefined in a repeat are left out."""
    if not scores:
        raise ValueError("no repeats to summarise")
    if len({s.task_id for s in scores}) != 1:
        raise ValueError("repeats must all be of one task")
    flats = [s.flat_metrics() for s in scores]
    metrics = {
        key: _spread([v for f in flats if (v := f.get(key)) is not None]) for key in flats[0]
    }
    return RepeatSummary(task_id=scores[0].task_id, n_repeats=len(scores), metrics=metrics)


def records_from_predictions(
    task_id: str, predictions: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Turn a self-attested ``[{"window_id", "forecasts"}]`` list into log-shaped records.

    Submitter-reported ``runtime_ms`` / ``memory_mb`` are carried over when present; the
    capability vector of a ``self_attested`` report flags the E they produce as not comparable.
    """
    return [
        {
            "task_id": task_id,
            "window_id": p.get("window_id"),
            "status": "ok",
            "answer": {"type": "prediction", "forecasts": p.get("forecasts")},
            **{k: p[k] for k in ("runtime_ms", "memory_mb") if k in p},
        }
        for p in predictions
    ]
