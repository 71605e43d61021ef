"""The future-ts-v1 catalog: real packaged data, deterministic, complete cards, honest labels."""

from __future__ import annotations

import dataclasses
import importlib
import json
from datetime import UTC, datetime

import pandas as pd
import pytest

from app.catalog import (
    CatalogDrift,
    UnknownCatalogVersion,
    UnknownSuite,
    UnknownTask,
    catalog_digest,
    load_catalog,
)
from app.catalog.builder import build_task
from app.catalog.calendar import parse_iso, shift
from app.catalog.cards import TIERS, TaskCard
from app.catalog.catalog import _build_v1
from app.catalog.future_ts_v1 import SPECS, TaskSpec
from app.hardware import HARDWARE_CLASSES

CATALOG = load_catalog("future-ts-v1")
# The day this catalog version was cut; live rehearsal releases lie after it.
CUT = datetime(2026, 11, 30, tzinfo=UTC)


def test_catalog_shape_meets_the_issue() -> None:
    cards = CATALOG.cards()
    assert CATALOG.version == "future-ts-v1"
    assert len(cards) >= 8
    assert len({c.freq for c in cards}) >= 3
    assert {c.tier for c in cards} == set(TIERS)
    assert len({c.task_id for c in cards}) == len(cards)


@pytest.mark.parametrize("card", CATALOG.cards(), ids=lambda c: c.task_id)
def test_every_card_is_complete(card: TaskCard) -> None:
    budget = card.resource_budget
    hardware = HARDWARE_CLASSES[budget.hardware_class]
    assert 0 < budget.memory_mb <= hardware.memory_mb
    assert budget.latency_ms > 0 and budget.startup_s > 0 and budget.wall_clock_s > 0
    assert 0 <= budget.max_latency_violation_pct <= 100
    assert 4 <= card.horizon <= 24 and 4 <= len(card.windows) <= 12
    assert card.quantile_levels == sorted(card.quantile_levels)
    assert card.quantile_levels[0] == 0.1 and card.quantile_levels[-1] == 0.9
    assert set(card.metrics) == {"mase", "smape", "wql", "interval_coverage"}
    assert card.source_snapshot_id.startswith("sha256:") and len(card.source_snapshot_id) == 71
    assert "statsmodels" in card.source and "0.15.0" in card.source
    assert card.licence and card.seasonality >= 1 and card.context_length > card.seasonality
    json.dumps(card.public_dict(), allow_nan=False)
    issue_times = [parse_iso(w.issue_time) for w in card.windows]
    assert issue_times == sorted(issue_times) and len(set(issue_times)) == len(issue_times)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.task_id)
def test_licence_quotes_the_dataset_copyright(spec: TaskSpec) -> None:
    module = importlib.import_module(f"statsmodels.datasets.{spec.dataset}")
    assert module.COPYRIGHT.strip() in spec.licence


def test_the_build_is_deterministic() -> None:
    again = _build_v1()
    assert again.digest == CATALOG.digest == catalog_digest()
    for task_id in CATALOG.task_ids():
        assert again.requests(task_id) == CATALOG.requests(task_id)
        assert again.labels(task_id) == CATALOG.labels(task_id)


def test_changed_data_is_refused_not_silently_rescored() -> None:
    tampered = dataclasses.replace(SPECS[0], snapshot_id="sha256:" + "0" * 64)
    with pytest.raises(CatalogDrift):
        build_task(tampered)


def test_lookup_errors() -> None:
    with pytest.raises(UnknownTask):
        CATALOG.card("no-such-task")
    with pytest.raises(UnknownTask):
        CATALOG.requests("no-such-task")
    with pytest.raises(UnknownSuite):
        CATALOG.suite("no-such-suite")
    with pytest.raises(UnknownCatalogVersion):
        load_catalog("future-ts-v0")


def test_suites() -> None:
    suites = CATALOG.suites()
    assert suites["all"] == CATALOG.task_ids()
    for tier in TIERS:
        assert suites[tier] and all(CATALOG.card(t).tier == tier for t in suites[tier])
    assert {CATALOG.card(t).tier for t in suites["smoke"]} == set(TIERS)


def test_accessors_hand_out_copies() -> None:
    task_id = CATALOG.task_ids()[0]
    CATALOG.requests(task_id)[0].series[0].target.append(1e9)
    CATALOG.card(task_id).windows.clear()
    next(iter(CATALOG.labels(task_id).values())).targets.clear()
    assert CATALOG.requests(task_id) == _build_v1().requests(task_id)
    assert CATALOG.card(task_id).windows
    assert all(lab.targets for lab in CATALOG.labels(task_id).values())


