"""Task card shapes shared by the API, the runner and the scorer.

This module is the contract between the catalog (which builds cards from real data), the runner
(which sends ``ForecastRequest``s to a sealed container) and the scorer (which reads labels).
The public part of a card is what a container and an anonymous reader may see; labels and their
``available_at`` times never leave the platform side.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Tier = Literal["public_dev", "blind_archive", "live"]
TIERS: tuple[Tier, ...] = ("public_dev", "blind_archive", "live")


@dataclass(frozen=True)
class ResourceBudget:
    hardware_class: str
    latency_ms: float
    max_latency_violation_pct: float
    memory_mb: int
    startup_s: float
    wall_clock_s: float


@dataclass(frozen=True)
class WindowCard:
    """A forecast window as the public sees it: where it starts, never what follows."""

    window_id: str
    issue_time: str  # ISO 8601, UTC


@dataclass(frozen=True)
class SeriesHistory:
    item_id: str
    start: str  # ISO 8601 time of target[0]
    target: list[float]


@dataclass(frozen=True)
class ForecastRequest:
    """One window's payload: history up to the issue time, trimmed to the context budget."""

    window_id: str
    issue_time: str
    series: list[SeriesHistory]


@dataclass(frozen=True)
class WindowLabels:
    """Platform-side truth for one window. Never sent to a container or a non-staff reader."""

    window_id: str
    available_at: str  # ISO 8601: when these values became public
    targets: dict[str, list[float]]  # item_id -> horizon values


@dataclass(frozen=True)
class TaskCard:
    task_id: str
    tier: Tier
    title: str
    freq: str  # pandas frequency alias
    horizon: int
    seasonality: int
    quantile_levels: list[float]
    context_length: int
    metrics: list[str]
    source_snapshot_id: str  # "sha256:<hex>" of the canonical data snapshot
    resource_budget: ResourceBudget
    windows: list[WindowCard]
    source: str
    licence: str
    determinism_repeats: int = 3
    determinism_probe_windows: int = 2
    retrieval_snapshot: str | None = None
    requires_pretraining_manifest: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def public_dict(self) -> dict[str, Any]:
        """The card as a container and a reader see it (no labels exist on this object)."""
        return asdict(self)
