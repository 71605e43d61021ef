"""Submission rules: validate, resolve the image, stamp the platform clock, persist, enqueue.

Everything is refused before anything is stored. The 202 is only answered after the commit
(the request dependency owns it), and the run is sent to its queue only after that commit.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import rfc8785
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.service import Caller
from app.catalog import Catalog
from app.catalog.cards import TaskCard
from app.clock import Clock
from app.db import Reader, new_id
from app.queue import SELF_ATTESTED_CLASS, RunQueue, enqueue_run_after_commit
from app.quotas import service as quotas
from app.registry.reference import ImageReference, InvalidImageReference, parse_image_reference
from app.registry.resolver import (
    PROCESS_MEDIA_TYPE,
    PROCESS_SCHEME,
    ImageResolver,
    ResolvedImage,
)
from app.runs import service as runs
from app.runs.models import TERMINAL_RUN, RunKind, RunStatus
from app.runs.repository import RunRepository
from app.submissions.artifact_uri import check_artifact_uri
from app.submissions.errors import (
    IdempotencyKeyReused,
    InvalidCursor,
    SubmissionAlreadyTerminal,
    SubmissionInvalid,
    SubmissionNotFound,
)
from app.submissions.models import Submission, SubmissionStatus
from app.submissions.repository import (
    RunBrief,
    SubmissionRepository,
    SubmissionView,
    read_status,
)
from app.submissions.schemas import SubmissionCreate
from app.validation import SubmissionInput, resolve_tasks, validate_submission
from app.webhooks import service as webhooks
from app.webhooks.urls import check_webhook_url


@dataclass(frozen=True)
class IntakeContext:
    clock: Clock
    resolver: ImageResolver
    catalog: Catalog
    queue: RunQueue
    artifact_allowed_hosts: list[str]
    resolve_artifact_dns: bool = True
    # None: no quota check (internal callers); the API always passes the configured policy.
    quota: quotas.QuotaPolicy | None = None
    webhook_insecure_hosts: list[str] = field(default_factory=list)
    # Dev only: accept ``process:<command>`` images for the process backend (local_sealed_mvp).
    allow_process_images: bool = False


def body_sha256(raw: dict[str, Any]) -> str:
    """The request body's fingerprint, stored with an Idempotency-Key (canonical JSON)."""
    return hashlib.sha256(rfc8785.dumps(raw)).hexdigest()


def validate_body(raw: dict[str, Any], catalog: Catalog, received_at: datetime) -> list[TaskCard]:
    """The catalog's rules (``app.validation``) plus the one intake adds: one hardware class
    per submission, since one run is provisioned on one class. ``raw``: the body as JSON."""
    sub = SubmissionInput.from_mapping(raw)
    problems = [p.to_dict() for p in validate_submission(sub, catalog, received_at=received_at)]
    task_ids, _ = resolve_tasks(sub, catalog)
    cards = [catalog.shared_card(t) for t in task_ids]
    if len({c.resource_budget.hardware_class for c in cards}) > 1:
        problems.append({"code": "mixed_hardware_classes", "field": "tasks",
                         "message": "tasks of one submission must share a hardware class"})
    if problems:
        raise SubmissionInvalid(problems)
    return cards


@dataclass(frozen=True)
class Intake:
    """What ``create_submission`` did."""

    view: SubmissionView  # the submission and its latest run, as the answer shows them
    created: bool  # False: an idempotent replay of an earlier submission
    # The caller's quota: counting this submission, or as it is now for a replay (None: staff,
    # or no policy).
    quota: quotas.QuotaStatus | None


@dataclass(frozen=True)
class NewSubmission:
    """A new submission as the rows it is stored as (column values), in insert order."""

    submission: dict[str, Any]
    run: RunBrief
    run_row: dict[str, Any]
    event_row: dict[str, Any]
    audit_row: dict[str, Any]

    @property
    def view(self) -> SubmissionView:
        return SubmissionView.of_row(self.submission, self.run)


