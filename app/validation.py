"""Submission rules from the seed's "Submission surface changes" and the catalog's cards.

``validate_submission`` returns every problem it finds (the API answers 422 with all of them)
rather than stopping at the first. Codes are stable identifiers; messages are for people.

Rules:

* ``execution_mode`` is ``sealed`` or ``self_attested``; ``self_attested`` is accepted for the
  ``public_dev`` tier only. Every ``blind_archive`` and ``live`` task requires ``sealed``
  (``requires_sealed``), and every task's tier must be the submission's tier.
* Metadata: ``model_name``, ``organization``, ``training_cutoff`` and ``frozen_at`` are present;
  times carry a timezone; ``frozen_at >= training_cutoff``; ``frozen_at`` is not after the
  platform received the submission (when that time is given).
* A pretraining manifest (an object with a ``datasets`` list of names; the API's
  ``pretraining_data_manifest`` name list is accepted as that list) is required, with at least
  one entry, when any selected task card says ``requires_pretraining_manifest``.
* ``sealed`` needs an image and carries no predictions; ``self_attested`` carries predictions
  (``{task_id: [{"window_id", "forecasts"}]}``) for every window of every task, and no image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.catalog import Catalog, UnknownSuite, UnknownTask
from app.catalog.cards import TIERS, ForecastRequest, TaskCard
from app.scoring.predictions import parse_forecasts

EXECUTION_MODES = ("sealed", "self_attested")
SEALED_TIERS = frozenset({"blind_archive", "live"})
MAX_PROBLEMS_PER_TASK = 50
_METADATA_FIELDS = (
    "model_name",
    "organization",
    "training_cutoff",
    "frozen_at",
    "pretraining_manifest",
    "pretraining_data_manifest",
)


@dataclass(frozen=True)
class ValidationProblem:
    code: str
    message: str
    field: str | None = None  # where in the submission, e.g. "frozen_at" or "predictions.<task>"

    def to_dict(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.message, "field": self.field}


@dataclass(frozen=True)
class SubmissionInput:
    """What an author submits, as far as the rules care."""

    tier: str
    execution_mode: str
    tasks: list[str] = field(default_factory=list)
    suite: str | None = None
    model_name: str | None = None
    organization: str | None = None
    training_cutoff: datetime | str | None = None
    frozen_at: datetime | str | None = None
    pretraining_manifest: Mapping[str, Any] | None = None
    image: str | None = None
    predictions: Mapping[str, Any] | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SubmissionInput:
        """Accept flat fields or metadata nested under ``"metadata"`` (the API's shape)."""
        meta = data.get("metadata")
        merged = dict(data)
        if isinstance(meta, Mapping):
            merged.update({k: meta[k] for k in _METADATA_FIELDS if k in meta})
        return cls(
            tier=str(merged.get("tier", "")),
            execution_mode=str(merged.get("execution_mode", "")),
            tasks=list(merged.get("tasks") or []),
            suite=merged.get("suite"),
            model_name=merged.get("model_name"),
            organization=merged.get("organization"),
            training_cutoff=merged.get("training_cutoff"),
            frozen_at=merged.get("frozen_at"),
            pretraining_manifest=_manifest_of(merged),
            image=merged.get("image"),
            predictions=merged.get("predictions"),
        )


def _manifest_of(fields: Mapping[str, Any]) -> Any:
    """``pretraining_manifest`` as given, or the API's ``pretraining_data_manifest`` name list."""
    if fields.get("pretraining_manifest") is not None:
        return fields["pretraining_manifest"]
    names = fields.get("pretraining_data_manifest")
    return {"datasets": list(names)} if isinstance(names, list) else None


def resolve_tasks(
    sub: SubmissionInput, catalog: Catalog
) -> tuple[list[str], list[ValidationProblem]]:
    """The task ids a submission selects (explicit tasks, then its suite), in order, once each."""
    problems: list[ValidationProblem] = []
    chosen = list(sub.tasks)
    if sub.suite:
        try:
            chosen += catalog.suite(sub.suite)
        except UnknownSuite as exc:
            problems.append(ValidationProblem("unknown_suite", str(exc), "suite"))
    catalog_ids = set(catalog.task_ids())
    known: list[str] = []
    for task_id in chosen:
        if task_id not in catalog_ids:
            message = str(UnknownTask(task_id, catalog.version))
            problems.append(ValidationProblem("unknown_task", message, "tasks"))
        elif task_id not in known:
            known.append(task_id)
    if not chosen and not problems:
        problems.append(ValidationProblem("no_tasks", "select a task or a suite", "tasks"))
    return known, problems


def _mode_and_tier(sub: SubmissionInput, cards: Sequence[TaskCard]) -> list[ValidationProblem]:
    problems = []
    if sub.tier not in TIERS:
        problems.append(
            ValidationProblem("unknown_tier", f"tier must be one of {', '.join(TIERS)}", "tier")
        )
    if sub.execution_mode not in EXECUTION_MODES:
        problems.append(
            ValidationProblem(
                "unknown_execution_mode",
                "execution_mode must be sealed or self_attested",
                "execution_mode",
            )
        )
    if sub.execution_mode == "self_attested" and sub.tier in SEALED_TIERS:
        problems.append(
            ValidationProblem(
                "self_attested_not_allowed",
                f"self_attested submissions are accepted for public_dev only, not {sub.tier}",
                "execution_mode",
            )
        )
    for card in cards:
        if card.tier != sub.tier:
            problems.append(
                ValidationProblem(
                    "tier_mismatch",
                    f"task {card.task_id} is in tier {card.tier}, not {sub.tier}",
                    "tasks",
                )
            )
        if card.tier in SEALED_TIERS and sub.execution_mode != "sealed":
            problems.append(
                ValidationProblem(
                    "requires_sealed",
                    f"task {card.task_id} ({card.tier}) requires a sealed run",
                    "execution_mode",
                )
            )
    return problems


def _as_time(
    value: datetime | str | None, name: str, problems: list[ValidationProblem]
) -> datetime | None:
    if value is None or value == "":
        problems.append(ValidationProblem("missing_metadata", f"{name} is required", name))
        return None
    try:
        ts = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    except (TypeError, ValueError):
        problems.append(ValidationProblem("invalid_datetime", f"{name} is not ISO 8601", name))
        return None
    if ts.tzinfo is None:
        problems.append(ValidationProblem("invalid_datetime", f"{name} needs a timezone", name))
        return None
    return ts


def _metadata(sub: SubmissionInput, received_at: datetime | None) -> list[ValidationProblem]:
    problems: list[ValidationProblem] = []
    for name in ("model_name", "organization"):
        value = getattr(sub, name)
        if not isinstance(value, str) or not value.strip():
            problems.append(ValidationProblem("missing_metadata", f"{name} is required", name))
    cutoff = _as_time(sub.training_cutoff, "training_cutoff", problems)
    frozen = _as_time(sub.frozen_at, "frozen_at", problems)
    if cutoff and frozen and frozen < cutoff:
        problems.append(
            ValidationProblem(
                "frozen_before_training_cutoff",
                "frozen_at is earlier than training_cutoff: a model cannot be frozen before its "
                "training data ends",
                "frozen_at",
            )
        )
    if frozen and received_at and frozen > received_at:
        problems.append(
            ValidationProblem(
                "frozen_after_submission",
                "frozen_at is later than the platform received the submission",
                "frozen_at",
            )
        )
    return problems


def _manifest_problem(manifest: Any) -> str | None:
    datasets = manifest.get("datasets") if isinstance(manifest, Mapping) else None
    if not isinstance(datasets, list) or not all(
        isinstance(d, str) or (isinstance(d, Mapping) and isinstance(d.get("name"), str))
        for d in datasets
    ):
        return (
            'the pretraining manifest must be an object with a "datasets" list of names or '
            '{"name": ...} objects'
        )
    return None


def _manifest(sub: SubmissionInput, cards: Sequence[TaskCard]) -> list[ValidationProblem]:
    """An empty manifest cannot tell "no pretraining data" from "not declared", so tasks that
    require one need at least one entry; a model without pretraining data declares ``"none"``."""
    manifest = sub.pretraining_manifest
    where = "pretraining_manifest"
    if manifest is not None and (problem := _manifest_problem(manifest)):
        return [ValidationProblem("invalid_pretraining_manifest", problem, where)]
    needed_by = [c.task_id for c in cards if c.requires_pretraining_manifest]
    if needed_by and not (manifest and manifest.get("datasets")):
        message = (
            f"tasks {', '.join(needed_by)} require a pretraining manifest that lists the "
            'pretraining datasets (declare ["none"] if there were none)'
        )
        return [ValidationProblem("pretraining_manifest_required", message, where)]
    return []


def _artifacts(sub: SubmissionInput) -> list[ValidationProblem]:
    if sub.execution_mode == "sealed":
        problems = []
        if not sub.image:
            problems.append(ValidationProblem("image_required", "sealed needs an image", "image"))
        if sub.predictions is not None:
            problems.append(
                ValidationProblem(
                    "predictions_not_allowed",
                    "a sealed run makes its own predictions",
                    "predictions",
                )
            )
        return problems
    if sub.execution_mode == "self_attested":
        problems = []
        if sub.image:
            problems.append(
                ValidationProblem(
                    "image_not_allowed",
                    "a self_attested submission carries predictions, not an "
                    "image; submit a sealed run to have an image evaluated",
                    "image",
                )
            )
        if not isinstance(sub.predictions, Mapping):
            problems.append(
                ValidationProblem(
                    "predictions_required",
                    "a self_attested submission carries predictions: "
                    "{task_id: [{window_id, forecasts}]}",
                    "predictions",
                )
            )
        return problems
    return []


def validate_self_attested_predictions(
    card: TaskCard, requests: Sequence[ForecastRequest], predictions: Any
) -> list[ValidationProblem]:
    """Problems with one task's ``[{"window_id", "forecasts"}]`` list (empty when it is valid)."""
    where = f"predictions.{card.task_id}"
    if not isinstance(predictions, list):
        return [ValidationProblem("invalid_predictions", "must be a list of windows", where)]
    by_id = {r.window_id: r for r in requests}
    problems: list[ValidationProblem] = []
    seen: set[str] = set()
    for entry in predictions:
        window_id = entry.get("window_id") if isinstance(entry, Mapping) else None
        if not isinstance(window_id, str) or window_id not in by_id:
            problems.append(
                ValidationProblem(
                    "unknown_window", f"{card.task_id}: no window {window_id!r}", where
                )
            )
            continue
        if window_id in seen:
            problems.append(
                ValidationProblem("duplicate_window", f"{window_id} is predicted twice", where)
            )
            continue
        seen.add(window_id)
        _, found = parse_forecasts(card, by_id[window_id], entry.get("forecasts"))
        problems.extend(
            ValidationProblem("invalid_predictions", f"{window_id}: {p}", where) for p in found
        )
    problems.extend(
        ValidationProblem("missing_window", f"{w} has no prediction", where)
        for w in by_id
        if w not in seen
    )
    return problems[:MAX_PROBLEMS_PER_TASK]


def _predictions(
    sub: SubmissionInput, task_ids: Sequence[str], catalog: Catalog
) -> list[ValidationProblem]:
    if sub.execution_mode != "self_attested" or not isinstance(sub.predictions, Mapping):
        return []
    problems = [
        ValidationProblem(
            "unexpected_predictions", f"{key!r} is not a selected task", f"predictions.{key}"
        )
        for key in sub.predictions
        if key not in task_ids
    ]
    for task_id in task_ids:
        if task_id not in sub.predictions:
            problems.append(
                ValidationProblem(
                    "missing_predictions",
                    f"no predictions for task {task_id}",
                    f"predictions.{task_id}",
                )
            )
            continue
        problems += validate_self_attested_predictions(
            catalog.card(task_id), catalog.requests(task_id), sub.predictions[task_id]
        )
    return problems


def validate_submission(
    sub: SubmissionInput | Mapping[str, Any],
    catalog: Catalog,
    *,
    received_at: datetime | None = None,
) -> list[ValidationProblem]:
    """Every problem with a submission; an empty list means it may be accepted."""
    if not isinstance(sub, SubmissionInput):
        sub = SubmissionInput.from_mapping(sub)
    task_ids, problems = resolve_tasks(sub, catalog)
    cards = [catalog.shared_card(t) for t in task_ids]  # read only
    problems += _mode_and_tier(sub, cards)
    problems += _metadata(sub, received_at)
    problems += _manifest(sub, cards)
    problems += _artifacts(sub)
    problems += _predictions(sub, task_ids, catalog)
    return problems
