"""The run pipeline: claim → prepare (image by digest, artifact, CPUs) → one sealed container per
task, every answer appended durably to the Merkle log → determinism probe (and repeats) →
score → archive write-once → sign → terminal state.

A platform fault (our error, not the model's) puts the run back in the queue as a new attempt,
up to ``MAX_PLATFORM_ATTEMPTS``; it never counts against the author. Model faults end the task
with a reason from the closed set (DESIGN section 7) and the run still gets a signed report that
says so. Every container is removed before this module returns, whatever happens.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import update

from app.catalog import Catalog, load_catalog
from app.catalog.cards import TaskCard
from app.clock import Clock, SystemClock, isoformat
from app.db import session_scope
from app.evidence.checkpoint import Checkpoint, sign_checkpoint
from app.evidence.jcs import canonical_bytes
from app.evidence.keys import KeyRing, load_keyring
from app.evidence.prediction_log import PredictionLog, iter_records
from app.evidence.report import BenchmarkPredicate, SandboxSummary, peek_statement
from app.hardware import HardwareClass, get_hardware_class
from app.queue import SELF_ATTESTED_CLASS, get_run_sender
from app.reports import archive
from app.reports.scoring import TaskPlan, score_run
from app.runs import service as runs
from app.runs.models import FailureReason, Report, Run, RunStatus
from app.runs.repository import RunRepository
from app.runs.reruns import compare_runs
from app.scoring import SCORER_VERSION
from app.scoring.scorer import records_from_predictions
from app.settings import Settings, get_settings
from app.storage import build_store, layout
from app.storage.port import ArtifactStore
from app.submissions.models import Submission
from app.webhooks.service import notify_terminal
from workers.artifacts import ArtifactUnavailable, fetch_artifact
from workers.claim import claim_next_run
from workers.runner.determinism import probe_determinism
from workers.runner.errors import (
    BackendUnavailable,
    ImageNotPinned,
    ImagePullFailed,
    NoCpuSlotFree,
)
from workers.runner.factory import backend_from_settings
from workers.runner.forward import PROTOCOL, TaskOutcome, derive_seed, drive_task, percentile
from workers.runner.port import ImageRecord, RunnerBackend, SealedSpec, container_name
from workers.runner.slots import CpuLease, CpuSlots

log = logging.getLogger(__name__)

HARNESS_VERSION = f"future-ts-harness/0.1 ({PROTOCOL})"
MAX_PLATFORM_ATTEMPTS = 3
HEARTBEAT_S = 5.0
SLOT_WAIT_S = 120.0


class PlatformFault(Exception):
    """Our failure, not the model's: the run is retried as a new attempt."""


class RunCancelled(Exception):
    pass


@dataclass
class Deps:
    settings: Settings
    clock: Clock
    backend: RunnerBackend
    store: ArtifactStore
    keyring: KeyRing
    catalog: Catalog
    slots: CpuSlots


@lru_cache(maxsize=1)
def get_deps() -> Deps:
    settings = get_settings()
    return Deps(settings, SystemClock(), backend_from_settings(settings), build_store(settings),
                load_keyring(settings), load_catalog(settings.catalog_version),
                CpuSlots.from_settings(settings))


@dataclass(frozen=True)
class RunContext:
    run_id: str
    submission_id: str
    kind: str
    tier: str
    execution_mode: str
    hardware_class: str
    image_ref: str | None
    image_pinned: str | None
    artifact_uri: str | None
    tasks: list[str]
    meta: dict[str, Any]
    received_at: datetime
    platform_attempts: int
    self_attested: dict[str, Any] | None

    @property
    def frozen_at(self) -> datetime:
        return datetime.fromisoformat(str(self.meta["frozen_at"]).replace("Z", "+00:00"))


@dataclass
class TaskResult:
    card: TaskCard
    seed: int
    sealed_config: dict[str, Any]
    sealed_config_digest: str
    outcomes: list[TaskOutcome] = field(default_factory=list)
    scored_attempts: list[int] = field(default_factory=list)
    determinism: dict[str, Any] = field(default_factory=dict)

    @property
    def failure(self) -> str | None:
        main = self.outcomes[0] if self.outcomes else None
        return None if main is None or main.completed else main.status