def create_submission(
    session: Session, ctx: IntakeContext, caller: Caller, body: SubmissionCreate,
    idempotency_key: str | None,
) -> Intake:
    """Intake through a SQLAlchemy session (any database; ``app.submissions.intake`` has the
    same steps on PostgreSQL without it). The caller commits."""
    raw = body.model_dump(mode="json")
    fingerprint = body_sha256(raw)
    repo = SubmissionRepository(session)
    if idempotency_key:
        existing = repo.by_idempotency_key(caller.id, idempotency_key)
        if existing is not None:
            return _replayed(session, ctx, caller, repo, existing, fingerprint)
    quota = None
    if ctx.quota is not None:
        # Before anything costly (the registry call); a replay above never counts twice.
        quota = quotas.enforce(session, ctx.clock, ctx.quota, caller)
    cards = validate_body(raw, ctx.catalog, ctx.clock.now())
    new = new_submission(ctx, caller, body, cards, check_and_resolve(ctx, body), fingerprint,
                         idempotency_key)
    if idempotency_key:
        try:
            # Only a keyed submission can collide (on owner and key): insert it alone, in a
            # savepoint, so that losing the race rolls back nothing else.
            with session.begin_nested():
                repo.insert(new.submission)
        except IntegrityError:
            # A concurrent request with the same Idempotency-Key won the insert.
            if other := repo.by_idempotency_key(caller.id, idempotency_key):
                return _replayed(session, ctx, caller, repo, other, fingerprint)
            raise
    repo.insert_with_run(None if idempotency_key else new.submission, new.run_row,
                         new.event_row, new.audit_row)
    enqueue_run_after_commit(session, ctx.queue, new.run.id, new.submission["hardware_class"])
    return Intake(new.view, True, admitted(quota, new))


def admitted(quota: quotas.QuotaStatus | None, new: NewSubmission
             ) -> quotas.QuotaStatus | None:
    """The quota ``enforce``/``admit`` counted, with ``new`` in it."""
    return None if quota is None else quotas.with_one_more(
        quota, new.submission["platform_received_at"])


def check_and_resolve(ctx: IntakeContext, body: SubmissionCreate) -> ResolvedImage | None:
    """The checks that may wait on the network (DNS for the artifact and webhook hosts, the
    registry for the tag): run them off the event loop."""
    if body.artifact_uri:
        check_artifact_uri(body.artifact_uri, ctx.artifact_allowed_hosts,
                           resolve=ctx.resolve_artifact_dns)
    if body.webhook_url:
        check_webhook_url(body.webhook_url, ctx.webhook_insecure_hosts,
                          resolve=ctx.resolve_artifact_dns)
    return _resolve(ctx, body)


def _replayed(session: Session, ctx: IntakeContext, caller: Caller, repo: SubmissionRepository,
              existing: Submission, fingerprint: str) -> Intake:
    check_replay(existing.request_sha256, fingerprint)
    quota = None
    if ctx.quota is not None and not caller.is_staff:  # not counted again: shown as it is now
        quota = quotas.status(session, ctx.clock, ctx.quota, caller)
    return Intake(SubmissionView.of(existing, repo.latest_run(existing)), False, quota)


def check_replay(stored_sha256: str, fingerprint: str) -> None:
    """Refuse (409) a request that does not repeat the one stored under its Idempotency-Key."""
    if stored_sha256 != fingerprint:
        raise IdempotencyKeyReused("this Idempotency-Key was used with a different body")


def _resolve(ctx: IntakeContext, body: SubmissionCreate) -> ResolvedImage | None:
    if body.execution_mode != "sealed" or not body.image:
        return None
    if body.image.startswith(PROCESS_SCHEME):
        return _process_image(ctx, body)
    return ctx.resolver.resolve(parse_image_reference(body.image))


def _process_image(ctx: IntakeContext, body: SubmissionCreate) -> ResolvedImage:
    """A dev deployment without podman runs a command instead of an image (the seed's Stage 1
    MVP). Its 'digest' pins the exact command line; the run is ``local_sealed_mvp``."""
    assert body.image is not None
    if not ctx.allow_process_images:
        raise InvalidImageReference("process: images are accepted by dev deployments only")
    if body.tier != "public_dev":
        raise SubmissionInvalid([{"code": "process_image_tier", "field": "image",
                                  "message": "process: images never run blind or live tasks"}])
    digest = "sha256:" + hashlib.sha256(body.image.encode()).hexdigest()
    ref = ImageReference("process", body.image, None, digest)
    return ResolvedImage(ref, digest, PROCESS_MEDIA_TYPE, pinned_override=f"{body.image}@{digest}")


