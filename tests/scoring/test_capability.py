"""Capability vector: F, U, E, the declared gaps, and the tier-weighted headline."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from app.catalog import Catalog
from app.scoring.capability import (
    NOT_COVERED,
    TIER_WEIGHTS,
    capability_vector,
    task_skill,
    tier_weighted_score,
)
from app.scoring.scorer import TaskScore, score_task
from tests.scoring.conftest import naive_records, perfect_records

AFTER_CUT = datetime(2026, 12, 1, tzinfo=UTC)


def _scores(
    catalog: Catalog,
    kinds: dict[str, str],
    frozen_at: datetime | None = None,
    telemetry: dict[str, Any] | None = None,
) -> list[TaskScore]:
    out = []
    for task_id in catalog.task_ids():
        kind = kinds.get(catalog.card(task_id).tier, "naive")
        records = {"naive": naive_records, "perfect": perfect_records}[kind](catalog, task_id)
        for record in records:
            record.update(telemetry or {})
        out.append(
            score_task(
                catalog.card(task_id),
                catalog.requests(task_id),
                catalog.labels(task_id),
                records,
                frozen_at,
            )
        )
    return out


def test_weights_are_written_down() -> None:
    assert TIER_WEIGHTS == {"public_dev": 0.2, "blind_archive": 0.3, "live": 0.5}
    assert sum(TIER_WEIGHTS.values()) == pytest.approx(1.0)


def test_seasonal_naive_scores_zero(catalog: Catalog) -> None:
    vector = capability_vector(_scores(catalog, {}), provenance="sealed")
    assert vector.dimensions["F"].value == 0.0 and vector.dimensions["U"].value == 0.0
    assert vector.tier_weighted_score == 0.0
    assert vector.tiers_ranked == ["public_dev", "blind_archive", "live"]


def test_tier_weighting_arithmetic(catalog: Catalog) -> None:
    scores = _scores(catalog, {"public_dev": "perfect"})
    vector = capability_vector(scores, provenance="sealed")
    assert vector.dimensions["F"].value == pytest.approx(0.2)  # 0.2*1 + 0.3*0 + 0.5*0
    assert vector.tier_weighted_score == pytest.approx(0.2)
    assert tier_weighted_score(scores) == pytest.approx(0.2)
    live = capability_vector(_scores(catalog, {"live": "perfect"}), provenance="sealed")
    assert live.tier_weighted_score == pytest.approx(0.5)


def test_future_only_ranking_drops_tiers_without_ranked_windows(catalog: Catalog) -> None:
    scores = _scores(catalog, {"live": "perfect", "public_dev": "perfect"}, AFTER_CUT)
    vector = capability_vector(scores, provenance="sealed")
    assert vector.tiers_ranked == ["live"] and vector.tier_weights == {"live": 1.0}
    assert vector.tier_weighted_score == pytest.approx(1.0)  # only the rehearsal windows rank
    assert set(vector.tasks_not_ranked) == {
        t for t in catalog.task_ids() if catalog.card(t).tier != "live"
    }
    # Every window, with the contamination caveat: 0.2*1 + 0.3*0 + 0.5*1.
    assert vector.tier_weighted_score_all_windows == pytest.approx(0.7)


def test_skipping_a_window_scores_the_floor(catalog: Catalog) -> None:
    task_id = "nile-yearly"
    records = perfect_records(catalog, task_id)[1:]
    score = score_task(
        catalog.card(task_id), catalog.requests(task_id), catalog.labels(task_id), records, None
    )
    assert score.all.skill["mase"] == 1.0, "the answered windows alone look perfect"
    assert task_skill(score, "mase") == -1.0, "but an incomplete task gets the floor"


def test_efficiency_from_platform_telemetry(catalog: Catalog) -> None:
    scores = _scores(catalog, {}, telemetry={"runtime_ms": 500.0, "memory_mb": 256.0})
    e = capability_vector(scores, provenance="sealed").dimensions["E"]
    per_task = {
        s.task_id: 0.5 * ((1 - 500 / s.efficiency.latency_budget_ms) + (1 - 256 / 1024))
        for s in scores
    }
    assert e.status == "covered" and e.comparable_across_models
    assert e.value == pytest.approx(sum(per_task.values()) / len(per_task))
    attested = capability_vector(scores, provenance="self_attested").dimensions["E"]
    assert attested.provenance == "self_attested" and not attested.comparable_across_models
    missing = capability_vector(_scores(catalog, {}), provenance="sealed").dimensions["E"]
    assert missing.status == "not_covered" and missing.value is None and missing.reason


def test_uncovered_dimensions_are_declared_with_reasons(catalog: Catalog) -> None:
    vector = capability_vector(_scores(catalog, {}), provenance="sealed")
    for key in NOT_COVERED:
        dim = vector.dimensions[key]
        assert dim.status == "not_covered" and dim.value is None and dim.reason
    assert set(vector.dimensions) == {"F", "U", "E", *NOT_COVERED}
    coverage = vector.dimensions["U"].detail["interval_coverage"]
    assert set(coverage) == set(catalog.task_ids())
    json.dumps(vector.to_dict(), allow_nan=False)
