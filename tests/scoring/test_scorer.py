"""score_task: coverage, invalid windows, skill, future-only ranking, budgets, repeats."""

from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest

from app.catalog import Catalog
from app.catalog.calendar import parse_iso
from app.scoring.scorer import (
    TaskScore,
    records_from_predictions,
    score_repeats,
    score_task,
)
from tests.scoring.conftest import naive_records, perfect_records

AFTER_CUT = datetime(2026, 12, 1, tzinfo=UTC)


def _score(
    catalog: Catalog, task_id: str, records: list[dict[str, Any]], frozen_at: datetime | None = None
) -> TaskScore:
    return score_task(
        catalog.card(task_id),
        catalog.requests(task_id),
        catalog.labels(task_id),
        records,
        frozen_at,
    )


@pytest.mark.parametrize("task_id", ["sunspots-yearly", "us-macro-rates-quarterly", "co2-weekly"])
def test_seasonal_naive_has_zero_skill_and_full_coverage(catalog: Catalog, task_id: str) -> None:
    score = _score(catalog, task_id, naive_records(catalog, task_id))
    assert score.all.window_coverage == 1.0 and score.all.complete
    assert score.all.skill == {"mase": 0.0, "smape": 0.0, "wql": 0.0}
    assert score.all.model == score.all.baseline
    assert score.failure_reasons == [] and score.unmatched_records == []
    assert score.ranked_window_ids == [w.window_id for w in catalog.card(task_id).windows]


def test_a_perfect_forecast(catalog: Catalog) -> None:
    score = _score(catalog, "nile-yearly", perfect_records(catalog, "nile-yearly"))
    model = score.all.model
    assert model is not None
    assert (model.mase, model.smape, model.wql, model.interval_coverage) == (0.0, 0.0, 0.0, 1.0)
    assert score.all.skill == {"mase": 1.0, "smape": 1.0, "wql": 1.0}


def test_future_only_ranking(catalog: Catalog) -> None:
    task_id = "co2-weekly"
    score = _score(catalog, task_id, naive_records(catalog, task_id), AFTER_CUT)
    labels = catalog.labels(task_id)
    assert score.excluded_window_ids == [
        w for w, lab in labels.items() if parse_iso(lab.available_at) <= AFTER_CUT
    ]
    assert score.ranked_window_ids == [
        w for w, lab in labels.items() if parse_iso(lab.available_at) > AFTER_CUT
    ]
    assert score.ranked_window_ids and score.excluded_window_ids
    assert score.ranked.model is not None and score.ranked.model.n_windows == 4
    assert score.all.model is not None and score.all.model.n_windows == 8
    assert [w.window_id for w in score.windows if w.ranked] == score.ranked_window_ids
    # Labels available exactly at frozen_at count as seen.
    at = parse_iso(labels[score.ranked_window_ids[0]].available_at)
    assert score.ranked_window_ids[0] in _score(catalog, task_id, [], at).excluded_window_ids
    # Historical tiers: every window's labels were public long before a 2026 freeze.
    nile = _score(catalog, "nile-yearly", naive_records(catalog, "nile-yearly"), AFTER_CUT)
    assert nile.ranked_window_ids == [] and nile.ranked.model is None
    assert nile.ranked.window_coverage is None and nile.all.model is not None


def test_frozen_at_must_carry_a_timezone(catalog: Catalog) -> None:
    with pytest.raises(ValueError):
        _score(catalog, "nile-yearly", [], datetime(2020, 1, 1))


def _break(records: list[dict[str, Any]], i: int, how: str) -> None:
    record = records[i]
    forecast = record["answer"]["forecasts"][0]
    if how == "short":
        forecast["mean"] = forecast["mean"][:-1]
    elif how == "nan":
        forecast["mean"][0] = math.nan
    elif how == "missing_quantile":
        del forecast["quantiles"]["0.5"]
    elif how == "unknown_item":
        forecast["item_id"] = "nope"
    elif how == "request_id":
        record["request_id"], record["answer"]["request_id"] = "r1", "r2"
    elif how == "not_prediction":
        record["answer"] = {"type": "error", "message": "boom"}
    elif how == "extra_quantile":
        forecast["quantiles"]["0.95"] = forecast["mean"]
    elif how == "padded_key":
        forecast["quantiles"]["0.50"] = forecast["quantiles"].pop("0.5")
    elif how == "bool":
        forecast["mean"][0] = True


@pytest.mark.parametrize(
    "how",
    [
        "short",
        "nan",
        "missing_quantile",
        "extra_quantile",
        "padded_key",
        "unknown_item",
        "request_id",
        "not_prediction",
        "bool",
    ],
)
def test_invalid_answers_are_counted_never_fixed(catalog: Catalog, how: str) -> None:
    task_id = "danish-money-quarterly"
    records = naive_records(catalog, task_id)
    _break(records, 1, how)
    score = _score(catalog, task_id, records)
    broken = score.windows[1]
    assert broken.status == "invalid" and broken.problems and broken.model is None
    assert score.all.n_valid == 3 and score.all.window_coverage == 0.75 and not score.all.complete
    assert score.failure_reasons == ["invalid_predictions"]
    assert score.all.model is not None and score.all.model.n_windows == 3
    assert score.all.skill["mase"] == 0.0  # baseline is compared on the same three windows


