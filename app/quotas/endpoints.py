from __future__ import annotations

from fastapi import APIRouter, Response

from app.auth.errors import TokenInvalid, TokenMissing
from app.deps import CallerDep, ClockDep, SessionDep, SettingsDep
from app.errors import error_responses
from app.quotas import service
from app.quotas.schemas import QuotaOut

router = APIRouter(prefix="/v1/me", tags=["quotas"])


@router.get("/quota", response_model=QuotaOut,
            responses=error_responses(TokenMissing, TokenInvalid))
def get_quota(session: SessionDep, caller: CallerDep, clock: ClockDep, settings: SettingsDep,
              response: Response) -> QuotaOut:
    """Your quotas right now: submissions in the rolling 24 hours and runs in flight. Runs that
    failed with ``platform_error`` and cancelled runs never count."""
    current = service.status(session, clock, service.QuotaPolicy.from_settings(settings), caller)
    response.headers.update(service.headers(current))
    return QuotaOut.model_validate(service.as_dict(current))