def new_submission(
    ctx: IntakeContext, caller: Caller, body: SubmissionCreate, cards: list[TaskCard],
    resolved: ResolvedImage | None, fingerprint: str, idempotency_key: str | None,
) -> NewSubmission:
    """The new submission's rows: the submission already pointing at its queued first run (no
    UPDATE after the run), the run, its first event and the audit row (after the run: the
    trail is in platform-clock order). Inserted with Core: no ORM objects."""
    now = ctx.clock.now()  # the platform clock; nothing the client sent about time is used
    sealed = body.execution_mode == "sealed"
    predictions: dict[str, Any] | None = None
    if body.predictions is not None:
        predictions = {k: [w.model_dump(mode="json") for w in v]
                       for k, v in body.predictions.items()}
    run = RunBrief(new_id("run"), RunKind.initial.value, RunStatus.queued.value, None,
                   ctx.clock.now())
    row: dict[str, Any] = {
        "id": new_id("sub"), "owner_id": caller.id, "idempotency_key": idempotency_key,
        "request_sha256": fingerprint, "image_ref": body.image,
        "image_digest_ref": resolved.pinned if resolved else None,
        "image_digest": resolved.digest if resolved else None,
        "image_media_type": resolved.media_type if resolved else None,
        "artifact_uri": body.artifact_uri, "tasks": [c.task_id for c in cards],
        "tier": body.tier, "execution_mode": body.execution_mode,
        "hardware_class": (cards[0].resource_budget.hardware_class if sealed
                           else SELF_ATTESTED_CLASS),
        "metadata": body.metadata.model_dump(mode="json"),
        "self_attested_predictions": predictions, "webhook_url": body.webhook_url,
        "platform_received_at": now, "status": SubmissionStatus.queued.value,
        "failure_reason": None, "latest_run_id": run.id, "updated_at": run.created_at,
    }
    run_row, event_row = runs.queued_run_rows(
        run_id=run.id, submission_id=row["id"], owner_id=caller.id,
        hardware_class=row["hardware_class"], image_digest_ref=row["image_digest_ref"],
        kind=RunKind.initial, actor=caller.name, at=run.created_at)
    audit_row = audit.row(ctx.clock, actor=caller.name, action="submission.create",
                          target_type="submission", target_id=row["id"],
                          detail={"run_id": run.id, "image_digest": row["image_digest"]})
    return NewSubmission(row, run, run_row, event_row, audit_row)


def _sees(caller: Caller, owner_id: str) -> bool:
    """Authors see their own; readers and staff see all."""
    return caller.role.value != "author" or owner_id == caller.id


def get_visible(session: Session, caller: Caller, submission_id: str) -> Submission:
    """The submission if ``caller`` may see it. Others' are 'not found', not 403, so that ids
    do not leak existence."""
    sub = SubmissionRepository(session).get(submission_id)
    if sub is None or not _sees(caller, sub.owner_id):
        raise SubmissionNotFound(f"submission {submission_id} not found")
    return sub


async def visible_status(reader: Reader, caller: Caller, submission_id: str
                         ) -> SubmissionView:
    """``get_visible`` for the status poll: one read on the event loop, same rule."""
    view = await read_status(reader, submission_id)
    if view is None or not _sees(caller, view.owner_id):
        raise SubmissionNotFound(f"submission {submission_id} not found")
    return view


def encode_cursor(sub: Submission) -> str:
    raw = json.dumps([sub.platform_received_at.isoformat(), sub.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, sub_id = json.loads(raw)
        return datetime.fromisoformat(at), str(sub_id)
    except (ValueError, TypeError) as exc:
        raise InvalidCursor("cursor is not one this API issued") from exc


def cancel(session: Session, clock: Clock, caller: Caller, submission_id: str,
           reason: str | None) -> Submission:
    """Cancel the latest run if it is not terminal. The worker sees the state change and stops
    and removes the container; a queued run is dropped when a worker claims it. The quota is
    refunded by the state itself: a cancelled run no longer counts (``app.quotas``)."""
    sub = get_visible(session, caller, submission_id)
    if caller.role.value == "reader":
        raise SubmissionNotFound(f"submission {submission_id} not found")
    run = RunRepository(session).get_for_update(sub.latest_run_id or "")
    if run is None or RunStatus(run.status) in TERMINAL_RUN:
        raise SubmissionAlreadyTerminal(f"submission {sub.id} is already {sub.status}")
    runs.transition(session, clock, run, RunStatus.cancelled, actor=caller.name,
                    failure_reason="cancelled", detail={"reason": reason})
    audit.record(session, clock, actor=caller.name, action="submission.cancel",
                 target_type="submission", target_id=sub.id, reason=reason,
                 detail={"run_id": run.id, "by_staff": caller.is_staff, "quota_refunded": True})
    webhooks.notify_terminal(session, run, clock=clock)
    return sub
