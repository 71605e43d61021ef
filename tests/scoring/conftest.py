from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.catalog import Catalog, load_catalog
from app.scoring.reference import seasonal_naive_records


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


def perfect_records(catalog: Catalog, task_id: str) -> list[dict[str, Any]]:
    """Answers equal to the labels, every quantile included."""
    card = catalog.card(task_id)
    labels = catalog.labels(task_id)
    records = []
    for request in catalog.requests(task_id):
        targets = labels[request.window_id].targets
        forecasts = [
            {
                "item_id": s.item_id,
                "mean": list(targets[s.item_id]),
                "quantiles": {repr(q): list(targets[s.item_id]) for q in card.quantile_levels},
            }
            for s in request.series
        ]
        records.append(
            {
                "window_id": request.window_id,
                "status": "ok",
                "answer": {"type": "prediction", "forecasts": forecasts},
            }
        )
    return records


def naive_records(catalog: Catalog, task_id: str) -> list[dict[str, Any]]:
    return seasonal_naive_records(catalog.card(task_id), catalog.requests(task_id))


@pytest.fixture
def records_for() -> Callable[[Catalog, str, str], list[dict[str, Any]]]:
    def make(catalog: Catalog, task_id: str, kind: str) -> list[dict[str, Any]]:
        return {"naive": naive_records, "perfect": perfect_records}[kind](catalog, task_id)

    return make
