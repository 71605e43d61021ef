"""The capability vector of a report, and the headline ``tier_weighted_score``.

Definitions (also in ``docs/metrics.md``):

* A task's **skill** on a metric is ``1 - metric / metric_of_seasonal_naive`` over its ranked
  windows (``TaskScore.ranked``), clipped to ``[-1, 1]``. A task with no ranked window is left
  out. A task whose ranked windows are not all valid, or that broke its resource budget, gets the
  floor ``-1``: skipping a window can never score better than answering it.
* **F** (point-forecast skill) = tier-weighted mean of the tasks' MASE skill.
* **U** (probabilistic skill) = tier-weighted mean of the tasks' WQL skill. Interval coverage is
  reported in U's detail as a diagnostic, not scored.
* **E** (efficiency) per task = mean of ``clip(1 - p95_latency / latency_ms, 0, 1)`` and
  ``clip(1 - peak_memory / memory_mb, 0, 1)`` (whichever was measured), 0 when the task broke a
  budget; E = unweighted mean over tasks with telemetry. Only platform-measured telemetry from
  a sealed run is comparable across models: E of a ``self_attested`` report is flagged with that
  provenance and ``comparable_across_models = false``.
* The tier weight of a tier is ``TIER_WEIGHTS[tier]`` renormalised over the tiers that have at
  least one ranked task; inside a tier tasks weigh equally.
* ``tier_weighted_score = 0.5 * F + 0.5 * U``. E is not in the headline: it describes cost on
  one hardware class, not forecast quality.
* ``*_all_windows`` values use every window (``TaskScore.all``) instead; they include windows
  whose labels the model could have seen in training and must be read as such.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from app.catalog.cards import TIERS, Tier
from app.scoring.scorer import SubsetScore, TaskScore

CAPABILITY_VERSION = "future-ts-capability/1"
Provenance = Literal["sealed", "self_attested"]
Subset = Literal["ranked", "all"]

TIER_WEIGHTS: dict[Tier, float] = {"public_dev": 0.2, "blind_archive": 0.3, "live": 0.5}
HEADLINE_WEIGHTS: dict[str, float] = {"F": 0.5, "U": 0.5}
SKILL_FLOOR = -1.0
SKILL_CEILING = 1.0

DIMENSION_NAMES: dict[str, str] = {
    "F": "point-forecast skill",
    "U": "probabilistic skill",
    "E": "efficiency",
}
NOT_COVERED: dict[str, tuple[str, str]] = {
    "R": (
        "robustness",
        "future-ts-v1 has no windows labelled by regime or distribution shift and no perturbed "
        "inputs, so a robustness score would be invented",
    ),
    "C": (
        "calibration",
        "only one central interval (lowest to highest quantile level) is scored; its empirical "
        "coverage is a diagnostic in U's detail, but a few hundred label points per task cannot "
        "rank calibration (PIT-based calibration needs far more windows)",
    ),
    "A": (
        "adaptation",
        "the catalog provides no fine-tuning split and no adaptation budget: every task is "
        "forecast from the given context alone",
    ),
    "X": (
        "context and retrieval use",
        "no task provides covariates or a retrieval snapshot (retrieval_snapshot is null)",
    ),
}


@dataclass(frozen=True)
class Dimension:
    key: str
    name: str
    status: Literal["covered", "not_covered"]
    value: float | None = None
    value_all_windows: float | None = None
    provenance: Provenance | None = None
    comparable_across_models: bool = False
    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CapabilityVector:
    provenance: Provenance
    dimensions: dict[str, Dimension]
    tier_weighted_score: float | None
    tier_weighted_score_all_windows: float | None
    tier_weights: dict[str, float]  # the weights actually applied (renormalised)
    tiers_ranked: list[str]
    tasks_ranked: list[str]
    tasks_not_ranked: list[str]  # every window's labels were available before frozen_at
    version: str = CAPABILITY_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clip(value: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, value))


def _subset(score: TaskScore, subset: Subset) -> SubsetScore:
    return score.ranked if subset == "ranked" else score.all


def task_skill(score: TaskScore, metric: str, subset: Subset = "ranked") -> float | None:
    """The clipped skill that enters F / U, with the floor for incomplete or failed tasks."""
    part = _subset(score, subset)
    if not part.window_ids:
        return None
    if score.failed or not part.complete:
        return SKILL_FLOOR
    skill = part.skill.get(metric)
    return None if skill is None else _clip(skill, SKILL_FLOOR, SKILL_CEILING)


def tier_weights(tiers: Iterable[str]) -> dict[str, float]:
    """``TIER_WEIGHTS`` renormalised over the tiers present."""
    given = set(tiers)
    present = [t for t in TIERS if t in given]
    total = sum(TIER_WEIGHTS[t] for t in present)
    return {t: TIER_WEIGHTS[t] / total for t in present} if total else {}


def tier_weighted_mean(values: Iterable[tuple[str, float]]) -> float | None:
    by_tier: dict[str, list[float]] = defaultdict(list)
    for tier, value in values:
        by_tier[tier].append(value)
    weights = tier_weights(by_tier)
    if not weights:
        return None
    return sum(w * sum(by_tier[t]) / len(by_tier[t]) for t, w in weights.items())


def skill_value(
    scores: Sequence[TaskScore], metric: str, subset: Subset = "ranked"
) -> float | None:
    """Tier-weighted mean of the tasks' clipped skill on ``metric`` (F for MASE, U for WQL)."""
    values = ((s.tier, task_skill(s, metric, subset)) for s in scores)
    return tier_weighted_mean((t, v) for t, v in values if v is not None)


