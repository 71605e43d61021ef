"""Forecast metrics with written definitions (also in ``docs/metrics.md``).

Notation for one window of one series: labels ``y_1..y_H``, point forecast ``ŷ_1..ŷ_H``,
quantile forecasts ``q_{τ,1}..q_{τ,H}`` for each level ``τ`` of the task, and the history
``x_1..x_T`` the model was given (after trimming to the context budget), with seasonality ``m``.

* **MASE** = ``mean_h |y_h - ŷ_h| / s`` with the in-sample seasonal naive scale
  ``s = mean_{t=m+1..T} |x_t - x_{t-m}|``. It is undefined (NaN) when ``T <= m`` or ``s = 0``.
* **sMAPE** = ``(200 / H) * Σ_h |y_h - ŷ_h| / (|y_h| + |ŷ_h|)``, on a 0-200 scale; a term whose
  denominator is 0 (``y_h = ŷ_h = 0``) counts as 0 (a perfect forecast of zero).
* **pinball loss** of level ``τ``: ``rho_τ(y, q) = max(τ (y - q), (τ - 1)(y - q))``.
* **WQL** (weighted quantile loss, the usual CRPS approximation) over the levels ``τ_1..τ_Q``:
  ``WQL = (1/Q) Σ_τ [ 2 Σ_{i,h} rho_τ(y_{i,h}, q_{τ,i,h}) / Σ_{i,h} |y_{i,h}| ]``, the sums running
  over every series ``i`` and step ``h`` being aggregated. NaN when ``Σ |y| = 0``.
* **interval coverage**: the fraction of labels with ``q_low <= y <= q_high`` (bounds included),
  where ``q_low`` / ``q_high`` are the lowest / highest quantile levels of the task (0.1 and 0.9,
  a nominal 80% central interval). Crossed quantiles are not repaired: ``q_low > q_high`` covers
  nothing.

Aggregation over windows and series (see ``combine``): MASE and sMAPE are the arithmetic mean of
the per-(window, series) values (undefined MASE values are left out and counted); WQL sums the
pinball losses and ``|y|`` over every (window, series, step) before dividing, as GluonTS and the
Chronos benchmark do; coverage counts points.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def seasonal_scale(history: ArrayLike, season: int) -> float:
    """Mean absolute seasonal difference of the history; NaN when it has no lag-``season`` pair."""
    x = np.asarray(history, dtype=np.float64)
    if season < 1 or x.size <= season:
        return math.nan
    return float(np.mean(np.abs(x[season:] - x[:-season])))


def mase_rows(y: FloatArray, yhat: FloatArray, scales: FloatArray) -> FloatArray:
    """MASE per row of ``(S, H)`` arrays given each row's scale; NaN where the scale is 0 or NaN."""
    mae = np.mean(np.abs(y - yhat), axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = mae / scales
    defined = (scales > 0) & np.isfinite(scales)
    result: FloatArray = np.where(defined, out, np.nan)
    return result


def smape_rows(y: FloatArray, yhat: FloatArray) -> FloatArray:
    """sMAPE (0-200) per row of ``(S, H)`` arrays; 0/0 terms count as 0."""
    num = np.abs(y - yhat)
    den = np.abs(y) + np.abs(yhat)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den > 0, num / den, 0.0)
    result: FloatArray = 200.0 * np.mean(ratio, axis=-1)
    return result


def pinball_sum(y: FloatArray, quantiles: FloatArray, levels: Sequence[float]) -> float:
    """``Σ_τ Σ rho_τ(y, q_τ)``; ``quantiles`` is ``(Q, *y.shape)``, one slice per level."""
    tau = np.asarray(levels, dtype=np.float64).reshape((-1,) + (1,) * y.ndim)
    diff = y[np.newaxis, ...] - quantiles
    return float(np.sum(np.maximum(tau * diff, (tau - 1.0) * diff)))


