from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.runs.models import Report, Run, RunEvent


class RunRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, run_id: str) -> Run | None:
        return self.session.get(Run, run_id)

    def get_for_update(self, run_id: str) -> Run | None:
        stmt = select(Run).where(Run.id == run_id).with_for_update()
        return self.session.scalars(stmt).first()

    def add(self, run: Run) -> None:
        self.session.add(run)
        self.session.flush()

    def add_with_event(self, run: Run, event: RunEvent) -> None:
        """A new run and its first event. Flushed one table at a time, parents first: no
        ``relationship()`` joins these mappers, and the unit of work orders rows of unrelated
        mappers arbitrarily, foreign keys or not. Whatever is pending already (a new submission
        the run points at) goes first."""
        self.session.flush()
        self.session.add(run)
        self.session.flush()
        self.session.add(event)
        self.session.flush()

    def add_event(self, event: RunEvent) -> None:
        self.session.add(event)
        self.session.flush()

    def events(self, run_id: str) -> Sequence[RunEvent]:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.id)
        return self.session.scalars(stmt).all()

    def for_submission(self, submission_id: str) -> Sequence[Run]:
        stmt = select(Run).where(Run.submission_id == submission_id).order_by(Run.created_at)
        return self.session.scalars(stmt).all()

    def compare_and_set_status(self, run_id: str, expected: set[str], status: str,
                               now: datetime, worker: str | None = None) -> bool:
        """Atomic transition: only one of any number of concurrent callers wins."""
        values: dict[str, object] = {"status": status, "status_changed_at": now}
        if worker is not None:
            values["worker"] = worker
            values["heartbeat_at"] = now
        stmt = (update(Run).where(Run.id == run_id, Run.status.in_(expected)).values(**values)
                .execution_options(synchronize_session=False))
        result = self.session.execute(stmt)
        return bool(getattr(result, "rowcount", 0) == 1)

    def latest_report(self, run_id: str) -> Report | None:
        stmt = select(Report).where(Report.run_id == run_id).order_by(Report.version.desc())
        return self.session.scalars(stmt).first()

    def reports(self, run_id: str) -> Sequence[Report]:
        stmt = select(Report).where(Report.run_id == run_id).order_by(Report.version)
        return self.session.scalars(stmt).all()

    def next_report_version(self, run_id: str) -> int:
        stmt = select(func.coalesce(func.max(Report.version), 0)).where(Report.run_id == run_id)
        return int(self.session.scalar(stmt) or 0) + 1

    def add_report(self, report: Report) -> None:
        self.session.add(report)
        self.session.flush()
