"""validate_submission: the seed's surface rules and the self-attested path."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.catalog import Catalog
from app.validation import SubmissionInput, validate_self_attested_predictions, validate_submission
from tests.scoring.conftest import naive_records

META: dict[str, Any] = {
    "model_name": "naive-1",
    "organization": "Example Lab",
    "training_cutoff": "2024-01-01T00:00:00Z",
    "frozen_at": "2024-06-01T00:00:00Z",
    "pretraining_manifest": {"datasets": ["m4", {"name": "electricity"}]},
}
IMAGE = "127.0.0.1:5000/naive@sha256:" + "a" * 64


def _codes(problems: list[Any]) -> list[str]:
    return sorted(p.code for p in problems)


def _sealed(**over: Any) -> dict[str, Any]:
    return {
        "tier": "blind_archive",
        "execution_mode": "sealed",
        "suite": "blind_archive",
        "image": IMAGE,
        **META,
        **over,
    }


def _predictions(catalog: Catalog, task_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {
        t: [
            {"window_id": r["window_id"], "forecasts": r["answer"]["forecasts"]}
            for r in naive_records(catalog, t)
        ]
        for t in task_ids
    }


def test_a_good_sealed_submission(catalog: Catalog) -> None:
    assert validate_submission(_sealed(), catalog) == []
    nested = {
        "tier": "live",
        "execution_mode": "sealed",
        "tasks": ["co2-weekly"],
        "image": IMAGE,
        "metadata": META,
    }
    assert validate_submission(nested, catalog) == []


def test_a_good_self_attested_submission(catalog: Catalog) -> None:
    tasks = catalog.suite("public_dev")
    sub = SubmissionInput(
        tier="public_dev",
        execution_mode="self_attested",
        suite="public_dev",
        predictions=_predictions(catalog, tasks),
        **META,
    )
    assert validate_submission(sub, catalog) == []


def test_self_attested_only_for_public_dev(catalog: Catalog) -> None:
    sub = _sealed(
        execution_mode="self_attested",
        image=None,
        predictions=_predictions(catalog, catalog.suite("blind_archive")),
    )
    codes = _codes(validate_submission(sub, catalog))
    assert codes == ["requires_sealed"] * 3 + ["self_attested_not_allowed"]


def test_task_tiers_must_match(catalog: Catalog) -> None:
    sub = _sealed(suite=None, tasks=["nile-yearly", "co2-weekly", "sunspots-yearly"])
    assert _codes(validate_submission(sub, catalog)) == ["tier_mismatch", "tier_mismatch"]
    attested = {
        "tier": "public_dev",
        "execution_mode": "self_attested",
        "tasks": ["co2-weekly"],
        **META,
        "predictions": _predictions(catalog, ["co2-weekly"]),
    }
    assert _codes(validate_submission(attested, catalog)) == ["requires_sealed", "tier_mismatch"]


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"model_name": ""}, "missing_metadata"),
        ({"organization": None}, "missing_metadata"),
        ({"frozen_at": None}, "missing_metadata"),
        ({"training_cutoff": "yesterday"}, "invalid_datetime"),
        ({"frozen_at": "2024-06-01T00:00:00"}, "invalid_datetime"),
        ({"frozen_at": "2023-06-01T00:00:00Z"}, "frozen_before_training_cutoff"),
        ({"pretraining_manifest": None}, "pretraining_manifest_required"),
        ({"pretraining_manifest": {"data": []}}, "invalid_pretraining_manifest"),
        ({"pretraining_manifest": {"datasets": [3]}}, "invalid_pretraining_manifest"),
        ({"pretraining_manifest": {"datasets": []}}, "pretraining_manifest_required"),
        ({"tier": "gold"}, "unknown_tier"),
        ({"image": None}, "image_required"),
        ({"predictions": {}}, "predictions_not_allowed"),
        ({"suite": "nope"}, "unknown_suite"),
        ({"tasks": ["nope"]}, "unknown_task"),
        ({"suite": None}, "no_tasks"),
    ],
)
def test_single_rule_violations(catalog: Catalog, over: dict[str, Any], code: str) -> None:
    problems = validate_submission(_sealed(**over), catalog)
    assert code in _codes(problems)
    assert all(p.message for p in problems)


def test_execution_mode_must_be_known(catalog: Catalog) -> None:
    codes = _codes(validate_submission(_sealed(execution_mode="trust-me"), catalog))
    assert "unknown_execution_mode" in codes and "requires_sealed" in codes


def test_frozen_at_cannot_follow_submission(catalog: Catalog) -> None:
    received = datetime(2024, 5, 1, tzinfo=UTC)
    codes = _codes(validate_submission(_sealed(), catalog, received_at=received))
    assert codes == ["frozen_after_submission"]


def test_the_api_schema_shape_is_accepted(catalog: Catalog) -> None:
    """What ``SubmissionCreate.model_dump(mode="json")`` gives: nested metadata, a name list."""
    meta = {k: v for k, v in META.items() if k != "pretraining_manifest"}
    body = {
        "tier": "blind_archive",
        "execution_mode": "sealed",
        "tasks": ["nile-yearly"],
        "suite": None,
        "image": IMAGE,
        "predictions": None,
        "metadata": {**meta, "pretraining_data_manifest": ["none"], "description": None},
    }
    assert validate_submission(body, catalog) == []
    body["metadata"]["pretraining_data_manifest"] = []
    assert _codes(validate_submission(body, catalog)) == ["pretraining_manifest_required"]


def test_public_dev_needs_no_manifest(catalog: Catalog) -> None:
    sub = {
        "tier": "public_dev",
        "execution_mode": "sealed",
        "suite": "public_dev",
        "image": IMAGE,
        **META,
        "pretraining_manifest": None,
    }
    assert validate_submission(sub, catalog) == []


def test_self_attested_needs_predictions_and_no_image(catalog: Catalog) -> None:
    sub = {
        "tier": "public_dev",
        "execution_mode": "self_attested",
        "tasks": ["sunspots-yearly"],
        "image": IMAGE,
        **META,
    }
    assert _codes(validate_submission(sub, catalog)) == [
        "image_not_allowed",
        "predictions_required",
    ]
    sub = {**sub, "image": None, "predictions": {"nile-yearly": []}}
    assert _codes(validate_submission(sub, catalog)) == [
        "missing_predictions",
        "unexpected_predictions",
    ]


def test_self_attested_prediction_shapes(catalog: Catalog) -> None:
    task_id = "danish-money-quarterly"
    card, requests = catalog.card(task_id), catalog.requests(task_id)
    good = _predictions(catalog, [task_id])[task_id]
    assert validate_self_attested_predictions(card, requests, good) == []
    bad = [dict(p) for p in good]
    bad[0] = {**bad[0], "forecasts": bad[0]["forecasts"][1:]}  # one series missing
    bad[1] = {**bad[1], "window_id": "elsewhere"}
    bad.append(dict(good[2]))
    problems = validate_self_attested_predictions(card, requests, bad)
    assert _codes(problems) == [
        "duplicate_window",
        "invalid_predictions",
        "missing_window",
        "unknown_window",
    ]
    assert validate_self_attested_predictions(card, requests, {"x": 1})[0].code == (
        "invalid_predictions"
    )
    assert all(p.field == f"predictions.{task_id}" for p in problems)
