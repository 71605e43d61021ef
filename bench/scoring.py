"""How long scoring takes: the whole catalog for one submission, then synthetic growth.

Run: ``.venv/bin/python bench/scoring.py``. Predictions are the seasonal naive baseline's (the
answers are built before the clock starts; only scoring is timed). Scaling uses a synthetic
monthly task (horizon 12, context 120, 9 quantile levels) multiplied 10x and 100x in windows and
in series, so the cost per (window, series) pair can be read off.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

import numpy as np

from app.catalog import load_catalog
from app.catalog.cards import ForecastRequest, SeriesHistory, TaskCard, WindowCard, WindowLabels
from app.scoring.capability import capability_vector
from app.scoring.reference import seasonal_naive_records
from app.scoring.scorer import score_task

FROZEN_AT = datetime(2026, 12, 1, tzinfo=UTC)


def _timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median and minimum wall time in milliseconds."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs), min(runs)


def whole_catalog() -> None:
    catalog = load_catalog()
    tasks = [(catalog.card(t), catalog.requests(t), catalog.labels(t)) for t in catalog.task_ids()]
    answers = [seasonal_naive_records(card, reqs) for card, reqs, _ in tasks]
    windows = sum(len(reqs) for _, reqs, _ in tasks)
    pairs = sum(len(r.series) for _, reqs, _ in tasks for r in reqs)

    def run() -> None:
        scores = [
            score_task(card, reqs, labels, recs, FROZEN_AT)
            for (card, reqs, labels), recs in zip(tasks, answers, strict=True)
        ]
        json.dumps([s.to_dict() for s in scores])
        capability_vector(scores, provenance="sealed").to_dict()

    start = time.perf_counter()
    load_catalog.cache_clear()
    load_catalog()
    build_ms = (time.perf_counter() - start) * 1000
    median, best = _timed(run, repeat=20)
    print(f"catalog build (first use): {build_ms:.1f} ms")
    print(
        f"whole catalog, one submission: {len(tasks)} tasks, {windows} windows, "
        f"{pairs} (window, series) pairs -> median {median:.1f} ms, min {best:.1f} ms "
        "(score_task for every task + to_dict + JSON + capability vector)"
    )


def synthetic_task(
    n_windows: int, n_series: int, seed: int = 0
) -> tuple[TaskCard, list[ForecastRequest], dict[str, WindowLabels]]:
    """A monthly task shaped like the catalog's, on random-walk-plus-season data."""
    base = load_catalog().card("elnino-nino12-monthly")
    horizon, context = base.horizon, 120
    rng = np.random.default_rng(seed)
    length = context + n_windows * horizon
    season = 10 * np.sin(np.arange(length) * 2 * np.pi / 12)
    data = 100 + np.cumsum(rng.normal(0, 1, size=(n_series, length)), axis=1) + season
    requests: list[ForecastRequest] = []
    labels: dict[str, WindowLabels] = {}
    windows: list[WindowCard] = []
    for w in range(n_windows):
        t = context + w * horizon
        wid = f"synthetic-w{w:04d}"
        issue = f"{2000 + w:04d}-01-01T00:00:00Z"  # placeholder calendar: only order matters
        series = [
            SeriesHistory(f"s{i}", "1990-01-01T00:00:00Z", data[i, t - context : t].tolist())
            for i in range(n_series)
        ]
        requests.append(ForecastRequest(wid, issue, series))
        targets = {f"s{i}": data[i, t : t + horizon].tolist() for i in range(n_series)}
        labels[wid] = WindowLabels(wid, f"{2001 + w:04d}-01-01T00:00:00Z", targets)
        windows.append(WindowCard(wid, issue))
    card: TaskCard = dataclasses.replace(
        base, task_id="synthetic", windows=windows, context_length=context
    )
    return card, requests, labels


def scaling() -> None:
    grid = [(8, 5), (80, 5), (800, 5), (8, 50), (8, 500), (80, 50)]
    print("\nsynthetic growth (monthly, H=12, context 120, 9 quantile levels):")
    print(f"{'windows':>8} {'series':>7} {'pairs':>7} {'score ms':>10} {'us/pair':>8}")
    for n_windows, n_series in grid:
        card, requests, labels = synthetic_task(n_windows, n_series)
        records = seasonal_naive_records(card, requests)
        repeat = 5 if n_windows * n_series <= 4000 else 2
        median, _ = _timed(partial(score_task, card, requests, labels, records, None), repeat)
        pairs = n_windows * n_series
        print(
            f"{n_windows:>8} {n_series:>7} {pairs:>7} {median:>10.1f} {1000 * median / pairs:>8.1f}"
        )


if __name__ == "__main__":
    whole_catalog()
    scaling()
