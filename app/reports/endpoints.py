from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from app.auth.errors import RoleNotAllowed, TokenInvalid, TokenMissing
from app.deps import CatalogDep, ClockDep, KeyRingDep, SessionDep, StaffDep, StoreDep
from app.errors import error_responses
from app.reports.recompute import recompute_report
from app.runs.errors import ReportNotFound, RunNotFound

router = APIRouter(tags=["reports"])


class RecomputeRequest(BaseModel):
    reason: str = Field(min_length=3, max_length=2000)


class RecomputeOut(BaseModel):
    run_id: str
    version: int
    envelope_sha256: str
    differences: list[str]
    url: str


@router.get("/v1/keys")
def jwks(keyring: KeyRingDep, response: Response) -> dict[str, Any]:
    """Public keys as a JWKS (OKP/Ed25519). Report and log keys are listed with their purpose
    and validity window; retired keys stay listed so old reports remain verifiable."""
    response.headers["Cache-Control"] = "public, max-age=300"
    return keyring.jwks()


@router.post(
    "/v1/runs/{run_id}/recompute", status_code=201, response_model=RecomputeOut,
    responses=error_responses(TokenMissing, TokenInvalid, RoleNotAllowed, RunNotFound,
                              ReportNotFound),
)
def recompute(
    run_id: str, body: RecomputeRequest, session: SessionDep, staff: StaffDep, clock: ClockDep,
    store: StoreDep, keyring: KeyRingDep, catalog: CatalogDep,
) -> RecomputeOut:
    """Staff: rescore from the archived predictions and sign a new report version."""
    report, differences = recompute_report(session, clock, store, keyring, catalog,
                                           run_id=run_id, actor=staff.name, reason=body.reason)
    return RecomputeOut(run_id=run_id, version=report.version,
                        envelope_sha256=report.envelope_sha256, differences=differences,
                        url=f"/v1/runs/{run_id}/report?version={report.version}")
