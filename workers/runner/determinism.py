"""The determinism probe (seed contract item 4, DESIGN.md section 1 step 6).

The first ``n`` windows of a task are re-run in a FRESH container with the same seed; the probe's
forecasts are compared with the main run's answers for those windows by exact JSON equality
(``forecasts`` ordered by ``item_id``; numbers compared as parsed, so ``1.0`` equals ``1.0`` and
any bit of difference is a difference). A submission whose answers differ is non-deterministic:
the pipeline repeats the full run ``card.determinism_repeats`` times and reports mean and std.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.catalog.cards import ForecastRequest, TaskCard
from app.clock import Clock
from workers.runner.forward import Cancel, DriverLimits, TaskOutcome, drive_task
from workers.runner.port import RunnerBackend, SealedSpec


@dataclass(frozen=True)
class DeterminismProbe:
    """Result of a probe; truthy when the submission answered identically."""

    deterministic: bool
    conclusive: bool  # every probed window had an ok answer in both runs
    compared_windows: list[str]
    mismatched_windows: list[str]
    outcome: TaskOutcome
    probe_records: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.deterministic


def comparable_forecasts(answer: Any) -> list[Any] | None:
    """An ok answer's ``forecasts`` sorted by ``item_id`` (the part that must be identical)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("forecasts"), list):
        return None
    return sorted(answer["forecasts"], key=lambda fc: str(fc.get("item_id")))


def ok_answers_by_window(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {str(r["window_id"]): r["answer"] for r in records if r.get("status") == "ok"}


def probe_determinism(
    backend: RunnerBackend,
    spec_factory: Callable[[], SealedSpec],
    card: TaskCard,
    requests: Sequence[ForecastRequest],
    seed: int,
    n_windows: int,
    reference_records: Sequence[Mapping[str, Any]],
    *,
    run_id: str,
    attempt: int = 0,
    clock: Clock | None = None,
    limits: DriverLimits | None = None,
    cancel: Cancel = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> DeterminismProbe:
    """Re-run ``requests[:n_windows]`` in a fresh container (``spec_factory()`` must give a new
    container name) with ``seed``; compare with ``reference_records`` (the main run's records).

    ``on_record`` receives the probe's own records (e.g. for a separate probe log); they are also
    returned in ``probe_records``.
    """
    probe_requests = list(requests[:n_windows])
    collected: list[dict[str, Any]] = []

    def keep(record: dict[str, Any]) -> None:
        collected.append(record)
        if on_record is not None:
            on_record(record)

    proc = backend.start(spec_factory())
    outcome = drive_task(
        proc, card=card, requests=probe_requests, seed=seed, run_id=run_id, on_record=keep,
        clock=clock, limits=limits, attempt=attempt, cancel=cancel,
    )
    reference = ok_answers_by_window(reference_records)
    probed = ok_answers_by_window(collected)
    compared, mismatched = [], []
    for request in probe_requests:
        window = request.window_id
        if window not in reference or window not in probed:
            continue
        compared.append(window)
        if comparable_forecasts(reference[window]) != comparable_forecasts(probed[window]):
            mismatched.append(window)
    return DeterminismProbe(
        deterministic=not mismatched and len(compared) == len(probe_requests),
        conclusive=len(compared) == len(probe_requests) or bool(mismatched),
        compared_windows=compared,
        mismatched_windows=mismatched,
        outcome=outcome,
        probe_records=collected,
    )
