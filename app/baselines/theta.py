"""Standard Theta method (Assimakopoulos & Nikolopoulos 2000, as in Hyndman & Billah 2003).

The forecast is simple exponential smoothing plus half the slope of the linear trend (the theta=2
line combined with the theta=0 line), computed on the seasonally adjusted series when a 90%
autocorrelation test finds seasonality, then reseasonalised. This follows R's
``forecast::thetaf``. Pure standard library and deterministic: the smoothing parameter is chosen by
a fixed grid followed by a fixed number of golden-section steps, so the same input always gives the
same floats. Quantiles are Gaussian around the mean with the SES (ETS(A,N,N)) forecast variance
``sigma^2 * (1 + (h - 1) * alpha^2)``.
"""

from __future__ import annotations

import math
from statistics import NormalDist

_ALPHA_LO = 0.0001
_ALPHA_HI = 0.9999
_GRID_STEPS = 20
_GOLDEN_STEPS = 30
_SEASONALITY_Z = 1.6448536269514722  # qnorm(0.95): the 90% two-sided test of thetaf


def _acf(x: list[float], lag: int) -> float:
    n = len(x)
    mu = sum(x) / n
    denom = sum((v - mu) ** 2 for v in x)
    if denom == 0.0:
        return 0.0
    return sum((x[t] - mu) * (x[t - lag] - mu) for t in range(lag, n)) / denom


def _is_seasonal(x: list[float], m: int) -> bool:
    """thetaf's test: |r_m| exceeds 1.645 standard errors (Bartlett's formula)."""
    if m < 2 or len(x) < 2 * m:
        return False
    r = [_acf(x, k) for k in range(1, m + 1)]
    stat = math.sqrt((1.0 + 2.0 * sum(v * v for v in r[:-1])) / len(x))
    return abs(r[-1]) / stat > _SEASONALITY_Z


def _centred_moving_average(x: list[float], m: int) -> list[float | None]:
    """Classical decomposition trend: an m-MA, or a 2-by-m MA when m is even."""
    n = len(x)
    out: list[float | None] = [None] * n
    half = m // 2
    for t in range(half, n - half):
        if m % 2:
            out[t] = sum(x[t - half : t + half + 1]) / m
        else:
            inner = sum(x[t - half + 1 : t + half])
            out[t] = (inner + 0.5 * (x[t - half] + x[t + half])) / m
    return out


def seasonal_indices(x: list[float], m: int) -> tuple[list[float], bool]:
    """Per-position seasonal indices from a classical decomposition.

    Multiplicative (normalised to mean 1) when every value is positive, additive (normalised to
    mean 0) otherwise. Returns the indices and whether they are multiplicative.
    """
    multiplicative = all(v > 0.0 for v in x)
    trend = _centred_moving_average(x, m)
    sums = [0.0] * m
    counts = [0] * m
    for t, tr in enumerate(trend):
        if tr is None or (multiplicative and tr == 0.0):
            continue
        sums[t % m] += x[t] / tr if multiplicative else x[t] - tr
        counts[t % m] += 1
    neutral = 1.0 if multiplicative else 0.0
    raw = [sums[i] / counts[i] if counts[i] else neutral for i in range(m)]
    centre = sum(raw) / m
    if multiplicative:
        return [v / centre for v in raw], True
    return [v - centre for v in raw], False


def _ses(x: list[float], alpha: float) -> tuple[float, float]:
    """Final SES level and the sum of squared one-step errors (the level starts at x[0])."""
    level = x[0]
    sse = 0.0
    for v in x[1:]:
        err = v - level
        sse += err * err
        level += alpha * err
    return level, sse


def fit_alpha(x: list[float]) -> float:
    """The SES smoothing parameter minimising one-step squared error (level starts at x[0])."""
    step = (_ALPHA_HI - _ALPHA_LO) / _GRID_STEPS
    grid = [_ALPHA_LO + i * step for i in range(_GRID_STEPS + 1)]
    best = min(range(len(grid)), key=lambda i: (_ses(x, grid[i])[1], i))
    lo = grid[max(best - 1, 0)]
    hi = grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a = hi - ratio * (hi - lo)
    b = lo + ratio * (hi - lo)
    fa, fb = _ses(x, a)[1], _ses(x, b)[1]
    for _ in range(_GOLDEN_STEPS):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = _ses(x, a)[1]
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = _ses(x, b)[1]
    return (lo + hi) / 2.0


def _ols_slope(x: list[float]) -> float:
    n = len(x)
    if n < 2:
        return 0.0
    t_mean = (n - 1) / 2.0
    x_mean = sum(x) / n
    num = sum((t - t_mean) * (v - x_mean) for t, v in enumerate(x))
    den = sum((t - t_mean) ** 2 for t in range(n))
    return num / den


def theta(
    target: list[float], horizon: int, season: int, quantile_levels: list[float]
) -> tuple[list[float], dict[str, list[float]]]:
    """Point forecast and quantiles for one series (same shape as ``seasonal_naive``).

    Keys of the quantile mapping are ``repr(float(level))`` strings such as ``"0.1"``.
    """
    x = [float(v) for v in target]
    n = len(x)
    m = max(1, season)
    indices: list[float] = []
    multiplicative = False
    if _is_seasonal(x, m):
        indices, multiplicative = seasonal_indices(x, m)
        x = [v / indices[t % m] if multiplicative else v - indices[t % m] for t, v in enumerate(x)]

    alpha = fit_alpha(x) if n >= 3 else 1.0
    level, sse = _ses(x, alpha)
    sigma2 = sse / max(n - 1, 1)
    drift = _ols_slope(x) / 2.0
    offset = (1.0 - (1.0 - alpha) ** n) / alpha
    adjusted_mean = [level + drift * (h + offset) for h in range(horizon)]
    sd = [math.sqrt(sigma2 * (1.0 + h * alpha * alpha)) for h in range(horizon)]

    def reseasonalise(h: int, value: float) -> float:
        if not indices:
            return value
        s = indices[(n + h) % m]
        return value * s if multiplicative else value + s

    mean = [reseasonalise(h, adjusted_mean[h]) for h in range(horizon)]
    quantiles: dict[str, list[float]] = {}
    for level_q in quantile_levels:
        z = NormalDist().inv_cdf(min(max(float(level_q), 1e-9), 1.0 - 1e-9))
        quantiles[repr(float(level_q))] = [
            reseasonalise(h, adjusted_mean[h] + z * sd[h]) for h in range(horizon)
        ]
    return mean, quantiles
