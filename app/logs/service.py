from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.errors import RoleNotAllowed
from app.auth.models import Role
from app.auth.service import Caller
from app.clock import Clock
from app.runs.errors import RunNotFound
from app.runs.repository import RunRepository
from app.runs.staff_errors import ArchiveUnavailable, LogNotAvailable, LogRestricted
from app.storage import ArtifactStore, ObjectNotFound, StoreError
from app.storage.layout import STDERR, run_key
from app.submissions import service as submissions
from app.submissions.errors import SubmissionNotFound

OPEN_TIERS = frozenset({"public_dev"})


@dataclass(frozen=True)
class RunLog:
    text: str
    size: int  # bytes archived
    truncated: bool


def read_run_log(session: Session, clock: Clock, store: ArtifactStore, caller: Caller,
                 run_id: str, cap_bytes: int) -> RunLog:
    """The archived stderr of ``run_id``, cut at ``cap_bytes``, if ``caller`` may read it."""
    run = RunRepository(session).get(run_id)
    if run is None:
        raise RunNotFound(f"run {run_id} not found")
    try:
        sub = submissions.get_visible(session, caller, run.submission_id)
    except SubmissionNotFound as exc:
        raise RunNotFound(f"run {run_id} not found") from exc
    if caller.role is Role.reader:
        raise RoleNotAllowed("run logs are shown to the author and staff only")
    if sub.tier not in OPEN_TIERS and caller.role is not Role.staff:
        raise LogRestricted(f"the stderr of a {sub.tier} run is shown to staff only")
    try:
        data = store.get(run_key(run.id, STDERR))
    except ObjectNotFound as exc:
        raise LogNotAvailable(f"run {run_id} has no archived log (status {run.status})") from exc
    except StoreError as exc:
        raise ArchiveUnavailable(f"the archive store cannot be read: {exc}") from exc
    if sub.tier not in OPEN_TIERS:
        audit.record(session, clock, actor=caller.name, action="run.logs.read",
                     target_type="run", target_id=run.id, detail={"tier": sub.tier})
    return RunLog(data[:cap_bytes].decode("utf-8", errors="replace"), len(data),
                  len(data) > cap_bytes)
