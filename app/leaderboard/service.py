"""Leaderboard rules.

* One row per submission: its latest completed run.
* ``provenance=sealed`` (the default) is the sealed-only view: self-attested rows never appear
  in it. ``provenance=all`` shows both, each row flagged.
* E (efficiency) is ranked only across rows whose E is comparable: sealed runs on the platform's
  hardware. ``compare_e=all`` ranks self-attested E too, still flagged as not comparable.
* Ranked by ``tier_weighted_score`` over future-only windows (labels published after the model
  was frozen), or, for one task, by that task's future-only MASE skill versus seasonal naive.
  ``basis=all_windows`` ranks by every window instead and says so: on historical data most
  windows' labels predate ``frozen_at``, so that view is for development, not for claims.
  Rows without a score sort last, unranked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.leaderboard.schemas import Leaderboard, LeaderboardRow
from app.runs.models import Run, RunStatus
from app.submissions.models import Submission

ProvenanceView = Literal["sealed", "all"]
Basis = Literal["future_only", "all_windows"]


def _latest_completed(session: Session, tier: str, task: str | None
                      ) -> list[tuple[Submission, Run]]:
    stmt = (select(Submission, Run).join(Run, Run.submission_id == Submission.id)
            .where(Submission.tier == tier, Run.status == RunStatus.completed.value)
            .order_by(Run.finished_at.desc()))
    seen: set[str] = set()
    out: list[tuple[Submission, Run]] = []
    for sub, run in session.execute(stmt).all():
        if sub.id in seen or (task is not None and task not in sub.tasks):
            continue
        seen.add(sub.id)
        out.append((sub, run))
    return out


def _row(sub: Submission, run: Run, task: str | None) -> LeaderboardRow:
    board: dict[str, Any] = (run.summary or {}).get("leaderboard") or {}
    if task is None:
        score, score_all = board.get("tier_weighted_score"), \
            board.get("tier_weighted_score_all_windows")
    else:
        skills = (board.get("tasks") or {}).get(task) or {}
        score, score_all = skills.get("ranked.skill.mase"), skills.get("all.skill.mase")
    sealed = sub.execution_mode == "sealed"
    return LeaderboardRow(
        rank=None, submission_id=sub.id, run_id=run.id,
        model_name=str(sub.meta.get("model_name", "")),
        organization=str(sub.meta.get("organization", "")),
        provenance="sealed" if sealed else "self_attested",
        operational_level=run.operational_level if sealed else None,
        score=score, score_all_windows=score_all, F=board.get("F"), U=board.get("U"),
        E=board.get("E"), E_rank=None, E_comparable=bool(board.get("E_comparable")) and sealed,
        prediction_hash=run.prediction_hash, finished_at=run.finished_at,
        report_url=f"/v1/runs/{run.id}/report",
    )


def _rank(rows: Sequence[LeaderboardRow], key: str, field: str,
          eligible: Any = lambda r: True) -> None:
    ranked = sorted((r for r in rows if getattr(r, key) is not None and eligible(r)),
                    key=lambda r: -float(getattr(r, key)))
    for position, row in enumerate(ranked, start=1):
        setattr(row, field, position)


def build(session: Session, *, tier: str, task: str | None, provenance: ProvenanceView,
          compare_e: ProvenanceView, basis: Basis = "future_only") -> Leaderboard:
    rows = [_row(s, r, task) for s, r in _latest_completed(session, tier, task)]
    if provenance == "sealed":
        rows = [r for r in rows if r.provenance == "sealed"]
    _rank(rows, "score" if basis == "future_only" else "score_all_windows", "rank")
    _rank(rows, "E", "E_rank",
          eligible=(lambda r: True) if compare_e == "all" else (lambda r: r.E_comparable))
    rows.sort(key=lambda r: (r.rank is None, r.rank or 0, r.model_name))
    return Leaderboard(tier=tier, task=task, provenance=provenance,
                       e_compared_across="all rows" if compare_e == "all" else "sealed rows",
                       ranked_by=_ranked_by(task, basis), rows=rows)


def _ranked_by(task: str | None, basis: Basis) -> str:
    if task:
        return "ranked.skill.mase" if basis == "future_only" else "all.skill.mase"
    return "tier_weighted_score" if basis == "future_only" else "tier_weighted_score_all_windows"
