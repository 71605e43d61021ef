from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import (
    ARRAY,
    Select,
    String,
    Table,
    any_,
    bindparam,
    exists,
    insert,
    select,
    tuple_,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

from app.audit.models import AuditEvent
from app.db import KeyedLookup, Reader, Record
from app.runs.models import Report, Run, RunEvent
from app.submissions.models import Submission


@dataclass(frozen=True)
class LatestRun:
    """A submission's latest run (None before it has one) and whether that run has a report."""

    run: Run | None
    has_report: bool


NO_RUN = LatestRun(None, False)


@dataclass(frozen=True)
class RunBrief:
    id: str
    kind: str
    status: str
    failure_reason: str | None
    created_at: datetime


@dataclass(frozen=True)
class SubmissionView:
    """What a status answer shows of a submission and its latest run: built from the ORM objects
    or from the one row the status read returns, and presented the same way."""

    id: str
    owner_id: str
    status: str
    failure_reason: str | None
    tier: str
    execution_mode: str
    tasks: list[str]
    hardware_class: str
    image_ref: str | None
    image_digest: str | None
    artifact_uri: str | None
    meta: dict[str, Any]
    platform_received_at: datetime
    updated_at: datetime
    latest_run: RunBrief | None
    has_report: bool

    @classmethod
    def of(cls, sub: Submission, latest: LatestRun) -> SubmissionView:
        run = latest.run
        brief = None if run is None else RunBrief(run.id, run.kind, run.status,
                                                  run.failure_reason, run.created_at)
        return cls(sub.id, sub.owner_id, sub.status, sub.failure_reason, sub.tier,
                   sub.execution_mode, sub.tasks, sub.hardware_class, sub.image_ref,
                   sub.image_digest, sub.artifact_uri, sub.meta, sub.platform_received_at,
                   sub.updated_at, brief, latest.has_report)

    @classmethod
    def of_row(cls, row: Mapping[str, Any], run: RunBrief) -> SubmissionView:
        """A submission just inserted from ``row`` (its column values) with its first run."""
        return cls(row["id"], row["owner_id"], row["status"], row["failure_reason"], row["tier"],
                   row["execution_mode"], row["tasks"], row["hardware_class"], row["image_ref"],
                   row["image_digest"], row["artifact_uri"], row["metadata"],
                   row["platform_received_at"], row["updated_at"], run, False)

    @classmethod
    def from_row(cls, row: Record) -> SubmissionView:
        brief = None if row["run_id"] is None else RunBrief(
            row["run_id"], row["run_kind"], row["run_status"], row["run_failure_reason"],
            row["run_created_at"])
        return cls(row["id"], row["owner_id"], row["status"], row["failure_reason"],
                   row["tier"], row["execution_mode"], row["tasks"], row["hardware_class"],
                   row["image_ref"], row["image_digest"], row["artifact_uri"], row["meta"],
                   row["platform_received_at"], row["updated_at"], brief,
                   bool(row["has_report"]))


# The status path's statements are built once: SQLAlchemy memoizes a statement's cache key on
# the statement object, so reusing it skips building and keying the query on every poll.
# Whether the run in the FROM clause has a report (correlated to it; false when it is NULL).
_HAS_REPORT = exists().where(Report.run_id == Run.id).label("has_report")
# The status poll: the submission, its latest run and the report flag in one row of plain
# columns (no ORM objects, no identity map), only the columns a status shows.
_STATUS = (
    select(
        Submission.id, Submission.owner_id, Submission.status, Submission.failure_reason,
        Submission.tier, Submission.execution_mode, Submission.tasks, Submission.hardware_class,
        Submission.image_ref, Submission.image_digest, Submission.artifact_uri,
        Submission.meta.label("meta"), Submission.platform_received_at, Submission.updated_at,
        Run.id.label("run_id"), Run.kind.label("run_kind"), Run.status.label("run_status"),
        Run.failure_reason.label("run_failure_reason"), Run.created_at.label("run_created_at"),
        _HAS_REPORT,
    )
    .select_from(Submission)
    .outerjoin(Run, Run.id == Submission.latest_run_id)
)
STATUS = KeyedLookup(
    one=_STATUS.where(Submission.id == bindparam("key")),
    # Polls arriving together are answered by one statement (app.db.PsycopgPoolReader).
    many=_STATUS.where(Submission.id == any_(bindparam("keys", type_=ARRAY(String)))),
    key_column="id",
)
_SUBMISSIONS = cast(Table, Submission.__table__)
_RUNS = cast(Table, Run.__table__)
_RUN_EVENTS = cast(Table, RunEvent.__table__)
_AUDIT_EVENTS = cast(Table, AuditEvent.__table__)
_INSERT = insert(_SUBMISSIONS)


@lru_cache(maxsize=8)
def _combined_insert(shape: tuple[tuple[Table, tuple[str, ...]], ...]) -> Insert:
    """``INSERT``s of one row into each table of ``shape`` (table, columns), as one statement:
    all but the last in ``WITH``. Built once per shape; parameters are ``<table>_<column>``."""
    inserts = [insert(table).values({c: bindparam(f"{table.name}_{c}", type_=table.c[c].type)
                                     for c in columns}) for table, columns in shape]
    *first, last = inserts
    return last.add_cte(*(stmt.cte(f"new_{i}") for i, stmt in enumerate(first)))


def combined_insert(rows: Sequence[tuple[Table, Mapping[str, Any]]]
                    ) -> tuple[Insert, dict[str, Any]]:
    """One ``INSERT`` statement (PostgreSQL) of ``rows`` (table, column values), in their order,
    and its parameters."""
    stmt = _combined_insert(tuple((t, tuple(r)) for t, r in rows))
    return stmt, {f"{table.name}_{key}": value for table, values in rows
                  for key, value in values.items()}


def intake_rows(submission: Mapping[str, Any], run: Mapping[str, Any],
                event: Mapping[str, Any], audit: Mapping[str, Any]
                ) -> list[tuple[Table, Mapping[str, Any]]]:
    """A new submission's rows by table, in insert order."""
    return [(_SUBMISSIONS, submission), (_RUNS, run), (_RUN_EVENTS, event),
            (_AUDIT_EVENTS, audit)]


# A keyed submission's id and request fingerprint.
BY_IDEMPOTENCY_KEY = select(Submission.id, Submission.request_sha256).where(
    Submission.owner_id == bindparam("owner_id"),
    Submission.idempotency_key == bindparam("idempotency_key"))
_LATEST_RUN = select(Run, _HAS_REPORT).where(Run.id == bindparam("run_id"))


async def read_status(reader: Reader, submission_id: str) -> SubmissionView | None:
    """The status poll's one read, awaited on the event loop."""
    row = await reader.lookup(STATUS, submission_id)
    return None if row is None else SubmissionView.from_row(row)


class SubmissionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, submission_id: str) -> Submission | None:
        return self.session.get(Submission, submission_id)

    def latest_run(self, sub: Submission) -> LatestRun:
        """``sub``'s latest run and whether it has a report, in one query (none before a run)."""
        if sub.latest_run_id is None:
            return NO_RUN
        row = self.session.execute(_LATEST_RUN, {"run_id": sub.latest_run_id}).first()
        if row is None:
            return NO_RUN
        run, has_report = row
        return LatestRun(run, bool(has_report))

    def by_idempotency_key(self, owner_id: str, key: str) -> Submission | None:
        stmt = select(Submission).where(Submission.owner_id == owner_id,
                                        Submission.idempotency_key == key)
        return self.session.scalars(stmt).first()

    def add(self, submission: Submission) -> None:
        self.session.add(submission)
        self.session.flush()

    def insert(self, row: dict[str, Any]) -> None:
        """Insert a submission given as column values (Core: no ORM object, no flush)."""
        self.session.connection().execute(_INSERT, row)

    def insert_with_run(self, submission: dict[str, Any] | None, run: dict[str, Any],
                        event: dict[str, Any], audit: dict[str, Any]) -> None:
        """Insert a new submission (None: inserted already), its first run, the run's first
        event and the audit row, given as column values, in this order.

        On PostgreSQL one statement (data-modifying CTEs; the foreign keys are checked at its
        end): one round trip instead of four, which cost the API and the database more CPU
        than the inserts themselves. Elsewhere (SQLite) one INSERT each."""
        connection = self.session.connection()
        rows = [(t, r) for t, r in ((_SUBMISSIONS, submission), (_RUNS, run),
                                    (_RUN_EVENTS, event), (_AUDIT_EVENTS, audit)) if r is not None]
        if connection.dialect.name != "postgresql":
            for table, values in rows:
                connection.execute(insert(table), values)
            return
        connection.execute(*combined_insert(rows))

    def page(
        self, *, owner_id: str | None, status: str | None, task: str | None,
        since: datetime | None, after: tuple[datetime, str] | None, limit: int,
    ) -> Sequence[Submission]:
        """Newest first; keyset pagination on (platform_received_at, id)."""
        stmt: Select[Any] = select(Submission)
        if owner_id is not None:
            stmt = stmt.where(Submission.owner_id == owner_id)
        if status is not None:
            stmt = stmt.where(Submission.status == status)
        if since is not None:
            stmt = stmt.where(Submission.platform_received_at >= since)
        if after is not None:
            stmt = stmt.where(tuple_(Submission.platform_received_at, Submission.id) < after)
        stmt = stmt.order_by(Submission.platform_received_at.desc(), Submission.id.desc())
        if task is None:
            return self.session.scalars(stmt.limit(limit)).all()
        # Task filtering on a JSON list is done here rather than in SQL so that it works the same
        # on SQLite and PostgreSQL; the scan is bounded by the page size times a small factor.
        out: list[Submission] = []
        for sub in self.session.scalars(stmt.limit(limit * 20)):
            if task in sub.tasks:
                out.append(sub)
                if len(out) == limit:
                    break
        return out
