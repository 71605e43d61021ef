"""Quota rules. ``enforce`` runs inside the submission's transaction, before anything is stored;
``status`` answers ``GET /v1/me/quota`` and fills the ``X-Quota-*`` headers."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.auth.models import Role
from app.auth.service import Caller
from app.clock import Clock
from app.quotas.errors import QuotaExceeded
from app.quotas.repository import QuotaRepository
from app.settings import Settings

WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class QuotaPolicy:
    submissions_per_day: int
    runs_in_flight: int
    in_flight_retry_after_s: int = 60

    @classmethod
    def from_settings(cls, settings: Settings) -> QuotaPolicy:
        return cls(settings.quota_submissions_per_day, settings.quota_runs_in_flight,
                   settings.quota_in_flight_retry_after_s)


@dataclass(frozen=True)
class QuotaStatus:
    exempt: bool
    now: datetime
    submissions_limit: int
    submissions_used: int
    window_resets_at: datetime  # when the oldest counted submission leaves the 24 h window
    runs_in_flight_limit: int
    runs_in_flight_used: int
    in_flight_retry_after_s: int

    @property
    def submissions_remaining(self) -> int:
        return max(0, self.submissions_limit - self.submissions_used)

    @property
    def runs_in_flight_remaining(self) -> int:
        return max(0, self.runs_in_flight_limit - self.runs_in_flight_used)

    def exceeded(self) -> list[str]:
        if self.exempt:
            return []
        out = []
        if self.submissions_used >= self.submissions_limit:
            out.append("submissions_per_day")
        if self.runs_in_flight_used >= self.runs_in_flight_limit:
            out.append("runs_in_flight")
        return out

    def retry_after_s(self) -> int:
        waits = [0]
        if "submissions_per_day" in self.exceeded():
            waits.append(math.ceil((self.window_resets_at - self.now).total_seconds()))
        if "runs_in_flight" in self.exceeded():
            waits.append(self.in_flight_retry_after_s)
        return max(1, *waits)


def status(session: Session, clock: Clock, policy: QuotaPolicy, caller: Caller) -> QuotaStatus:
    """The caller's quota now. Staff are exempt (their usage is still reported)."""
    now = clock.now()
    return counted(policy, caller, now, QuotaRepository(session).usage(caller.id, now - WINDOW))


def counted(policy: QuotaPolicy, caller: Caller, now: datetime,
            usage: tuple[int, datetime | None, int]) -> QuotaStatus:
    """The quota from ``usage`` (``QuotaRepository.usage`` since ``now - WINDOW``: submissions
    counted, the oldest of them, runs in flight)."""
    used, oldest, in_flight = usage
    return QuotaStatus(
        exempt=caller.role is Role.staff, now=now,
        submissions_limit=policy.submissions_per_day, submissions_used=used,
        window_resets_at=(oldest + WINDOW) if oldest is not None else now,
        runs_in_flight_limit=policy.runs_in_flight,
        runs_in_flight_used=in_flight,
        in_flight_retry_after_s=policy.in_flight_retry_after_s,
    )


def enforce(session: Session, clock: Clock, policy: QuotaPolicy, caller: Caller
            ) -> QuotaStatus | None:
    """Raise ``QuotaExceeded`` (429) if one more submission would go over a quota; else the
    quota as counted (None for staff, who are exempt and not counted).

    Locks the author's principal row first, so concurrent submissions by one author are counted
    one after the other; the lock is held until the request's transaction ends.
    """
    if caller.role is Role.staff:
        return None
    QuotaRepository(session).lock_principal(caller.id)
    return admit(status(session, clock, policy, caller))


def admit(current: QuotaStatus) -> QuotaStatus:
    """``current`` if one more submission fits; else raise ``QuotaExceeded`` (429)."""
    exceeded = current.exceeded()
    if not exceeded:
        return current
    retry_after = current.retry_after_s()
    raise QuotaExceeded(
        {"message": f"quota exceeded: {', '.join(exceeded)}", "exceeded": exceeded,
         "retry_after_s": retry_after, **as_dict(current)},
        headers={"Retry-After": str(retry_after), **headers(current)},
    )


def with_one_more(current: QuotaStatus, received_at: datetime) -> QuotaStatus:
    """``current`` (from ``enforce``) once the submission it admitted, received at
    ``received_at``, is stored with its queued initial run: what ``status`` would count now,
    without asking again. Exact while ``enforce``'s lock is held (no other submission of the
    author can be counted in between)."""
    resets = current.window_resets_at if current.submissions_used else received_at + WINDOW
    return replace(current, submissions_used=current.submissions_used + 1,
                   window_resets_at=resets,
                   runs_in_flight_used=current.runs_in_flight_used + 1)


def headers(current: QuotaStatus) -> dict[str, str]:
    """``X-Quota-*`` headers. Limit/Remaining/Reset describe the daily submission quota (Reset is
    a Unix time in seconds); the in-flight quota has its own pair. Staff get none."""
    if current.exempt:
        return {}
    return {
        "X-Quota-Limit": str(current.submissions_limit),
        "X-Quota-Remaining": str(current.submissions_remaining),
        "X-Quota-Reset": str(math.ceil(current.window_resets_at.timestamp())),
        "X-Quota-In-Flight-Limit": str(current.runs_in_flight_limit),
        "X-Quota-In-Flight-Remaining": str(current.runs_in_flight_remaining),
    }


def as_dict(current: QuotaStatus) -> dict[str, Any]:
    return {
        "exempt": current.exempt,
        "submissions_per_day": {
            "limit": current.submissions_limit, "used": current.submissions_used,
            "remaining": current.submissions_remaining,
            "resets_at": current.window_resets_at.isoformat(),
            "window_s": int(WINDOW.total_seconds()),
        },
        "runs_in_flight": {
            "limit": current.runs_in_flight_limit, "used": current.runs_in_flight_used,
            "remaining": current.runs_in_flight_remaining,
        },
    }