def execute_run(run_id: str, worker: str) -> str:
    """Entry point of ``runs.execute``: the message is a token for one slot of the run's class."""
    deps = get_deps()
    with_class = _hardware_class_of(run_id)
    if with_class is None:
        return "unknown run"
    claimed: str | None = None
    with session_scope() as session:
        claimed = claim_next_run(session, deps.clock, with_class, worker)
    if claimed is None:
        return "nothing to claim"
    try:
        return RunExecution(claimed, worker, deps).execute()
    except PlatformFault as exc:
        log.warning("run %s: platform fault: %s", claimed, exc)
        _retry_or_fail(deps, claimed, worker, str(exc))
        return "platform fault"
    except Exception as exc:  # our bug or an outage: a platform fault, never the author's
        log.exception("run %s: unexpected error", claimed)
        _retry_or_fail(deps, claimed, worker, f"{type(exc).__name__}: {exc}")
        return "platform fault"


def _hardware_class_of(run_id: str) -> str | None:
    with session_scope() as session:
        run = session.get(Run, run_id)
        return run.hardware_class if run is not None else None
    return None


def _retry_or_fail(deps: Deps, run_id: str, worker: str, detail: str) -> None:
    resend = False
    with session_scope() as session:
        run = session.get(Run, run_id)
        if run is None or RunStatus(run.status) in {RunStatus.completed, RunStatus.failed,
                                                   RunStatus.cancelled}:
            return
        if run.platform_attempts + 1 >= MAX_PLATFORM_ATTEMPTS:
            runs.transition(session, deps.clock, run, RunStatus.failed, actor=worker,
                            failure_reason=FailureReason.platform_error.value,
                            failure_detail=detail[:2000])
            _notify(session, run)
            return
        run.platform_attempts += 1
        runs.transition(session, deps.clock, run, RunStatus.queued, actor=worker,
                        detail={"platform_fault": detail[:500],
                                "platform_attempt": run.platform_attempts})
        resend = True
        hardware_class = run.hardware_class
    if resend:
        get_run_sender().send_run(run_id, hardware_class)


def _notify(session: Any, run: Run) -> None:
    """Terminal state: webhooks are recorded in this transaction and sent after its commit."""
    notify_terminal(session, run)


class Heartbeat:
    """Beats every few seconds so the reaper knows this worker is alive, and watches for a
    cancellation (the API moves the run to ``cancelled``; we stop the container)."""

    def __init__(self, run_id: str, clock: Clock) -> None:
        self.run_id = run_id
        self.clock = clock
        self.cancelled = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id}",
                                        daemon=True)

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=HEARTBEAT_S * 2)

    def beat(self) -> None:
        with session_scope() as session:
            session.execute(update(Run).where(Run.id == self.run_id)
                            .values(heartbeat_at=self.clock.now()))
            status = session.get(Run, self.run_id)
            if status is not None and status.status == RunStatus.cancelled.value:
                self.cancelled.set()

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.beat()
            except Exception:
                log.exception("heartbeat for %s failed", self.run_id)


