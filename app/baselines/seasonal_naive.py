"""Seasonal naive: repeat the last observed season; quantiles from seasonal-difference residuals."""

from __future__ import annotations

import math


def _empirical_quantile(sorted_values: list[float], level: float) -> float:
    """Linear interpolation between order statistics (numpy's default 'linear' method)."""
    if not sorted_values:
        return 0.0
    pos = level * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def seasonal_naive(
    target: list[float], horizon: int, season: int, quantile_levels: list[float]
) -> tuple[list[float], dict[str, list[float]]]:
    """Point forecast and quantiles for one series.

    The point forecast at step h repeats ``target[-season + (h % season)]``. Quantiles add the
    empirical quantiles of the seasonal differences ``y[t] - y[t - season]`` in the history,
    widened by sqrt(k) where k is the number of whole seasons ahead.
    Keys of the quantile mapping are ``repr(level)`` strings such as ``"0.1"``.
    """
    m = max(1, min(season, len(target)))
    last = target[-m:]
    mean = [float(last[h % m]) for h in range(horizon)]
    residuals = sorted(target[t] - target[t - m] for t in range(m, len(target)))
    quantiles: dict[str, list[float]] = {}
    for level in quantile_levels:
        q = _empirical_quantile(residuals, level)
        quantiles[repr(float(level))] = [
            mean[h] + q * math.sqrt(h // m + 1) for h in range(horizon)
        ]
    return mean, quantiles
