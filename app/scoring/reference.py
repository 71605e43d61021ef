"""What the seasonal naive baseline answers, computed directly (no container).

The baseline image runs ``app/baselines/seasonal_naive.py`` unchanged, so a sealed run of that
image must score exactly what these records score: the end-to-end check of the pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.baselines.seasonal_naive import seasonal_naive
from app.catalog.cards import ForecastRequest, TaskCard


def seasonal_naive_forecasts(card: TaskCard, request: ForecastRequest) -> list[dict[str, Any]]:
    """The ``forecasts`` list of a prediction message for one window."""
    out = []
    for series in request.series:
        mean, quantiles = seasonal_naive(
            series.target, card.horizon, card.seasonality, card.quantile_levels
        )
        out.append({"item_id": series.item_id, "mean": mean, "quantiles": quantiles})
    return out


def seasonal_naive_records(
    card: TaskCard, requests: Sequence[ForecastRequest]
) -> list[dict[str, Any]]:
    """Prediction-log-shaped records (without telemetry) for every window of a task."""
    return [
        {
            "task_id": card.task_id,
            "window_id": r.window_id,
            "request_id": r.window_id,
            "status": "ok",
            "answer": {
                "type": "prediction",
                "request_id": r.window_id,
                "forecasts": seasonal_naive_forecasts(card, r),
            },
        }
        for r in requests
    ]