class RunExecution:
    def __init__(self, run_id: str, worker: str, deps: Deps) -> None:
        self.run_id = run_id
        self.worker = worker
        self.deps = deps
        self.ctx = self._load()
        self.workdir = (deps.settings.data_dir / "work" / run_id /
                        f"attempt-{self.ctx.platform_attempts}").resolve()

    def _load(self) -> RunContext:
        with session_scope() as session:
            run = session.get(Run, self.run_id)
            assert run is not None
            sub = session.get(Submission, run.submission_id)
            assert sub is not None
            return RunContext(
                run.id, sub.id, run.kind, sub.tier, sub.execution_mode, run.hardware_class,
                sub.image_ref, run.image_digest_ref or sub.image_digest_ref, sub.artifact_uri,
                list(sub.tasks), dict(sub.meta), sub.platform_received_at, run.platform_attempts,
                sub.self_attested_predictions,
            )
        raise AssertionError("unreachable")

    # --- state changes ------------------------------------------------------------------------

    def _transition(self, status: RunStatus, *, reason: str | None = None,
                    detail: str | None = None, extra: dict[str, Any] | None = None,
                    update_run: Callable[[Run], None] | None = None) -> bool:
        """Apply a transition unless the run was cancelled meanwhile; False if it was."""
        with session_scope() as session:
            run = session.get(Run, self.run_id)
            assert run is not None
            if run.status == RunStatus.cancelled.value:
                return False
            if update_run is not None:
                update_run(run)
            runs.transition(session, self.deps.clock, run, status, actor=self.worker,
                            failure_reason=reason, failure_detail=detail, detail=extra)
            if status in (RunStatus.completed, RunStatus.failed):
                _notify(session, run)
        return True

    def _fail(self, reason: FailureReason, detail: str) -> str:
        self._transition(RunStatus.failed, reason=reason.value, detail=detail[:2000])
        return reason.value

    # --- the run ------------------------------------------------------------------------------

    def execute(self) -> str:
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        try:
            with Heartbeat(self.run_id, self.deps.clock) as heartbeat:
                if self.ctx.execution_mode == "self_attested":
                    return self._self_attested()
                return self._sealed(heartbeat)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _sealed(self, heartbeat: Heartbeat) -> str:
        if not self._transition(RunStatus.preparing):
            return "cancelled"
        assert self.ctx.image_pinned is not None
        try:
            image = self.deps.backend.ensure_image(self.ctx.image_pinned)
        except (ImagePullFailed, ImageNotPinned) as exc:
            # ImageNotPinned here: a process: command reached an image backend (or the reverse).
            return self._fail(FailureReason.image_pull_failed, str(exc))
        except BackendUnavailable as exc:
            raise PlatformFault(str(exc)) from exc
        artifact_dir, artifact_sha = self._artifact()
        if artifact_dir is False:
            return FailureReason.artifact_unavailable.value
        hardware = get_hardware_class(self.ctx.hardware_class)
        try:
            lease = self.deps.slots.acquire(hardware, self.run_id, timeout_s=SLOT_WAIT_S)
        except NoCpuSlotFree as exc:
            raise PlatformFault(str(exc)) from exc
        try:
            return self._run_tasks(heartbeat, image, hardware, lease, artifact_dir, artifact_sha)
        finally:
            lease.release()

    def _artifact(self) -> tuple[Path | bool | None, str | None]:
        if not self.ctx.artifact_uri:
            return None, None
        try:
            fetched = fetch_artifact(self.ctx.artifact_uri, self.workdir / "artifact",
                                     self.deps.store, self.deps.settings)
        except ArtifactUnavailable as exc:
            self._fail(FailureReason.artifact_unavailable, str(exc))
            return False, None
        return fetched.directory, fetched.sha256

    def _run_tasks(self, heartbeat: Heartbeat, image: ImageRecord, hardware: HardwareClass,
                   lease: CpuLease, artifact_dir: Path | bool | None,
                   artifact_sha: str | None) -> str:
        def started(run: Run) -> None:
            run.started_at = self.deps.clock.now()
            run.artifact_sha256 = artifact_sha
            run.operational_level = self.deps.backend.operational_level

        if not self._transition(RunStatus.running, update_run=started,
                                extra={"cpuset": lease.cpuset if hasattr(lease, "cpuset")
                                       else None}):
            return "cancelled"
        log_path = self.workdir / layout.PREDICTIONS
        results: list[TaskResult] = []
        with PredictionLog.create(log_path) as plog:
            def append(record: dict[str, Any]) -> None:
                plog.append(record)

            for task_id in self.ctx.tasks:
                card = self.deps.catalog.card(task_id)
                spec_dir = artifact_dir if isinstance(artifact_dir, Path) else None
                results.append(self._run_task(card, hardware, lease, spec_dir, append, heartbeat))
                if heartbeat.cancelled.is_set():
                    break
            tree = plog.tree_head()
        if heartbeat.cancelled.is_set():
            return "cancelled"
        platform_errors = [r for r in results for o in r.outcomes if o.status == "platform_error"]
        if platform_errors:
            raise PlatformFault(platform_errors[0].outcomes[0].detail)
        return self._finish(results, log_path, tree.size, tree.root, image, hardware, lease,
                            artifact_sha)

    def _spec(self, card: TaskCard, hardware: HardwareClass, lease: CpuLease,
              artifact_dir: Path | None, attempt: int, seed: int) -> SealedSpec:
        assert self.ctx.image_pinned is not None
        name = container_name(self.run_id, card.task_id,
                              attempt + 100 * self.ctx.platform_attempts)
        budget = card.resource_budget
        return SealedSpec(
            name=name, image=self.ctx.image_pinned, hardware=hardware, cpuset=lease.cpuset,
            artifact_dir=artifact_dir, env={"FUTURE_TS_SEED": str(seed)},
            labels={"future-ts.run": self.run_id, "future-ts.task": card.task_id},
            memory_mb=budget.memory_mb, max_lifetime_s=budget.wall_clock_s + budget.startup_s + 30,
        )

    def _run_task(self, card: TaskCard, hardware: HardwareClass, lease: CpuLease,
                  artifact_dir: Path | None, append: Callable[[dict[str, Any]], None],
                  heartbeat: Heartbeat) -> TaskResult:
        seed = derive_seed(card.source_snapshot_id)
        requests = self.deps.catalog.requests(card.task_id)
        spec = self._spec(card, hardware, lease, artifact_dir, 0, seed)
        result = TaskResult(card, seed, self.deps.backend.sealed_config(spec),
                            self.deps.backend.sealed_config_digest(spec))
        main_records: list[dict[str, Any]] = []

        def keep(record: dict[str, Any]) -> None:
            append(record)
            main_records.append(record)

        outcome = self._attempt(spec, card, requests, seed, keep, 0, heartbeat)
        result.outcomes.append(outcome)
        result.scored_attempts.append(0)
        if not outcome.completed or heartbeat.cancelled.is_set():
            return result
        self._determinism(result, card, hardware, lease, artifact_dir, append, heartbeat,
                          main_records)
        return result

    def _attempt(self, spec: SealedSpec, card: TaskCard, requests: Any, seed: int,
                 on_record: Callable[[dict[str, Any]], None], attempt: int,
                 heartbeat: Heartbeat) -> TaskOutcome:
        proc = self.deps.backend.start(spec)
        outcome = drive_task(proc, card=card, requests=requests, seed=seed, run_id=self.run_id,
                             on_record=on_record, clock=self.deps.clock, attempt=attempt,
                             cancel=heartbeat.cancelled)
        self._keep_stderr(outcome, card.task_id, attempt)
        return outcome

    def _keep_stderr(self, outcome: TaskOutcome, task_id: str, attempt: int) -> None:
        if not outcome.stderr_path:
            return
        src = Path(outcome.stderr_path)
        if src.exists():
            dst = self.workdir / "stderr" / f"{task_id}.{attempt}.log"
            dst.parent.mkdir(exist_ok=True)
            shutil.move(str(src), dst)
            outcome.stderr_path = str(dst)

    def _determinism(self, result: TaskResult, card: TaskCard, hardware: HardwareClass,
                     lease: CpuLease, artifact_dir: Path | None,
                     append: Callable[[dict[str, Any]], None], heartbeat: Heartbeat,
                     main_records: list[dict[str, Any]]) -> None:
        requests = self.deps.catalog.requests(card.task_id)
        n = max(1, min(card.determinism_probe_windows, len(requests)))
        probe = probe_determinism(
            self.deps.backend,
            lambda: self._spec(card, hardware, lease, artifact_dir, 1, result.seed),
            card, requests, result.seed, n, main_records, run_id=self.run_id, attempt=1,
            clock=self.deps.clock, cancel=heartbeat.cancelled, on_record=append,
        )
        self._keep_stderr(probe.outcome, card.task_id, 1)
        result.outcomes.append(probe.outcome)
        result.determinism = {
            "probe_attempt": 1, "probe_windows": n, "deterministic": probe.deterministic,
            "conclusive": probe.conclusive, "mismatched_windows": probe.mismatched_windows,
            "repeats": 1,
        }
        if probe.deterministic or not probe.conclusive:
            return
        for attempt in range(2, card.determinism_repeats + 1):
            if heartbeat.cancelled.is_set():
                return
            spec = self._spec(card, hardware, lease, artifact_dir, attempt, result.seed)
            result.outcomes.append(self._attempt(spec, card, requests, result.seed, append,
                                                 attempt, heartbeat))
            result.scored_attempts.append(attempt)
        result.determinism["repeats"] = len(result.scored_attempts)

    # --- scoring, archive, report ---------------------------------------------------------------

    def _finish(self, results: list[TaskResult], log_path: Path, size: int, root: bytes,
                image: ImageRecord, hardware: HardwareClass, lease: CpuLease,
                artifact_sha: str | None) -> str:
        if not self._transition(RunStatus.scoring):
            return "cancelled"
        predictions = log_path.read_bytes()
        records = list(iter_records(predictions))
        plans = [TaskPlan(r.card.task_id, r.scored_attempts) for r in results]
        scores = score_run(self.deps.catalog, plans, records, self.ctx.frozen_at, "sealed")
        checkpoint, signed_at = self._checkpoint(size, root)
        manifest = self._manifest(results, image, hardware, lease, artifact_sha)
        container, subject = archive.container_json(
            self.ctx.image_ref or "", self.ctx.image_pinned or "", image.as_dict())
        objects = {
            layout.PREDICTIONS: predictions, layout.CHECKPOINT: checkpoint.encode(),
            layout.RUN_MANIFEST: archive.manifest_bytes(manifest),
            layout.CONTAINER: container, layout.STDERR: self._stderr(),
        }
        stored = archive.put_evidence(self.deps.store, self.run_id, objects)
        failure = self._failure(results, scores.scores)
        comparison = self._comparison(size, root, scores.metrics, records)
        predicate = self._predicate(results, scores, checkpoint, signed_at, stored, hardware,
                                    lease, failure, comparison)
        signed, key = archive.sign_and_archive_report(
            self.deps.store, self.deps.keyring, run_id=self.run_id, version=1, image=subject,
            predictions=predictions, run_manifest=objects[layout.RUN_MANIFEST],
            predicate=predicate, signed_at=self.deps.clock.now())
        return self._complete(results, scores.metrics, Checkpoint(self._origin(), size, root),
                              signed.envelope_bytes, key, failure, scores.capability.to_dict())

    def _origin(self) -> str:
        return f"{self.deps.settings.log_origin}/{self.run_id}"

    def _checkpoint(self, size: int, root: bytes) -> tuple[str, datetime]:
        when = self.deps.clock.now()
        note = sign_checkpoint(Checkpoint(self._origin(), size, root),
                               self.deps.keyring.signer("log", when))
        return note, when

    def _stderr(self) -> bytes:
        cap = self.deps.settings.stderr_cap_bytes
        out = bytearray()
        for path in sorted((self.workdir / "stderr").glob("*.log")):
            out += f"==> {path.stem} <==\n".encode()
            out += path.read_bytes()[: max(0, cap - len(out))]
            if len(out) >= cap:
                out += b"\n[stderr truncated at the platform's cap]\n"
                break
        return bytes(out)

    def _failure(self, results: list[TaskResult], scores: list[Any]) -> str | None:
        for result in results:
            if result.failure:
                return result.failure
        for score in scores:
            if score.failure_reasons:
                reason = str(score.failure_reasons[0])
                return reason if reason in FailureReason.__members__ else \
                    FailureReason.invalid_predictions.value
        return None

    def _manifest(self, results: list[TaskResult], image: ImageRecord, hardware: HardwareClass,
                  lease: CpuLease, artifact_sha: str | None) -> dict[str, Any]:
        s = self.deps.settings
        return {
            "run_id": self.run_id, "submission_id": self.ctx.submission_id,
            "run_kind": self.ctx.kind, "platform_attempt": self.ctx.platform_attempts,
            "platform_received_at": isoformat(self.ctx.received_at),
            "image": {"ref": self.ctx.image_ref, "pinned": self.ctx.image_pinned,
                      **image.as_dict()},
            "artifact": {"uri": self.ctx.artifact_uri, "sha256": artifact_sha},
            "hardware_class": {"id": hardware.id, "cpus": hardware.cpus,
                               "memory_mb": hardware.memory_mb, "pids": hardware.pids,
                               "cpuset": lease.cpuset},
            "host": {"cpu_model": cpu_model(), "kernel": platform.release(),
                     "machine": platform.machine()},
            "backend": {"name": self.deps.backend.name,
                        "operational_level": self.deps.backend.operational_level},
            "catalog": {"version": self.deps.catalog.version},
            "protocol": PROTOCOL, "harness_version": HARNESS_VERSION,
            "scorer_version": SCORER_VERSION, "log_origin": self._origin(),
            "tasks": [{
                "task_id": r.card.task_id, "seed": r.seed,
                "source_snapshot_id": r.card.source_snapshot_id,
                "sealed_config": r.sealed_config, "sealed_config_digest": r.sealed_config_digest,
                "scored_attempts": r.scored_attempts, "determinism": r.determinism,
                "outcomes": [o.as_dict() for o in r.outcomes],
            } for r in results],
            "store": {"kind": s.store},
        }

    def _comparison(self, size: int, root: bytes, metrics: dict[str, Any],
                    records: list[dict[str, Any]]) -> dict[str, Any] | None:
        """For a rerun: how it compares with the previous run's latest report. The
        ``prediction_hash`` always differs between runs (it covers platform timestamps), so the
        digest of the answers alone says whether the model answered identically."""
        digest = answers_digest(records)
        previous = self._previous_report()
        if previous is None:
            return {"answers_digest": digest}
        new = {"run_id": self.run_id, "prediction_hash": Checkpoint(
            self._origin(), size, root).prediction_hash, "metrics": metrics}
        out = compare_runs(previous, new)
        prev_digest = (previous.get("extra") or {}).get("comparison", {}).get("answers_digest")
        out.update(answers_digest=digest, previous_answers_digest=prev_digest,
                   same_answers=prev_digest == digest if prev_digest else None)
        return out

    def _previous_report(self) -> dict[str, Any] | None:
        with session_scope() as session:
            run = session.get(Run, self.run_id)
            if run is None or run.previous_run_id is None:
                return None
            report = RunRepository(session).latest_report(run.previous_run_id)
            if report is None:
                return None
            return dict(peek_statement(report.envelope.encode())["predicate"])

    def _predicate(self, results: list[TaskResult], scores: Any, checkpoint: str,
                   signed_at: datetime, stored: archive.ArchivedRun, hardware: HardwareClass,
                   lease: CpuLease, failure: str | None,
                   comparison: dict[str, Any] | None) -> BenchmarkPredicate:
        mains = [r.outcomes[0] for r in results if r.outcomes]
        issued = sorted(t for o in mains for t in (o.first_issued_at, o.last_issued_at) if t)
        peaks = [o.memory_peak_mb for r in results for o in r.outcomes if o.memory_peak_mb]
        first = results[0]
        return BenchmarkPredicate(
            submission_id=self.ctx.submission_id, run_id=self.run_id, tier=self.ctx.tier,
            execution_mode=self.ctx.execution_mode,
            operational_level=self.deps.backend.operational_level,
            platform_received_at=self.ctx.received_at,
            platform_issued_at_first=_parse(issued[0]) if issued else None,
            platform_issued_at_last=_parse(issued[-1]) if issued else None,
            hardware_class=hardware.id, host_cpu_model=cpu_model(),
            sandbox=SandboxSummary(
                backend=self.deps.backend.name,
                limits={"cpus": hardware.cpus, "cpuset": lease.cpuset,
                        "memory_mb": first.sealed_config.get("memory_mb", hardware.memory_mb),
                        "swap_mb": 0, "pids": hardware.pids, "tmpfs_mb": hardware.tmpfs_mb,
                        "network": "none (loopback only)"},
                sealed_config_digest=first.sealed_config_digest),
            seed=first.seed, image_ref=self.ctx.image_ref or "", checkpoint=checkpoint,
            checkpoint_signed_at=signed_at, metrics=scores.metrics,
            latency_ms={r.card.task_id: _latency(r) for r in results},
            memory_peak_mb=max(peaks) if peaks else None,
            capability_vector=scores.capability.to_dict(), archive_uri=stored.uri,
            archive_objects=stored.objects, harness_version=HARNESS_VERSION,
            scorer_version=SCORER_VERSION, run_kind=self.ctx.kind,
            extra={"status": "failed" if failure else "completed", "failure_reason": failure,
                   "frozen_at": self.ctx.meta.get("frozen_at"),
                   "task_outcomes": {r.card.task_id: r.failure or "completed" for r in results},
                   "determinism": {r.card.task_id: r.determinism for r in results},
                   "seeds": {r.card.task_id: r.seed for r in results},
                   "sealed_config_digests": {r.card.task_id: r.sealed_config_digest
                                             for r in results},
                   "task_scores": scores.task_scores, "comparison": comparison},
        )

    def _complete(self, results: list[TaskResult], metrics: dict[str, Any],
                  checkpoint: Checkpoint, envelope: bytes, key: str, failure: str | None,
                  capability: dict[str, Any]) -> str:
        mains = [r.outcomes[0] for r in results if r.outcomes]
        lat = sorted(x for o in mains for x in o.latencies_ms)
        summary = {
            "tasks": {r.card.task_id: r.failure or "completed" for r in results},
            "leaderboard": leaderboard_summary(capability, metrics),
            "latency_ms": _pcts(lat), "predictions": len(lat),
            "memory_peak_mb": max((o.memory_peak_mb or 0.0 for o in mains), default=None),
        }

        def finish(run: Run) -> None:
            run.prediction_hash = checkpoint.prediction_hash
            run.summary = summary
            run.seed = results[0].seed if results else None

        with session_scope() as session:
            run = session.get(Run, self.run_id)
            assert run is not None
            session.add(Report(
                id=f"rep_{self.run_id.removeprefix('run_')}_1", run_id=self.run_id, version=1,
                envelope=envelope.decode(), envelope_sha256=hashlib.sha256(envelope).hexdigest(),
                archive_key=key, reason="initial", created_by=self.worker,
                created_at=self.deps.clock.now()))
        status = RunStatus.failed if failure else RunStatus.completed
        self._transition(status, reason=failure, update_run=finish,
                         detail=f"task failed: {failure}" if failure else None)
        return status.value

    # --- self-attested -------------------------------------------------------------------------

    def _self_attested(self) -> str:
        """Scored and logged like a sealed run, flagged ``self_attested`` everywhere; no image
        ran, so no platform timing exists and E is not comparable."""
        if not self._transition(RunStatus.running):
            return "cancelled"
        predictions = self.ctx.self_attested or {}
        log_path = self.workdir / layout.PREDICTIONS
        with PredictionLog.create(log_path) as plog:
            for task_id in self.ctx.tasks:
                for record in records_from_predictions(task_id, predictions.get(task_id, [])):
                    plog.append({**record, "run_id": self.run_id, "attempt": 0})
            tree = plog.tree_head()
        if not self._transition(RunStatus.scoring):
            return "cancelled"
        data = log_path.read_bytes()
        plans = [TaskPlan(t, [0]) for t in self.ctx.tasks]
        scores = score_run(self.deps.catalog, plans, list(iter_records(data)),
                           self.ctx.frozen_at, "self_attested")
        checkpoint, signed_at = self._checkpoint(tree.size, tree.root)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        pinned = f"self-attested/{self.ctx.submission_id}@{digest}"
        manifest = {"run_id": self.run_id, "submission_id": self.ctx.submission_id,
                    "execution_mode": "self_attested", "tasks": self.ctx.tasks,
                    "catalog": {"version": self.deps.catalog.version},
                    "scorer_version": SCORER_VERSION, "log_origin": self._origin()}
        container, subject = archive.container_json("self-attested", pinned,
                                                     {"note": "no image ran"})
        objects = {layout.PREDICTIONS: data, layout.CHECKPOINT: checkpoint.encode(),
                   layout.RUN_MANIFEST: archive.manifest_bytes(manifest),
                   layout.CONTAINER: container}
        stored = archive.put_evidence(self.deps.store, self.run_id, objects)
        predicate = {
            "submission_id": self.ctx.submission_id, "run_id": self.run_id,
            "run_kind": self.ctx.kind, "report_version": 1, "tier": self.ctx.tier,
            "execution_mode": "self_attested", "operational_level": "self_attested",
            "provenance_flag": "self_attested",
            "platform_received_at": isoformat(self.ctx.received_at),
            "prediction_hash": Checkpoint(self._origin(), tree.size, tree.root).prediction_hash,
            "prediction_log": {"origin": self._origin(), "tree_size": tree.size,
                               "checkpoint": checkpoint,
                               "checkpoint_signed_at": isoformat(signed_at)},
            "metrics": scores.metrics, "capability_vector": scores.capability.to_dict(),
            "archive": {"uri": stored.uri, "objects": {
                k: {"sha256": v.sha256, "size": v.size} for k, v in stored.objects.items()}},
            "versions": {"harness": HARNESS_VERSION, "scorer": SCORER_VERSION},
            "extra": {"task_scores": scores.task_scores},
        }
        signed, key = archive.sign_and_archive_report(
            self.deps.store, self.deps.keyring, run_id=self.run_id, version=1, image=subject,
            predictions=data, run_manifest=objects[layout.RUN_MANIFEST], predicate=predicate,
            signed_at=self.deps.clock.now())
        return self._complete([], scores.metrics, Checkpoint(self._origin(), tree.size,
                                                              tree.root),
                              signed.envelope_bytes, key, None, scores.capability.to_dict())