def _statsmodels_frame(dataset: str) -> pd.DataFrame:
    """The same data through statsmodels' own pandas loader, indexed by period start."""
    data = importlib.import_module(f"statsmodels.datasets.{dataset}").load_pandas().data
    if dataset in ("sunspots", "nile"):
        index = pd.to_datetime(data.iloc[:, 0].astype(int).astype(str), format="%Y")
        return data.set_axis(index).iloc[:, 1:].rename(columns=str.lower)
    if dataset == "elnino":
        stacked = data.set_index("YEAR").stack()
        index = pd.to_datetime([f"{int(y)}-{m}-01" for y, m in stacked.index], format="%Y-%b-%d")
        return pd.DataFrame({"nino12": stacked.to_numpy()}, index=index)
    if dataset == "macrodata":
        index = pd.PeriodIndex.from_fields(
            year=data.year.astype(int), quarter=data.quarter.astype(int)
        )
        return data.set_axis(index.to_timestamp())
    return data  # co2, danish_data, elec_equip: already indexed by time


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.task_id)
def test_values_match_statsmodels_own_loader(spec: TaskSpec) -> None:
    """An independent read (pandas + statsmodels' loader) of what each request and label holds."""
    frame = _statsmodels_frame(spec.dataset)
    frame.index = pd.DatetimeIndex(frame.index).tz_localize(None)
    card = CATALOG.card(spec.task_id)
    labels = CATALOG.labels(spec.task_id)
    for request in CATALOG.requests(spec.task_id):
        for series in request.series:
            column = dict((item, col) for col, item in spec.columns)[series.item_id]
            stamps = pd.date_range(
                series.start.rstrip("Z"), periods=len(series.target), freq=card.freq
            )
            assert frame.loc[stamps, column].tolist() == pytest.approx(series.target, rel=1e-12)
            after = pd.date_range(
                request.issue_time.rstrip("Z"), periods=card.horizon, freq=card.freq
            )
            expected = labels[request.window_id].targets[series.item_id]
            assert frame.loc[after, column].tolist() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("card", CATALOG.cards(), ids=lambda c: c.task_id)
def test_labels_become_available_after_their_last_target_period(card: TaskCard) -> None:
    labels = CATALOG.labels(card.task_id)
    assert list(labels) == [w.window_id for w in card.windows]
    for window in card.windows:
        lab = labels[window.window_id]
        assert all(len(v) == card.horizon for v in lab.targets.values())
        last_target = shift(parse_iso(window.issue_time), card.freq, card.horizon - 1)
        assert parse_iso(lab.available_at) >= shift(last_target, card.freq, 1)


@pytest.mark.parametrize(
    "card", [c for c in CATALOG.cards() if c.tier == "live"], ids=lambda c: c.task_id
)
def test_live_tasks_are_a_declared_rehearsal(card: TaskCard) -> None:
    available = [parse_iso(lab.available_at) for lab in CATALOG.labels(card.task_id).values()]
    assert any(a <= CUT for a in available), "earlier waves are already public"
    assert any(a > CUT for a in available), "later waves are held until after the cut"
    assert available == sorted(available)
    assert (
        "rehearsal" in card.extra["live_rehearsal"] and "historical" in card.extra["live_rehearsal"]
    )


@pytest.mark.parametrize("card", CATALOG.cards(), ids=lambda c: c.task_id)
def test_no_window_has_an_undefined_mase_scale(card: TaskCard) -> None:
    for request in CATALOG.requests(card.task_id):
        for series in request.series:
            m = card.seasonality
            diffs = [abs(a - b) for a, b in zip(series.target[m:], series.target[:-m], strict=True)]
            assert len(series.target) == card.context_length and sum(diffs) > 0


def test_cards_are_copies_except_the_shared_one() -> None:
    task_id = CATALOG.task_ids()[0]
    mine = CATALOG.card(task_id)
    mine.windows.clear()  # a caller's own copy: the catalog does not see this
    assert CATALOG.card(task_id).windows and CATALOG.card(task_id) is not CATALOG.card(task_id)
    shared = CATALOG.shared_card(task_id)
    assert shared is CATALOG.shared_card(task_id) and shared.windows
    assert shared == CATALOG.card(task_id)