def test_missing_duplicate_timeout_error_and_foreign_records(catalog: Catalog) -> None:
    task_id = "us-macro-rates-quarterly"
    records = naive_records(catalog, task_id)
    records[0] = {"window_id": records[0]["window_id"], "status": "timeout", "runtime_ms": 9000.0}
    records[1] = {"window_id": records[1]["window_id"], "status": "error", "reason": "crashed"}
    records.append(copy.deepcopy(records[2]))
    del records[3]
    records.append({**records[4], "task_id": "nile-yearly"})
    records.append({**records[4], "window_id": "not-a-window"})
    score = _score(catalog, task_id, records)
    statuses = [w.status for w in score.windows]
    assert statuses[:4] == ["timeout", "error", "invalid", "missing"]
    assert all(s == "ok" for s in statuses[4:])
    assert score.windows[1].problems == ["crashed"]
    assert "2 prediction records" in score.windows[2].problems[0]
    assert score.unmatched_records == ["nile-yearly:" + records[4]["window_id"], "not-a-window"]
    # The timeout is also a latency violation: 1 of 8 windows is above the 10% allowance.
    assert score.failure_reasons == [
        "invalid_predictions",
        "timeout",
        "model_error",
        "missing_predictions",
        "latency_budget_exceeded",
    ]
    assert score.all.window_coverage == 0.5


def test_latency_and_memory_budgets(catalog: Catalog) -> None:
    task_id = "nile-yearly"
    budget = catalog.card(task_id).resource_budget
    records = naive_records(catalog, task_id)
    for i, record in enumerate(records):
        record["runtime_ms"] = 100.0 * (i + 1)
        record["memory_mb"] = 200.0
    ok = _score(catalog, task_id, records)
    assert ok.efficiency.latency_p50_ms == pytest.approx(350.0)
    assert ok.efficiency.latency_p95_ms == pytest.approx(575.0)  # numpy linear percentile
    assert ok.efficiency.latency_violations == 0 and not ok.failed
    records[0]["runtime_ms"] = budget.latency_ms + 1  # 1 of 6 windows = 16.7% > 10%
    slow = _score(catalog, task_id, records)
    assert slow.efficiency.latency_violation_pct == pytest.approx(100 / 6)
    assert slow.efficiency.latency_budget_exceeded and slow.failed
    assert slow.failure_reasons == ["latency_budget_exceeded"]
    assert slow.all.complete, "a budget failure is not an invalid prediction"
    records[0]["runtime_ms"] = 1.0
    records[2]["memory_mb"] = budget.memory_mb + 1
    fat = _score(catalog, task_id, records)
    assert fat.failure_reasons == ["memory_budget_exceeded"] and fat.failed


def test_output_is_json(catalog: Catalog) -> None:
    records = naive_records(catalog, "sunspots-yearly")
    records[0]["status"] = "invalid"
    score = _score(catalog, "sunspots-yearly", records, AFTER_CUT)
    document = json.loads(json.dumps(score.to_dict(), allow_nan=False))
    assert document["ranked_window_ids"] == [] and len(document["excluded_window_ids"]) == 6
    assert document["ranked"]["model"] is None
    assert document["windows"][0]["status"] == "invalid"
    assert document["all"]["skill"]["wql"] == 0.0


def test_repeats_report_mean_and_std(catalog: Catalog) -> None:
    task_id = "nile-yearly"
    naive = _score(catalog, task_id, naive_records(catalog, task_id))
    perfect = _score(catalog, task_id, perfect_records(catalog, task_id))
    summary = score_repeats([naive, perfect])
    spread = summary.metrics["all.skill.mase"]
    assert (spread.mean, spread.std, spread.n) == (0.5, pytest.approx(math.sqrt(0.5)), 2)
    single = score_repeats([naive]).metrics["all.model.wql"]
    assert single.std == 0.0 and single.n == 1
    assert naive.all.model is not None
    assert score_repeats([naive]).metrics["ranked.model.mase"].mean == naive.all.model.mase
    json.dumps(summary.to_dict(), allow_nan=False)
    with pytest.raises(ValueError):
        score_repeats([naive, _score(catalog, "sunspots-yearly", [])])
    with pytest.raises(ValueError):
        score_repeats([])


def test_self_attested_predictions_score_like_log_records(catalog: Catalog) -> None:
    task_id = "elnino-nino12-monthly"
    records = naive_records(catalog, task_id)
    predictions = [
        {"window_id": r["window_id"], "forecasts": r["answer"]["forecasts"]} for r in records
    ]
    direct = _score(catalog, task_id, records)
    attested = _score(catalog, task_id, records_from_predictions(task_id, predictions))
    assert attested.all == direct.all
    assert attested.efficiency.n_timed == 0 and attested.efficiency.memory_peak_mb is None
    reported = [{**p, "runtime_ms": 12.0, "memory_mb": 64.0} for p in predictions]
    with_telemetry = _score(catalog, task_id, records_from_predictions(task_id, reported))
    assert with_telemetry.efficiency.latency_p95_ms == 12.0
    assert with_telemetry.efficiency.memory_peak_mb == 64.0
