"""Metrics against hand-computed values and against utilsforecast (an independent PyPI package)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from utilsforecast.losses import coverage, mase, mqloss, scaled_crps, smape

from app.catalog import Catalog
from app.scoring import metrics as m
from app.scoring.reference import seasonal_naive_forecasts

LEVELS = [0.1, 0.5, 0.9]


def test_hand_computed_values() -> None:
    history = [1, 2, 3, 4, 5, 6]  # lag-2 differences are all 2: scale 2
    y, yhat = [7, 8], [6, 10]  # |errors| 1 and 2: MAE 1.5
    assert m.seasonal_scale(history, 2) == 2.0
    assert m.mase(y, yhat, history, 2) == pytest.approx(0.75)
    assert m.smape(y, yhat) == pytest.approx(100 * (1 / 13 + 2 / 18))
    quantiles = {0.1: [6, 9], 0.5: [7, 10], 0.9: [8, 11]}
    # pinball: q0.1: y-q = 1, -1 -> 0.1*1 + 0.9*1 = 1.0 ; q0.5: 0, -2 -> 0 + 0.5*2 = 1.0
    #          q0.9: -1, -3 -> 0.1*1 + 0.1*3 = 0.4      ; total 2.4; Σ|y| = 15; Q = 3
    assert m.wql(y, quantiles) == pytest.approx(2 * 2.4 / (3 * 15))
    assert m.interval_coverage(y, [6, 9], [8, 11]) == 0.5  # 7 in [6, 8]; 8 not in [9, 11]
    assert m.interval_coverage([6, 11], [6, 9], [8, 11]) == 1.0  # bounds are included


def test_edge_cases_are_defined() -> None:
    assert m.smape([0, 0], [0, 0]) == 0.0  # 0/0 counts as a perfect forecast of zero
    assert m.smape([0], [3]) == 200.0
    assert math.isnan(m.mase([1], [2], [5, 5, 5], 1))  # constant history: no scale
    assert math.isnan(m.mase([1], [2], [5, 6], 2))  # no lag-2 pair in the history
    assert math.isnan(m.wql([0, 0], {0.5: [1, 1]}))
    assert m.interval_coverage([5], [6], [4]) == 0.0  # crossed quantiles are not repaired
    empty = m.combine([])
    assert empty.mase is None and empty.wql is None and empty.interval_coverage is None


def test_combine_aggregates_as_documented() -> None:
    y = np.array([[1.0, 2.0], [10.0, 20.0]])
    mean = np.array([[2.0, 2.0], [10.0, 10.0]])
    q = np.stack([mean - 1, mean, mean + 1])
    parts = m.window_parts(y, mean, q, [[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]], 1, LEVELS)
    assert math.isnan(parts.mase[1])
    values = m.combine([parts, parts])
    assert values.mase == pytest.approx(0.5)  # series 0: MAE (1 + 0) / 2 over scale 1
    assert values.mase_undefined == 2 and values.n_series_windows == 4 and values.n_windows == 2
    per_point = m.wql(y.ravel(), {lv: q[i].ravel() for i, lv in enumerate(LEVELS)})
    assert values.wql == pytest.approx(per_point)  # WQL pools every point before dividing
    assert values.smape == pytest.approx(np.mean(m.smape_rows(y, mean)))


def _frame(rng: np.random.Generator, n_series: int, n_windows: int, horizon: int, season: int):
    """Random windows, each with its own history, in utilsforecast's long format.

    Every (series, window) pair is its own ``unique_id``: our windows each carry their own
    (trimmed) history, which is what utilsforecast scales by when given that history as train_df.
    """
    rows, train, ours = [], [], []
    for w in range(n_windows):
        for s in range(n_series):
            uid = f"s{s}@w{w}"
            history = rng.gamma(2.0, 10.0, size=30) + 5 * np.sin(np.arange(30) * 2 * np.pi / season)
            y = rng.gamma(2.0, 10.0, size=horizon)
            yhat = y + rng.normal(0, 5, size=horizon)
            q = np.sort(yhat + rng.normal(0, 8, size=(len(LEVELS), horizon)), axis=0)
            train += [{"unique_id": uid, "ds": t, "y": v} for t, v in enumerate(history)]
            for h in range(horizon):
                row = {"unique_id": uid, "ds": 30 + h, "y": y[h], "model": yhat[h]}
                row.update({f"model-q{int(lv * 100)}": q[i, h] for i, lv in enumerate(LEVELS)})
                row["model-lo-80"], row["model-hi-80"] = q[0, h], q[-1, h]
                rows.append(row)
            ours.append((uid, history, y, yhat, q))
    return pd.DataFrame(rows), pd.DataFrame(train), ours


def test_agrees_with_utilsforecast_per_series_window() -> None:
    rng = np.random.default_rng(7)
    season = 4
    df, train, ours = _frame(rng, n_series=3, n_windows=4, horizon=6, season=season)
    qcols = {"model": [f"model-q{int(lv * 100)}" for lv in LEVELS]}
    ref_mase = mase(df, ["model"], season, train).set_index("unique_id")["model"]
    ref_smape = smape(df, ["model"]).set_index("unique_id")["model"]
    ref_crps = scaled_crps(df, qcols, np.array(LEVELS)).set_index("unique_id")["model"]
    ref_cov = coverage(df, ["model"], level=80).set_index("unique_id")["model"]
    for uid, history, y, yhat, q in ours:
        assert m.mase(y, yhat, history, season) == pytest.approx(ref_mase[uid], rel=1e-12)
        assert m.smape(y, yhat) == pytest.approx(200 * ref_smape[uid], rel=1e-12)
        quantiles = {lv: q[i] for i, lv in enumerate(LEVELS)}
        assert m.wql(y, quantiles) == pytest.approx(ref_crps[uid], rel=1e-9)
        assert m.interval_coverage(y, q[0], q[-1]) == pytest.approx(ref_cov[uid])


def test_pooled_wql_is_scaled_crps_over_all_points() -> None:
    rng = np.random.default_rng(11)
    df, _, ours = _frame(rng, n_series=4, n_windows=3, horizon=5, season=2)
    qcols = {"model": [f"model-q{int(lv * 100)}" for lv in LEVELS]}
    pooled = df.assign(unique_id="all")
    ref = float(scaled_crps(pooled, qcols, np.array(LEVELS))["model"].iloc[0])
    parts = [
        m.window_parts(y[None, :], yhat[None, :], q[:, None, :], [history], 2, LEVELS)
        for _, history, y, yhat, q in ours
    ]
    assert m.combine(parts).wql == pytest.approx(ref, rel=1e-9)
    mql = float(mqloss(pooled, qcols, np.array(LEVELS))["model"].iloc[0])
    assert m.combine(parts).wql == pytest.approx(2 * mql * len(pooled) / df.y.abs().sum(), rel=1e-9)


def test_catalog_task_matches_utilsforecast(catalog: Catalog) -> None:
    """A real task (5 series, 6 windows) with seasonal naive forecasts, end to end."""
    task_id = "us-macro-real-quarterly"
    card, labels = catalog.card(task_id), catalog.labels(task_id)
    rows, train, parts = [], [], []
    levels = card.quantile_levels
    for request in catalog.requests(task_id):
        forecasts = {f["item_id"]: f for f in seasonal_naive_forecasts(card, request)}
        for s in request.series:
            uid = f"{s.item_id}@{request.window_id}"
            stamps = pd.date_range(
                s.start.rstrip("Z"), periods=len(s.target) + card.horizon, freq=card.freq
            )
            train += [
                {"unique_id": uid, "ds": d, "y": v} for d, v in zip(stamps, s.target, strict=False)
            ]
            f = forecasts[s.item_id]
            for h, y in enumerate(labels[request.window_id].targets[s.item_id]):
                row = {
                    "unique_id": uid,
                    "ds": stamps[len(s.target) + h],
                    "y": y,
                    "model": f["mean"][h],
                }
                row.update({f"q{lv}": f["quantiles"][repr(lv)][h] for lv in levels})
                rows.append(row)
        y = np.array([labels[request.window_id].targets[s.item_id] for s in request.series])
        mean = np.array([forecasts[s.item_id]["mean"] for s in request.series])
        q = np.array(
            [[forecasts[s.item_id]["quantiles"][repr(lv)] for s in request.series] for lv in levels]
        )
        parts.append(
            m.window_parts(y, mean, q, [s.target for s in request.series], card.seasonality, levels)
        )
    df, tr = pd.DataFrame(rows), pd.DataFrame(train)
    ours = m.combine(parts)
    ref_mase = mase(df, ["model"], card.seasonality, tr)["model"].mean()
    ref_smape = 200 * smape(df, ["model"])["model"].mean()
    qcols = {"model": [f"q{lv}" for lv in levels]}
    ref_wql = scaled_crps(df.assign(unique_id="all"), qcols, np.array(levels))["model"].iloc[0]
    assert ours.mase == pytest.approx(ref_mase, rel=1e-12)
    assert ours.smape == pytest.approx(ref_smape, rel=1e-12)
    assert ours.wql == pytest.approx(ref_wql, rel=1e-9)
