"""No label value can be read from anything a container is given.

A container receives the hello payload (``card.public_dict()``) once and one ``ForecastRequest``
per window. The proof is positional, not by value (real series repeat values naturally):

1. every point sent has a timestamp (start + position, by pandas' own calendar) strictly before
   its window's issue time, and the history ends exactly one period before it;
2. every sent value is the platform's source value at that timestamp (nothing moved in time);
3. a run of a window's label values found in what is sent for a window issued no later must sit
   at timestamps before the labelled window's issue time: a natural repeat, not the labels;
4. the card carries no series: its only timestamps are the public issue-time schedule, it has no
   label-bearing key, and no label run appears among its numbers.

The last tests tamper with a request or a card and show each check catches the leak.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import pandas as pd
import pytest

from app.catalog import load_catalog
from app.catalog.calendar import parse_iso
from app.catalog.cards import ForecastRequest, SeriesHistory, TaskCard, WindowLabels
from app.catalog.future_ts_v1 import SPECS
from app.catalog.sources import snapshot

CATALOG = load_catalog()
CARDS = CATALOG.cards()
Source = dict[str, dict[datetime, float]]


def _stamps(start: str, n: int, freq: str) -> list[datetime]:
    return [ts.to_pydatetime() for ts in pd.date_range(start, periods=n, freq=freq, tz="UTC")]


def _source(task_id: str) -> Source:
    """The platform's raw data for a task, read from the packaged snapshot, not from requests."""
    spec = next(s for s in SPECS if s.task_id == task_id)
    snap = snapshot(spec.dataset, spec.columns)
    return {
        item: dict(zip(snap.timestamps, vals, strict=True)) for item, vals in snap.series.items()
    }


def _runs(haystack: Sequence[float], needle: Sequence[float]) -> Iterator[int]:
    n = len(needle)
    for i in range(len(haystack) - n + 1):
        if list(haystack[i : i + n]) == list(needle):
            yield i


def request_leaks(
    card: TaskCard,
    requests: Sequence[ForecastRequest],
    labels: dict[str, WindowLabels],
    source: Source,
) -> list[str]:
    found = []
    for request in requests:
        issue = parse_iso(request.issue_time)
        for series in request.series:
            where = f"{request.window_id}/{series.item_id}"
            stamps = _stamps(series.start, len(series.target) + 1, card.freq)
            if any(ts >= issue for ts in stamps[:-1]):
                found.append(f"{where}: a point at or after the issue time")
            if stamps[-1] != issue:
                found.append(f"{where}: history does not end right before the issue time")
            if [source[series.item_id].get(ts) for ts in stamps[:-1]] != series.target:
                found.append(f"{where}: a value is not the source value at its timestamp")
            for window in card.windows:
                window_issue = parse_iso(window.issue_time)
                if window_issue < issue:
                    continue  # an earlier window's labels are this window's past
                run = labels[window.window_id].targets[series.item_id]
                for i in _runs(series.target, run):
                    if stamps[i + len(run) - 1] >= window_issue:
                        found.append(f"{where}: labels of {window.window_id} at their own times")
    return found


def _walk(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)
    else:
        yield value


def _is_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def hello_leaks(card: TaskCard, labels: dict[str, WindowLabels]) -> list[str]:
    hello = {
        "type": "hello",
        "protocol": "future-ts-forward/1",
        "seed": 1,
        "task": card.public_dict(),
    }
    text = json.dumps(hello, allow_nan=False)
    found = [f"key {key}" for key in ("available_at", "targets", "labels") if f'"{key}"' in text]
    leaves = list(_walk(hello))
    times = {leaf for leaf in leaves if isinstance(leaf, str) and _is_time(leaf)}
    if times != {w.issue_time for w in card.windows}:
        found.append(f"timestamps beyond the issue schedule: {sorted(times)[:3]}")
    numbers = [v for v in leaves if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) >= 40:
        found.append(f"{len(numbers)} numbers: a card is a handful of settings, never a series")
    for lab in labels.values():
        for item, run in lab.targets.items():
            if list(_runs(numbers, run[:2])):
                found.append(f"labels of {lab.window_id}/{item}")
    return found


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.task_id)
def test_requests_hold_only_history_before_the_issue_time(card: TaskCard) -> None:
    requests = CATALOG.requests(card.task_id)
    assert [(r.window_id, r.issue_time) for r in requests] == [
        (w.window_id, w.issue_time) for w in card.windows
    ]
    labels = CATALOG.labels(card.task_id)
    assert request_leaks(card, requests, labels, _source(card.task_id)) == []


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.task_id)
def test_the_hello_payload_carries_no_series_and_no_label(card: TaskCard) -> None:
    assert hello_leaks(card, CATALOG.labels(card.task_id)) == []


def _tamper(request: ForecastRequest, start: str, target: list[float]) -> ForecastRequest:
    series = [SeriesHistory(request.series[0].item_id, start, target), *request.series[1:]]
    return dataclasses.replace(request, series=series)


@pytest.mark.parametrize("card", CARDS[:3], ids=lambda c: c.task_id)
def test_each_request_check_catches_a_planted_leak(card: TaskCard) -> None:
    requests = CATALOG.requests(card.task_id)
    labels = CATALOG.labels(card.task_id)
    source = _source(card.task_id)
    last = requests[-1]
    history = last.series[0]
    label = labels[last.window_id].targets[history.item_id]
    second = _stamps(history.start, 2, card.freq)[1].strftime("%Y-%m-%dT%H:%M:%SZ")
    plants = {
        "shifted one period into the future": _tamper(last, second, history.target[1:] + label[:1]),
        "label value in the last slot": _tamper(
            last, history.start, history.target[:-1] + label[:1]
        ),
        "whole label run at the end": _tamper(
            last, history.start, history.target[: -card.horizon] + label
        ),
    }
    for what, planted in plants.items():
        assert request_leaks(card, [*requests[:-1], planted], labels, source), what


def test_the_hello_check_catches_a_planted_leak() -> None:
    card = CARDS[0]
    labels = CATALOG.labels(card.task_id)
    run = next(iter(labels.values())).targets[card.extra["items"][0]]
    extra: dict[str, Any]
    for extra in ({"hint": run[:2]}, {"last_seen": "2099-01-01T00:00:00Z"}, {"targets": {}}):
        planted = dataclasses.replace(card, extra={**card.extra, **extra})
        assert hello_leaks(planted, labels), extra