def leaderboard_summary(capability: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """What the leaderboard reads without opening the signed report: the capability values and
    each task's ranked-window skills (the report remains the authority)."""
    dims = capability.get("dimensions", {})
    skill_keys = ("ranked.skill.mase", "ranked.skill.wql", "all.skill.mase", "all.skill.wql")
    return {
        "tier_weighted_score": capability.get("tier_weighted_score"),
        "tier_weighted_score_all_windows": capability.get("tier_weighted_score_all_windows"),
        "provenance": capability.get("provenance"),
        **{k: (dims.get(k) or {}).get("value") for k in ("F", "U", "E")},
        "E_comparable": bool((dims.get("E") or {}).get("comparable_across_models")),
        "tasks": {task: {k: (table.get(k) or {}).get("mean") for k in skill_keys}
                  for task, table in metrics.items()},
    }


def answers_digest(records: list[dict[str, Any]]) -> str:
    """sha256 over the scored answers only (task, attempt, window, answer), in log order."""
    picked = [[r.get("task_id"), r.get("attempt"), r.get("window_id"), r.get("answer")]
              for r in records]
    return "sha256:" + hashlib.sha256(canonical_bytes(picked)).hexdigest()


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _pcts(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    return {"p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": values[-1]}


def _latency(result: TaskResult) -> dict[str, Any]:
    main = result.outcomes[0] if result.outcomes else None
    budget = result.card.resource_budget
    if main is None:
        return {}
    return {"p50": main.latency_p50_ms, "p95": main.latency_p95_ms, "p99": main.latency_p99_ms,
            "max": main.latency_max_ms, "violations": main.latency_violations,
            "violation_pct": main.latency_violation_pct, "budget_ms": budget.latency_ms,
            "allowed_violation_pct": budget.max_latency_violation_pct,
            "startup_ms": main.startup_ms}


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


__all__ = ["SELF_ATTESTED_CLASS", "execute_run"]