def inside_count(y: FloatArray, lower: FloatArray, upper: FloatArray) -> int:
    """How many labels lie in ``[lower, upper]``, bounds included."""
    return int(np.count_nonzero((y >= lower) & (y <= upper)))


@dataclass(frozen=True)
class MetricParts:
    """Sufficient statistics of one window, so any set of windows can be aggregated exactly."""

    mase: tuple[float, ...]  # per series; NaN when undefined
    smape: tuple[float, ...]  # per series
    pinball: float  # Σ_τ Σ_{i,h} rho_τ
    abs_target: float  # Σ_{i,h} |y|
    inside: int
    points: int
    n_levels: int


@dataclass(frozen=True)
class MetricValues:
    mase: float | None
    smape: float | None
    wql: float | None
    interval_coverage: float | None
    n_windows: int
    n_series_windows: int
    mase_undefined: int  # (window, series) pairs left out of MASE because the scale was 0

    def get(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


def window_parts(
    y: FloatArray,
    mean: FloatArray,
    quantiles: FloatArray,
    histories: Sequence[ArrayLike],
    season: int,
    levels: Sequence[float],
) -> MetricParts:
    """Parts for one window: ``y``/``mean`` are ``(S, H)``, ``quantiles`` ``(Q, S, H)``.

    ``levels`` must be sorted ascending; the interval is ``[quantiles[0], quantiles[-1]]``.
    """
    scales = np.array([seasonal_scale(h, season) for h in histories], dtype=np.float64)
    return MetricParts(
        mase=tuple(float(v) for v in mase_rows(y, mean, scales)),
        smape=tuple(float(v) for v in smape_rows(y, mean)),
        pinball=pinball_sum(y, quantiles, levels),
        abs_target=float(np.sum(np.abs(y))),
        inside=inside_count(y, quantiles[0], quantiles[-1]),
        points=int(y.size),
        n_levels=len(levels),
    )


def _mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def combine(parts: Iterable[MetricParts]) -> MetricValues:
    """Aggregate windows as the module docstring defines; ``None`` where a metric is undefined."""
    items = list(parts)
    mase_all = [v for p in items for v in p.mase]
    mase_ok = [v for v in mase_all if not math.isnan(v)]
    abs_target = sum(p.abs_target for p in items)
    points = sum(p.points for p in items)
    n_levels = items[0].n_levels if items else 0
    wql = 2.0 * sum(p.pinball for p in items) / (n_levels * abs_target) if abs_target > 0 else None
    return MetricValues(
        mase=_mean_or_none(mase_ok),
        smape=_mean_or_none([v for p in items for v in p.smape]),
        wql=wql,
        interval_coverage=sum(p.inside for p in items) / points if points else None,
        n_windows=len(items),
        n_series_windows=len(mase_all),
        mase_undefined=len(mase_all) - len(mase_ok),
    )


# Scalar conveniences for one series (the definitions above; used by tests and docs).


def _row(values: ArrayLike) -> FloatArray:
    return np.asarray(values, dtype=np.float64).reshape(1, -1)


def mase(y: ArrayLike, yhat: ArrayLike, history: ArrayLike, season: int) -> float:
    scale = np.array([seasonal_scale(history, season)], dtype=np.float64)
    return float(mase_rows(_row(y), _row(yhat), scale)[0])


def smape(y: ArrayLike, yhat: ArrayLike) -> float:
    return float(smape_rows(_row(y), _row(yhat))[0])


def wql(y: ArrayLike, quantiles: Mapping[float, ArrayLike]) -> float:
    levels = sorted(quantiles)
    target = np.asarray(y, dtype=np.float64)
    q = np.stack([np.asarray(quantiles[level], dtype=np.float64) for level in levels])
    denom = float(np.sum(np.abs(target)))
    if denom == 0:
        return math.nan
    return 2.0 * pinball_sum(target, q, levels) / (len(levels) * denom)


def interval_coverage(y: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> float:
    target = np.asarray(y, dtype=np.float64)
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    return inside_count(target, lo, hi) / target.size
