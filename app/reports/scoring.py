"""From prediction-log records to the report's numbers: per-task scores (mean and std over
determinism repeats), latency and memory figures, and the capability vector.

Used by the worker pipeline after a run and by recompute (API and ``future-ts recompute-metric``),
so a recomputed score is computed by exactly the same code from the archived records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.catalog import Catalog
from app.scoring.capability import CapabilityVector, capability_vector
from app.scoring.scorer import TaskScore, score_repeats, score_task


@dataclass(frozen=True)
class TaskPlan:
    """Which attempts of a task count for its score (the main run and any repeats); a
    determinism probe's attempt is logged but never scored."""

    task_id: str
    scored_attempts: list[int]


@dataclass(frozen=True)
class RunScores:
    scores: list[TaskScore]  # one per task: its first scored attempt
    metrics: dict[str, Any]  # task -> {metric: {"mean", "std", "n"}}
    task_scores: dict[str, Any]  # task -> full TaskScore of the first scored attempt
    capability: CapabilityVector


def records_by_task_attempt(records: Iterable[Mapping[str, Any]]
                            ) -> dict[str, dict[int, list[Mapping[str, Any]]]]:
    out: dict[str, dict[int, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        out[str(record.get("task_id"))][int(record.get("attempt") or 0)].append(record)
    return out


def _metric_table(scores: Sequence[TaskScore]) -> dict[str, Any]:
    if len(scores) == 1:
        return {k: {"mean": v, "std": None, "n": 1 if v is not None else 0}
                for k, v in scores[0].flat_metrics().items()}
    summary = score_repeats(scores)
    return {k: {"mean": s.mean, "std": s.std, "n": s.n} for k, s in summary.metrics.items()}


def score_run(
    catalog: Catalog, plans: Sequence[TaskPlan], records: Iterable[Mapping[str, Any]],
    frozen_at: datetime | None, provenance: str,
) -> RunScores:
    grouped = records_by_task_attempt(records)
    firsts: list[TaskScore] = []
    metrics: dict[str, Any] = {}
    full: dict[str, Any] = {}
    for plan in plans:
        card = catalog.card(plan.task_id)
        requests, labels = catalog.requests(plan.task_id), catalog.labels(plan.task_id)
        attempts = plan.scored_attempts or [0]
        scores = [score_task(card, requests, labels, grouped[plan.task_id][a], frozen_at)
                  for a in attempts]
        firsts.append(scores[0])
        metrics[plan.task_id] = {"repeats": len(scores), **_metric_table(scores)}
        full[plan.task_id] = scores[0].to_dict()
    vector = capability_vector(firsts, provenance=provenance)  # type: ignore[arg-type]
    return RunScores(firsts, metrics, full, vector)


def metric_differences(old: Mapping[str, Any], new: Mapping[str, Any], tolerance: float = 1e-9
                       ) -> list[str]:
    """Human-readable differences between two ``metrics`` tables (empty when they agree)."""
    out: list[str] = []
    for task in sorted(set(old) | set(new)):
        a, b = old.get(task, {}), new.get(task, {})
        for key in sorted(set(a) | set(b)):
            va, vb = a.get(key), b.get(key)
            if isinstance(va, dict) and isinstance(vb, dict):
                va, vb = va.get("mean"), vb.get("mean")
            if va == vb:
                continue
            if isinstance(va, int | float) and isinstance(vb, int | float) and \
                    abs(va - vb) <= tolerance * max(1.0, abs(va)):
                continue
            out.append(f"{task} {key}: {va} -> {vb}")
    return out
