"""Staff reruns: a new run of a submission, pinned to what the previous run used.

A rerun never mutates an earlier run or report: it is a new ``Run`` (kind ``rerun``) with the
previous run's seed, artifact digest and (through the submission) image digest. Its report
states how it compares with the previous run: the pipeline puts ``compare_runs(...)`` under
``comparison`` in the new report's predicate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.service import Caller
from app.clock import Clock
from app.hardware import HARDWARE_CLASSES
from app.queue import RunQueue, enqueue_run_after_commit
from app.runs import service as runs
from app.runs.models import TERMINAL_RUN, Run, RunKind, RunStatus
from app.runs.repository import RunRepository
from app.runs.staff_errors import HardwareClassUnknown, RunInProgress
from app.submissions.errors import SubmissionNotFound
from app.submissions.models import Submission


def request_rerun(
    session: Session, clock: Clock, queue: RunQueue, caller: Caller, submission_id: str, *,
    reason: str, hardware_class: str | None = None,
) -> Run:
    """Create and (after commit) enqueue a rerun. Staff only; the endpoint checks the role."""
    # The row lock makes two concurrent rerun requests for one submission run one after the
    # other, so the second sees the first one's run in progress.
    sub = session.get(Submission, submission_id, with_for_update=True, populate_existing=True)
    if sub is None:
        raise SubmissionNotFound(f"submission {submission_id} not found")
    history = RunRepository(session).for_submission(sub.id)
    busy = [r.id for r in history if RunStatus(r.status) not in TERMINAL_RUN]
    if busy:
        raise RunInProgress(f"run {busy[-1]} of submission {sub.id} is not finished; "
                            "cancel it or wait before asking for a rerun")
    _check_hardware_class(sub, hardware_class)
    previous = previous_run(history)
    run = runs.create_run(session, clock, sub, kind=RunKind.rerun, actor=caller.name,
                          hardware_class=hardware_class, reason=reason, previous=previous)
    audit.record(session, clock, actor=caller.name, action="run.rerun",
                 target_type="submission", target_id=sub.id, reason=reason,
                 detail={"run_id": run.id, "previous_run_id": previous.id if previous else None,
                         "hardware_class": run.hardware_class, "seed": run.seed,
                         "artifact_sha256": run.artifact_sha256,
                         "image": run.image_digest_ref})
    enqueue_run_after_commit(session, queue, run.id, run.hardware_class)
    return run


def _check_hardware_class(sub: Submission, hardware_class: str | None) -> None:
    if hardware_class is None:
        return
    if sub.hardware_class not in HARDWARE_CLASSES:
        raise HardwareClassUnknown(f"submission {sub.id} is not executed on a hardware class "
                                   f"({sub.hardware_class}); it cannot be moved to another")
    if hardware_class not in HARDWARE_CLASSES:
        raise HardwareClassUnknown(f"unknown hardware class {hardware_class!r}; known: "
                                   f"{', '.join(sorted(HARDWARE_CLASSES))}")


def previous_run(history: Sequence[Run]) -> Run | None:
    """The run a rerun repeats and is compared with: the latest completed run (it has a report
    and a pinned seed and artifact digest), else the latest run of any outcome."""
    completed = [r for r in history if r.status == RunStatus.completed.value]
    if completed:
        return completed[-1]
    return history[-1] if history else None


def compare_runs(previous_report_predicate: Mapping[str, Any],
                 new_predicate: Mapping[str, Any]) -> dict[str, Any]:
    """How a new run's results compare with the previous run's report predicate.

    Metrics may be plain numbers or ``{"mean": .., "std": .., "n": ..}`` (repeated runs); the
    delta is between means. Non-finite values become ``None`` (the report is JCS-serialized,
    which refuses NaN). The output is deterministic and JSON-ready.
    """
    old_hash = previous_report_predicate.get("prediction_hash")
    new_hash = new_predicate.get("prediction_hash")
    old_metrics = _task_metrics(previous_report_predicate)
    new_metrics = _task_metrics(new_predicate)
    deltas = {task: _metric_deltas(old_metrics[task], new_metrics[task])
              for task in sorted(set(old_metrics) & set(new_metrics))}
    finite = [abs(d["delta"]) for task in deltas.values() for d in task.values()
              if d["delta"] is not None]
    return {
        "previous_run_id": previous_report_predicate.get("run_id"),
        "previous_report_version": previous_report_predicate.get("report_version"),
        "previous_prediction_hash": old_hash,
        "prediction_hash": new_hash,
        "same_prediction_hash": old_hash is not None and old_hash == new_hash,
        "same_seed": previous_report_predicate.get("seed") == new_predicate.get("seed"),
        "metric_deltas": deltas,
        "max_abs_delta": max(finite) if finite else None,
        "tasks_only_in_previous": sorted(set(old_metrics) - set(new_metrics)),
        "tasks_only_in_new": sorted(set(new_metrics) - set(old_metrics)),
    }


def _task_metrics(predicate: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    raw = predicate.get("metrics") or {}
    out: dict[str, dict[str, float | None]] = {}
    if not isinstance(raw, Mapping):
        return out
    for task, metrics in raw.items():
        if isinstance(metrics, Mapping):
            out[str(task)] = {str(name): _value(v) for name, v in metrics.items()}
    return out


def _value(raw: Any) -> float | None:
    if isinstance(raw, Mapping):
        raw = raw.get("mean")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    return float(raw) if math.isfinite(raw) else None


def _metric_deltas(old: Mapping[str, float | None], new: Mapping[str, float | None]
                   ) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        delta = after - before if before is not None and after is not None else None
        relative = (delta / abs(before) if delta is not None and before not in (None, 0.0)
                    else None)
        out[name] = {"previous": before, "new": after, "delta": delta, "relative": relative}
    return out
