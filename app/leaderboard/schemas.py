from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class LeaderboardRow(BaseModel):
    rank: int | None
    submission_id: str
    run_id: str
    model_name: str
    organization: str
    provenance: str  # "sealed" | "self_attested"
    operational_level: str | None  # hosted_sealed | local_sealed_mvp | None (self-attested)
    score: float | None  # tier_weighted_score, or the task's ranked skill when a task is asked
    score_all_windows: float | None
    F: float | None
    U: float | None
    E: float | None
    E_rank: int | None  # among the rows whose E is comparable (sealed unless asked otherwise)
    E_comparable: bool
    prediction_hash: str | None
    finished_at: datetime | None
    report_url: str


class Leaderboard(BaseModel):
    tier: str
    task: str | None
    provenance: str
    e_compared_across: str
    ranked_by: str
    rows: list[LeaderboardRow]
