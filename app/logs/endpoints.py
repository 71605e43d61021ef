from __future__ import annotations

from functools import lru_cache
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from app.auth.errors import RoleNotAllowed, TokenInvalid, TokenMissing
from app.deps import CallerDep, ClockDep, SessionDep, SettingsDep
from app.errors import error_responses
from app.logs import service
from app.runs.errors import RunNotFound
from app.runs.staff_errors import ArchiveUnavailable, LogNotAvailable, LogRestricted
from app.settings import get_settings
from app.storage import ArtifactStore, build_store

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@lru_cache(maxsize=1)
def _store() -> ArtifactStore:
    return build_store(get_settings())


def get_archive_store() -> ArtifactStore:
    return _store()


StoreDep = Annotated[ArtifactStore, Depends(get_archive_store)]


@router.get(
    "/{run_id}/logs", response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}},
                     "description": "The run's archived stderr (UTF-8, size-capped); "
                                    "X-Log-Truncated says whether it was cut"},
               **error_responses(TokenMissing, TokenInvalid, RoleNotAllowed, LogRestricted,
                                 RunNotFound, LogNotAvailable, ArchiveUnavailable)},
)
def get_run_logs(run_id: str, session: SessionDep, caller: CallerDep, clock: ClockDep,
                 store: StoreDep, settings: SettingsDep) -> PlainTextResponse:
    """The model's stderr as archived. ``public_dev``: the author and staff;
    ``blind_archive`` and ``live``: staff only. Readers never."""
    log = service.read_run_log(session, clock, store, caller, run_id, settings.stderr_cap_bytes)
    return PlainTextResponse(log.text, headers={
        "X-Log-Truncated": "true" if log.truncated else "false",
        "X-Log-Size": str(log.size), "Cache-Control": "private, no-cache"})
