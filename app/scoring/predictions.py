"""The shape rules for a model's forecasts, shared by the scorer and the self-attested path.

A forecast answer for a window is valid when it has exactly one entry per series of the request,
each with ``mean`` and ``quantiles`` of ``horizon`` finite numbers (integers count, booleans do
not), the quantiles keyed by exactly the task's levels as ``repr(float(level))`` (``"0.1"``), as
the forward protocol and the runner's answer check (``workers/runner/validate.py``) require.
Anything else makes the window invalid: it is counted and reported, never repaired (no
reordering of crossed quantiles, no filling of gaps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.catalog.cards import ForecastRequest, TaskCard
from app.scoring.metrics import FloatArray

MAX_PROBLEMS = 20


def quantile_key(level: float) -> str:
    """The protocol's key for a quantile level: ``repr(float(level))``, e.g. ``"0.1"``."""
    return repr(float(level))


@dataclass(frozen=True)
class ParsedForecast:
    mean: FloatArray  # (S, H), rows in the request's series order
    quantiles: FloatArray  # (Q, S, H), levels ascending


def _numbers(value: Any, horizon: int, what: str, problems: list[str]) -> list[float] | None:
    if not isinstance(value, list) or len(value) != horizon:
        size = len(value) if isinstance(value, list) else type(value).__name__
        problems.append(f"{what} must be a list of {horizon} numbers, got {size}")
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        problems.append(f"{what} holds a value that is not a number")
        return None
    if not all(math.isfinite(v) for v in value):
        problems.append(f"{what} holds NaN or an infinity")
        return None
    return [float(v) for v in value]


def _parse_item(
    entry: Mapping[str, Any], item: str, horizon: int, levels: Sequence[float], problems: list[str]
) -> tuple[list[float] | None, list[list[float] | None]]:
    mean = _numbers(entry.get("mean"), horizon, f"{item}: mean", problems)
    quantiles = entry.get("quantiles")
    keys = [quantile_key(level) for level in levels]
    if not isinstance(quantiles, Mapping) or set(quantiles) != set(keys):
        got = sorted(map(str, quantiles))[:12] if isinstance(quantiles, Mapping) else "none"
        problems.append(f"{item}: quantile keys are {got}, expected exactly {sorted(keys)}")
        return mean, [None]
    rows = [_numbers(quantiles[k], horizon, f"{item}: quantile {k}", problems) for k in keys]
    return mean, rows


def _entries_by_item(
    forecasts: Any, request: ForecastRequest, problems: list[str]
) -> dict[str, Mapping[str, Any]]:
    if not isinstance(forecasts, list):
        problems.append("forecasts must be a list")
        return {}
    expected = {s.item_id for s in request.series}
    entries: dict[str, Mapping[str, Any]] = {}
    for entry in forecasts:
        item = entry.get("item_id") if isinstance(entry, Mapping) else None
        if not isinstance(item, str) or not isinstance(entry, Mapping):
            problems.append("each forecast must be an object with a string item_id")
        elif item not in expected:
            problems.append(f"unknown item_id {item!r}")
        elif item in entries:
            problems.append(f"item_id {item!r} forecast twice")
        else:
            entries[item] = entry
    problems.extend(f"no forecast for item_id {i!r}" for i in sorted(expected - set(entries)))
    return entries


def parse_forecasts(
    card: TaskCard, request: ForecastRequest, forecasts: Any
) -> tuple[ParsedForecast | None, list[str]]:
    """The forecasts as arrays, or ``None`` and the problems (at most ``MAX_PROBLEMS``)."""
    problems: list[str] = []
    levels = sorted(card.quantile_levels)
    entries = _entries_by_item(forecasts, request, problems)
    means: list[list[float] | None] = []
    quants: list[list[list[float] | None]] = []
    for series in request.series:
        if series.item_id in entries:
            entry = entries[series.item_id]
            mean, rows = _parse_item(entry, series.item_id, card.horizon, levels, problems)
            means.append(mean)
            quants.append(rows)
    if problems:
        return None, problems[:MAX_PROBLEMS]
    mean_arr = np.array(means, dtype=np.float64)
    quant_arr = np.array(quants, dtype=np.float64).transpose(1, 0, 2)
    return ParsedForecast(mean=mean_arr, quantiles=quant_arr), []
