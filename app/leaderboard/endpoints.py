from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.auth.errors import TokenInvalid, TokenMissing
from app.catalog.cards import Tier
from app.deps import CallerDep, CatalogDep, SessionDep
from app.errors import NotFound, error_responses
from app.leaderboard import service
from app.leaderboard.schemas import Leaderboard

router = APIRouter(prefix="/v1", tags=["leaderboard"])


class LeaderboardTaskNotFound(NotFound):
    pass


@router.get("/leaderboard", response_model=Leaderboard,
            responses=error_responses(TokenMissing, TokenInvalid, LeaderboardTaskNotFound))
def leaderboard(
    session: SessionDep, caller: CallerDep, catalog: CatalogDep, tier: Tier,
    task: str | None = None,
    provenance: Annotated[service.ProvenanceView, Query(
        description="sealed: the sealed-only view (default); all: self-attested rows too, "
                    "flagged")] = "sealed",
    compare_e: Annotated[service.ProvenanceView, Query(
        description="which rows E is ranked across (default: sealed rows only)")] = "sealed",
    basis: Annotated[service.Basis, Query(
        description="future_only: rank on windows whose labels came after frozen_at "
                    "(default); all_windows: every window, for development")] = "future_only",
) -> Leaderboard:
    """Completed runs ranked per tier, or per task; every row says its provenance."""
    if task is not None and task not in catalog.task_ids():
        raise LeaderboardTaskNotFound(f"task {task} not found")
    return service.build(session, tier=tier, task=task, provenance=provenance,
                         compare_e=compare_e, basis=basis)
