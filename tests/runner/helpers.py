"""Shared builders for runner tests: a small task card, its requests, a local fake model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from app.catalog.cards import (
    ForecastRequest,
    ResourceBudget,
    SeriesHistory,
    TaskCard,
    WindowCard,
)
from workers.runner.child import PopenSealedProcess, spawn

FAKE_MODEL = Path(__file__).with_name("fake_model.py")


def make_card(
    *,
    windows: int = 5,
    horizon: int = 4,
    latency_ms: float = 1000.0,
    violation_pct: float = 0.0,
    memory_mb: int = 128,
    startup_s: float = 5.0,
    wall_clock_s: float = 30.0,
    levels: tuple[float, ...] = (0.1, 0.5, 0.9),
    hardware_class: str = "cpu-1c-1g",
) -> TaskCard:
    return TaskCard(
        task_id="test-task",
        tier="public_dev",
        title="runner test task",
        freq="h",
        horizon=horizon,
        seasonality=2,
        quantile_levels=list(levels),
        context_length=16,
        metrics=["mase"],
        source_snapshot_id="sha256:" + "ab" * 32,
        resource_budget=ResourceBudget(
            hardware_class=hardware_class,
            latency_ms=latency_ms,
            max_latency_violation_pct=violation_pct,
            memory_mb=memory_mb,
            startup_s=startup_s,
            wall_clock_s=wall_clock_s,
        ),
        windows=[WindowCard(f"w{i}", f"2024-01-0{1 + i % 9}T00:00:00Z") for i in range(windows)],
        source="unit test",
        licence="CC0-1.0",
    )


def make_requests(card: TaskCard, items: int = 2, length: int = 12) -> list[ForecastRequest]:
    return [
        ForecastRequest(
            window_id=w.window_id,
            issue_time=w.issue_time,
            series=[
                SeriesHistory(f"item-{k}", "2024-01-01T00:00:00Z",
                              [float(i + k + n) for i in range(length)])
                for k in range(items)
            ],
        )
        for n, w in enumerate(card.windows)
    ]


def fake_process(mode: str, arg: str = "", tmp_path: Path | None = None) -> PopenSealedProcess:
    """The fake model as a plain child process (no sandbox, no cgroup)."""
    popen, started = spawn([sys.executable, "-I", "-u", str(FAKE_MODEL), mode, arg], env={})
    stderr = (tmp_path / f"{mode}.stderr") if tmp_path is not None else None
    return PopenSealedProcess(f"fake-{mode}", popen, started_ns=started, stderr_path=stderr,
                              stderr_cap=4096)


class Recorder:
    """Collects records as the pipeline would (it appends them to the Merkle log)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def __call__(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    @property
    def statuses(self) -> list[str]:
        return [r["status"] for r in self.records]