def _skill_dimension(
    key: str,
    metric: str,
    scores: Sequence[TaskScore],
    provenance: Provenance,
    **detail: Any,
) -> Dimension:
    per_task = {
        s.task_id: {
            "tier": s.tier,
            "ranked": task_skill(s, metric, "ranked"),
            "all": task_skill(s, metric, "all"),
        }
        for s in scores
    }
    return Dimension(
        key=key,
        name=DIMENSION_NAMES[key],
        status="covered",
        value=skill_value(scores, metric, "ranked"),
        value_all_windows=skill_value(scores, metric, "all"),
        provenance=provenance,
        comparable_across_models=True,
        detail={"metric": metric, "per_task": per_task, **detail},
    )


def _coverage_diagnostic(scores: Sequence[TaskScore]) -> dict[str, Any]:
    def cov(part: SubsetScore) -> float | None:
        return part.model.interval_coverage if part.model else None

    return {s.task_id: {"ranked": cov(s.ranked), "all": cov(s.all)} for s in scores}


def task_efficiency(score: TaskScore) -> float | None:
    eff = score.efficiency
    if score.failed:
        return 0.0
    parts = []
    if eff.latency_p95_ms is not None:
        parts.append(_clip(1.0 - eff.latency_p95_ms / eff.latency_budget_ms, 0.0, 1.0))
    if eff.memory_peak_mb is not None:
        parts.append(_clip(1.0 - eff.memory_peak_mb / eff.memory_budget_mb, 0.0, 1.0))
    return sum(parts) / len(parts) if parts else None


def _efficiency_dimension(scores: Sequence[TaskScore], provenance: Provenance) -> Dimension:
    per_task = {s.task_id: task_efficiency(s) for s in scores}
    measured = [v for v in per_task.values() if v is not None]
    if not measured:
        return Dimension(
            key="E",
            name=DIMENSION_NAMES["E"],
            status="not_covered",
            provenance=provenance,
            reason="no runtime_ms or memory_mb was measured for this report",
        )
    value = sum(measured) / len(measured)
    return Dimension(
        key="E",
        name=DIMENSION_NAMES["E"],
        status="covered",
        value=value,
        value_all_windows=value,
        provenance=provenance,
        comparable_across_models=provenance == "sealed",
        reason=None if provenance == "sealed" else "self-attested telemetry: not comparable",
        detail={"per_task": per_task},
    )


def capability_vector(scores: Sequence[TaskScore], *, provenance: Provenance) -> CapabilityVector:
    """The vector for one report (all its task scores)."""
    f = _skill_dimension("F", "mase", scores, provenance)
    u = _skill_dimension(
        "U", "wql", scores, provenance, interval_coverage=_coverage_diagnostic(scores)
    )
    dims = {"F": f, "U": u, "E": _efficiency_dimension(scores, provenance)}
    for key, (name, reason) in NOT_COVERED.items():
        dims[key] = Dimension(key=key, name=name, status="not_covered", reason=reason)
    ranked_tasks = [s for s in scores if s.ranked_window_ids]
    return CapabilityVector(
        provenance=provenance,
        dimensions=dims,
        tier_weighted_score=_headline(f.value, u.value),
        tier_weighted_score_all_windows=_headline(f.value_all_windows, u.value_all_windows),
        tier_weights=tier_weights(s.tier for s in ranked_tasks),
        tiers_ranked=[t for t in TIERS if any(s.tier == t for s in ranked_tasks)],
        tasks_ranked=[s.task_id for s in ranked_tasks],
        tasks_not_ranked=[s.task_id for s in scores if not s.ranked_window_ids],
    )


def _headline(f: float | None, u: float | None) -> float | None:
    if f is None or u is None:
        return None
    return HEADLINE_WEIGHTS["F"] * f + HEADLINE_WEIGHTS["U"] * u


def tier_weighted_score(scores: Sequence[TaskScore], subset: Subset = "ranked") -> float | None:
    """The headline alone: ``0.5 * F + 0.5 * U`` over the ``subset`` windows."""
    return _headline(skill_value(scores, "mase", subset), skill_value(scores, "wql", subset))
