"""Turn a task spec and its source snapshot into a public card, requests and held labels.

Windows are rolling origins at the end of the series: window ``k`` of ``W`` forecasts the ``H``
points that start at index ``N - H - (W - 1 - k) * step``. Its issue time is the timestamp of
that first target point, i.e. the start of the first forecast period; every history point it
is given belongs to a period that started (and, for period-start timestamps, ended) before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.catalog.calendar import iso, parse_iso, shift, timestamps
from app.catalog.cards import (
    ForecastRequest,
    ResourceBudget,
    SeriesHistory,
    TaskCard,
    WindowCard,
    WindowLabels,
)
from app.catalog.errors import CatalogDrift
from app.catalog.future_ts_v1 import METRICS, QUANTILE_LEVELS, STATSMODELS_PINNED, TaskSpec
from app.catalog.sources import PACKAGE, SourceSnapshot, snapshot
from app.hardware import get_hardware_class

LIVE_REHEARSAL_NOTE = (
    "Live-tier rehearsal: the series is historical and public; only the release schedule of the "
    "last windows' labels lies in the future. Scores here exercise the live-tier mechanics and "
    "are not evidence of genuine future skill."
)


@dataclass(frozen=True)
class BuiltTask:
    """One task as the platform holds it. Requests and labels are kept as immutable tuples."""

    card: TaskCard
    requests: tuple[ForecastRequest, ...]
    labels: dict[str, WindowLabels]


def build_task(spec: TaskSpec) -> BuiltTask:
    snap = snapshot(spec.dataset, spec.columns)
    _check_snapshot(spec, snap)
    n, w = len(snap.timestamps), spec.n_windows
    origins = [n - spec.horizon - (w - 1 - k) * spec.step for k in range(w)]
    if origins[0] < spec.context_length:
        raise ValueError(f"{spec.task_id}: the first window has less history than its context")
    requests: list[ForecastRequest] = []
    labels: dict[str, WindowLabels] = {}
    for k, t in enumerate(origins):
        window_id = f"{spec.task_id}-w{k:02d}"
        requests.append(_request(spec, snap, window_id, t))
        labels[window_id] = _labels(spec, snap, k, window_id, t)
    return BuiltTask(_card(spec, snap, requests), tuple(requests), labels)


def _check_snapshot(spec: TaskSpec, snap: SourceSnapshot) -> None:
    expected = timestamps(snap.timestamps[0], snap.freq, len(snap.timestamps))
    if list(snap.timestamps) != expected:
        raise CatalogDrift(f"{snap.dataset}: timestamps are not a regular {snap.freq} calendar")
    if snap.snapshot_id != spec.snapshot_id:
        raise CatalogDrift(
            f"{spec.task_id}: packaged data {snap.snapshot_id} differs from the pinned "
            f"snapshot {spec.snapshot_id}; cut a new catalog version"
        )


def _request(spec: TaskSpec, snap: SourceSnapshot, window_id: str, t: int) -> ForecastRequest:
    lo = max(0, t - spec.context_length)
    series = [
        SeriesHistory(item_id=item, start=iso(snap.timestamps[lo]), target=list(values[lo:t]))
        for item, values in snap.series.items()
    ]
    return ForecastRequest(window_id=window_id, issue_time=iso(snap.timestamps[t]), series=series)


def _labels(spec: TaskSpec, snap: SourceSnapshot, k: int, window_id: str, t: int) -> WindowLabels:
    end = t + spec.horizon
    available = _available_at(spec, snap, k, snap.timestamps[end - 1])
    targets = {item: list(values[t:end]) for item, values in snap.series.items()}
    return WindowLabels(window_id=window_id, available_at=iso(available), targets=targets)


def _available_at(spec: TaskSpec, snap: SourceSnapshot, k: int, last_target: datetime) -> datetime:
    """End of the last target period plus the publication delay; a rehearsal date if later."""
    historical = shift(last_target, snap.freq, 1) + timedelta(days=spec.publication_delay_days)
    rehearsed = spec.n_windows - len(spec.rehearsal_release)
    if k < rehearsed:
        return historical
    release = parse_iso(spec.rehearsal_release[k - rehearsed])
    if release <= historical:
        raise ValueError(f"{spec.task_id}: rehearsal release {iso(release)} is not in the future")
    return release


def _card(spec: TaskSpec, snap: SourceSnapshot, requests: list[ForecastRequest]) -> TaskCard:
    hardware = get_hardware_class(spec.hardware_class)
    if spec.memory_mb > hardware.memory_mb:
        raise ValueError(f"{spec.task_id}: memory budget above its hardware class")
    extra: dict[str, object] = {
        "package": PACKAGE,
        "dataset": snap.dataset,
        "selection": snap.selection,
        "items": list(snap.series),
        "window_step": spec.step,
        "label_publication_delay_days": spec.publication_delay_days,
        "interval": [min(QUANTILE_LEVELS), max(QUANTILE_LEVELS)],
    }
    if spec.rehearsal_release:
        extra["live_rehearsal"] = LIVE_REHEARSAL_NOTE
    return TaskCard(
        task_id=spec.task_id,
        tier=spec.tier,
        title=spec.title,
        freq=snap.freq,
        horizon=spec.horizon,
        seasonality=spec.seasonality,
        quantile_levels=list(QUANTILE_LEVELS),
        context_length=spec.context_length,
        metrics=list(METRICS),
        source_snapshot_id=snap.snapshot_id,
        resource_budget=ResourceBudget(
            hardware_class=spec.hardware_class,
            latency_ms=spec.latency_ms,
            max_latency_violation_pct=spec.max_latency_violation_pct,
            memory_mb=spec.memory_mb,
            startup_s=spec.startup_s,
            wall_clock_s=spec.wall_clock_s,
        ),
        windows=[WindowCard(window_id=r.window_id, issue_time=r.issue_time) for r in requests],
        source=f"{STATSMODELS_PINNED}, {snap.dataset} ({snap.file}): {spec.provenance}",
        licence=spec.licence,
        requires_pretraining_manifest=spec.requires_pretraining_manifest,
        extra=extra,
    )
