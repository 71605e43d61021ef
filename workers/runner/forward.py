"""The ``future-ts-forward/1`` driver: one task attempt against one sealed model.

``drive_task`` speaks the protocol exactly as DESIGN.md section 3 says: ``hello`` with the public
task card and the seed, ``ready`` within ``startup_s``, then one ``forecast`` at a time. For each
request it stamps ``platform_issued_at`` (platform wall clock) just before writing, measures
``runtime_ms`` on the monotonic clock from the write to the end of the answer line, takes
``memory_mb`` from the cgroup peak during the call, judges the answer (``validate.py``) and hands
the record to ``on_record`` **before** the next request is sent (the pipeline appends it durably
to the run's Merkle log there). At the end it says ``bye`` and always stops and removes the model.

Terminal states (DESIGN.md section 7) and what ends in them:

* ``startup_timeout``: no ``ready`` within ``resource_budget.startup_s`` (counted from the start
  request to the runtime).
* ``protocol_error``: a line that is not a JSON object of a known type, a line over the line cap
  (never buffered whole), more stdout than the total cap, output nobody asked for, or stdout
  closed while the model keeps running.
* ``timeout``: the whole attempt ran past ``wall_clock_s`` (counted from the start request), or
  one call got no answer within its deadline, ``max(call_deadline_factor * latency_ms,
  call_deadline_floor_s)``: one request is in flight at a time, so a hung call ends the task.
* ``oom``: the model died of SIGKILL (exit 137) that the platform did not send, unless the cgroup
  proves there was no OOM kill (then ``container_crashed``).
* ``container_crashed``: the model exited (any code) before the last answer.
* ``invalid_predictions``: more than ``max_invalid_predictions`` (default 0) answers were invalid
  or model errors (an ``error`` answer leaves a window without a forecast: a coverage failure).
* ``latency_budget_exceeded``: more than ``max_latency_violation_pct`` percent of the task's
  requests took longer than ``latency_ms`` (a timed-out call counts as a violation).
* ``cancelled``: the cancel signal was seen between requests or while waiting.
* ``platform_error``: the runtime failed (not the model), or ``on_record`` raised.

Invalid answers and latency violations do not stop the run by default: every window is asked and
logged so the counts are complete (``DriverLimits.stop_when_decided`` stops as soon as the outcome
can no longer change).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.catalog.cards import ForecastRequest, SeriesHistory, TaskCard
from app.clock import Clock, SystemClock, isoformat
from workers.runner.framing import LineReader, LineWriter, ReadResult
from workers.runner.port import SealedProcess
from workers.runner.validate import Verdict, judge_answer, quantile_keys_for, raw_summary

log = logging.getLogger(__name__)

PROTOCOL = "future-ts-forward/1"
TaskStatus = Literal[
    "completed",
    "startup_timeout",
    "protocol_error",
    "invalid_predictions",
    "latency_budget_exceeded",
    "oom",
    "timeout",
    "container_crashed",
    "cancelled",
    "platform_error",
]
RecordStatus = Literal["ok", "invalid", "timeout", "error"]
Cancel = threading.Event | Callable[[], bool] | None
_MIB = 1024 * 1024
# Durations and deadlines always use the real monotonic clock, the same one ``started_ns`` of a
# SealedProcess uses; an injected Clock only provides the wall-clock stamps.
_now_ns = time.perf_counter_ns
# The stream is still in step after these, so the model gets a "bye" instead of a SIGKILL.
_POLITE_ENDS = frozenset({"completed", "invalid_predictions", "latency_budget_exceeded"})
_NS_PER_S = 1_000_000_000
_BYTES_PER_NUMBER = 32  # "-1.2345678901234567e+308," is 25


@dataclass(frozen=True)
class DriverLimits:
    """Caps the driver enforces on top of the task's ``resource_budget``."""

    max_line_bytes: int | None = None  # None: derived per request from its shape
    line_cap_floor_bytes: int = 1 * _MIB
    line_cap_ceiling_bytes: int = 16 * _MIB
    unsolicited_slack_bytes: int = 1 * _MIB  # blank lines etc. on top of the per-line caps
    call_deadline_factor: float = 10.0
    call_deadline_floor_s: float = 5.0
    bye_grace_s: float = 2.0
    exit_wait_s: float = 2.0
    max_invalid_predictions: int = 0
    stop_when_decided: bool = False
    poll_interval_s: float = 0.1


@dataclass
class TaskOutcome:
    """How one task attempt ended, with the platform's measurements."""

    task_id: str
    attempt: int
    status: TaskStatus
    detail: str = ""
    requests_total: int = 0
    requests_sent: int = 0
    counts: dict[str, int] = field(
        default_factory=lambda: {"ok": 0, "invalid": 0, "timeout": 0, "error": 0}
    )
    latencies_ms: list[float] = field(default_factory=list)
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    latency_violations: int = 0
    latency_violation_pct: float = 0.0
    memory_peak_mb: float | None = None
    per_call_memory: bool = False  # True when each record's memory_mb is that call's own peak
    first_issued_at: str | None = None
    last_issued_at: str | None = None
    startup_ms: float | None = None
    wall_ms: float = 0.0
    exit_code: int | None = None
    killed_by_platform: bool = False
    oom_observed: bool | None = None
    stderr_path: str | None = None
    stdout_bytes: int = 0

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary (the latency list is left out; it is in the log)."""
        out = {k: v for k, v in self.__dict__.items() if k != "latencies_ms"}
        out["counts"] = dict(self.counts)
        return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), ``q`` in [0, 100]."""
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def derive_seed(source_snapshot_id: str, run_salt: str = "") -> int:
    """The model's seed: the first 8 bytes of ``sha256(source_snapshot_id)``, as a big-endian
    integer masked to 31 bits (so any language's signed 32-bit int holds it).

    With ``run_salt`` the hashed text is ``source_snapshot_id + "\\x00" + run_salt``; the default
    (no salt) gives every run on the same snapshot the same seed, which is what the determinism
    probe and the repeats rely on.
    """
    text = source_snapshot_id if not run_salt else f"{source_snapshot_id}\x00{run_salt}"
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def _json_target(target: list[float]) -> list[float | None]:
    # JSON has no NaN: a missing history value is sent as null.
    if all(isinstance(v, int | float) and math.isfinite(v) for v in target):
        return list(target)
    return [v if isinstance(v, int | float) and math.isfinite(v) else None for v in target]


def _series_json(series: SeriesHistory) -> dict[str, Any]:
    return {"item_id": series.item_id, "start": series.start, "target": _json_target(series.target)}


def request_message(card: TaskCard, request: ForecastRequest, request_id: str) -> dict[str, Any]:
    """The ``forecast`` message for one window (history only; labels never exist here)."""
    return {
        "type": "forecast",
        "request_id": request_id,
        "window_id": request.window_id,
        "freq": card.freq,
        "horizon": card.horizon,
        "quantile_levels": [float(q) for q in card.quantile_levels],
        "series": [_series_json(s) for s in request.series],
    }


def hello_message(card: TaskCard, seed: int) -> dict[str, Any]:
    return {"type": "hello", "protocol": PROTOCOL, "seed": seed, "task": card.public_dict()}


def line_cap(card: TaskCard, request: ForecastRequest, limits: DriverLimits) -> int:
    """Longest answer line accepted for ``request``: generous for its shape, within bounds."""
    if limits.max_line_bytes is not None:
        return limits.max_line_bytes
    per_item = (1 + len(card.quantile_levels)) * card.horizon * _BYTES_PER_NUMBER + 1024
    estimate = 2 * sum(per_item + 4 * len(s.item_id) for s in request.series) + 65536
    return min(limits.line_cap_ceiling_bytes, max(limits.line_cap_floor_bytes, estimate))


def _cancel_check(cancel: Cancel) -> Callable[[], bool] | None:
    if cancel is None:
        return None
    if isinstance(cancel, threading.Event):
        return cancel.is_set
    return cancel


@dataclass(frozen=True, slots=True)
class _Stop:
    status: TaskStatus
    detail: str


class _Session:
    """State of one ``drive_task`` call; methods return a ``_Stop`` when the attempt ends."""

    def __init__(
        self,
        proc: SealedProcess,
        card: TaskCard,
        requests: Sequence[ForecastRequest],
        seed: int,
        run_id: str,
        on_record: Callable[[dict[str, Any]], None],
        clock: Clock,
        limits: DriverLimits,
        attempt: int,
        cancel: Cancel,
    ) -> None:
        self.proc, self.card, self.requests, self.seed = proc, card, requests, seed
        self.run_id, self.on_record, self.clock, self.limits = run_id, on_record, clock, limits
        self.attempt = attempt
        self.cancelled = _cancel_check(cancel)
        budget = card.resource_budget
        self.latency_ms = budget.latency_ms
        self.wall_deadline = proc.started_ns + int(budget.wall_clock_s * _NS_PER_S)
        self.startup_deadline = min(
            self.wall_deadline, proc.started_ns + int(budget.startup_s * _NS_PER_S)
        )
        self.call_timeout_ns = int(
            max(limits.call_deadline_factor * budget.latency_ms / 1000.0,
                limits.call_deadline_floor_s) * _NS_PER_S
        )
        self.quantile_keys = quantile_keys_for(card.quantile_levels)
        self.caps = [line_cap(card, r, limits) for r in requests]
        total_cap = sum(self.caps) + limits.line_cap_floor_bytes + limits.unsolicited_slack_bytes
        now_ns = _now_ns
        self.reader = LineReader(proc.stdout.fileno(), max_total_bytes=total_cap, now_ns=now_ns)
        self.writer = LineWriter(proc.stdin.fileno(), now_ns=now_ns)
        self.outcome = TaskOutcome(card.task_id, attempt, "completed", requests_total=len(requests))
        self.peak_bytes: int | None = None

    # -- helpers --------------------------------------------------------------------------------

    def _note_peak(self, value: int | None) -> None:
        if value is not None and (self.peak_bytes is None or value > self.peak_bytes):
            self.peak_bytes = value

    def _exit_stop(self, when: str) -> _Stop:
        """Why the model stopped talking: crashed, OOM-killed, or the runtime failed."""
        code = self.proc.wait(self.limits.exit_wait_s)
        if code is None:
            return _Stop("protocol_error", f"the model closed stdout {when} but kept running")
        message = self.proc.runtime_error()
        if message:
            return _Stop("platform_error", f"the runtime failed {when}: {message}")
        if code == 137 and not self.proc.killed_by_platform:
            oom = self.proc.oom_observed()
            if oom is not False:
                seen = "the cgroup recorded an OOM kill" if oom else "exit 137"
                return _Stop("oom", f"killed for memory {when} ({seen})")
            return _Stop("container_crashed", f"SIGKILLed {when}, not by the platform or OOM")
        return _Stop("container_crashed", f"the model exited with code {code} {when}")

    def _read_stop(self, result: ReadResult, when: str) -> _Stop:
        """The stop for a read that produced no line."""
        if result.kind == "eof":
            return self._exit_stop(when)
        if result.kind == "too_long":
            return _Stop("protocol_error", f"a line {when} exceeded the cap "
                                           f"({result.pending_bytes} bytes seen)")
        if result.kind == "flood":
            return _Stop("protocol_error", f"the model flooded stdout {when} "
                                           f"({self.reader.total_bytes} bytes)")
        if result.kind == "cancelled":
            return _Stop("cancelled", f"cancelled {when}")
        return self._timeout_stop(when)

    def _timeout_stop(self, when: str) -> _Stop:
        if _now_ns() >= self.wall_deadline:
            return _Stop("timeout", f"wall clock budget of {self.card.resource_budget.wall_clock_s}"
                                    f" s exceeded {when}")
        return _Stop("timeout", f"no answer within {self.call_timeout_ns / _NS_PER_S:g} s {when}")

    # -- phases ---------------------------------------------------------------------------------

    def startup(self) -> _Stop | None:
        hello = _encode(hello_message(self.card, self.seed))
        written = self.writer.write(hello, self.startup_deadline, self.cancelled)
        if written == "broken":
            return self._exit_stop("before ready")
        if written == "cancelled":
            return _Stop("cancelled", "cancelled before ready")
        if written == "timeout":
            return _Stop("startup_timeout", "the model did not read hello")
        result = self.reader.read_line(
            self.startup_deadline, self.limits.line_cap_floor_bytes, self.cancelled
        )
        if result.kind == "timeout":
            if _now_ns() >= self.wall_deadline:
                return self._timeout_stop("before ready")
            budget = self.card.resource_budget.startup_s
            return _Stop("startup_timeout", f"no ready within {budget} s")
        if result.kind != "line":
            return self._read_stop(result, "before ready")
        self.outcome.startup_ms = round((result.end_ns - self.proc.started_ns) / 1e6, 3)
        return self._check_ready(result.line)

    def _check_ready(self, line: bytes) -> _Stop | None:
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, dict) or message.get("type") != "ready":
            prefix = raw_summary(line)["raw_prefix"]
            return _Stop("protocol_error", f"expected ready, got {prefix[:120]!r}")
        self._note_peak(self.proc.memory_peak_bytes())
        return None

    def before_request(self) -> _Stop | None:
        if self.cancelled is not None and self.cancelled():
            return _Stop("cancelled", "cancelled between requests")
        if _now_ns() >= self.wall_deadline:
            return self._timeout_stop("between requests")
        if self.reader.has_unsolicited():
            return _Stop("protocol_error", "the model wrote output nobody asked for")
        return None

    def call(self, index: int, request: ForecastRequest) -> _Stop | None:
        """One request: send, time, judge, hand the record over. Returns a stop if it ends."""
        request_id = f"{request.window_id}-{index}"
        line = _encode(request_message(self.card, request, request_id))
        exchange = self._exchange(line, self.caps[index])
        outcome = self.outcome
        outcome.requests_sent += 1
        outcome.first_issued_at = outcome.first_issued_at or exchange.issued
        outcome.last_issued_at = exchange.issued
        verdict, stop = self._judge(exchange.written, exchange.result, request, request_id)
        peak = exchange.peak_bytes
        record = {
            "run_id": self.run_id,
            "task_id": self.card.task_id,
            "attempt": self.attempt,
            "window_id": request.window_id,
            "request_id": request_id,
            "request_sha256": hashlib.sha256(line).hexdigest(),
            "platform_issued_at": exchange.issued,
            "runtime_ms": exchange.runtime_ms,
            "memory_mb": None if peak is None else round(peak / _MIB, 3),
            "status": verdict.status,
            "answer": verdict.answer,
            "detail": verdict.detail,
        }
        self._count(verdict.status, exchange.runtime_ms, answered=exchange.answered)
        self.on_record(record)
        return stop

    def _exchange(self, line: bytes, cap: int) -> _Exchange:
        """The timed part: stamp, write, read one line; the cgroup peak is reset just before."""
        proc = self.proc
        self._note_peak(proc.memory_peak_bytes())  # whatever happened since the last sample
        self.outcome.per_call_memory = proc.reset_peak()
        issued = isoformat(self.clock.now())
        t0 = _now_ns()
        deadline = min(t0 + self.call_timeout_ns, self.wall_deadline)
        written = self.writer.write(line, deadline, self.cancelled)
        result = self.reader.read_line(deadline, cap, self.cancelled) if written == "ok" else None
        answered = result is not None and result.kind == "line"
        end_ns = result.end_ns if result is not None and answered else _now_ns()
        peak = proc.memory_peak_bytes()
        self._note_peak(peak)
        return _Exchange(issued, written, result, round((end_ns - t0) / 1e6, 3), answered, peak)

    def _judge(
        self, written: str, result: ReadResult | None, request: ForecastRequest, request_id: str
    ) -> tuple[_RecordVerdict, _Stop | None]:
        if written == "broken":
            stop = self._exit_stop("mid-run")
            return _RecordVerdict("invalid", None, f"no answer: {stop.detail}"), stop
        if result is None:  # the write itself timed out or was cancelled
            stop = (_Stop("cancelled", "cancelled mid-request") if written == "cancelled"
                    else self._timeout_stop("while sending the request"))
            return _RecordVerdict("timeout", None, stop.detail), stop
        if result.kind != "line":
            stop = self._read_stop(result, "mid-run")
            waited = result.kind in ("timeout", "cancelled")
            status: RecordStatus = "timeout" if waited else "invalid"
            answer = (raw_summary(result.line, result.pending_bytes)
                      if result.pending_bytes else None)
            return _RecordVerdict(status, answer, stop.detail), stop
        verdict: Verdict = judge_answer(
            result.line,
            request_id=request_id,
            item_ids=[s.item_id for s in request.series],
            horizon=self.card.horizon,
            quantile_keys=self.quantile_keys,
        )
        broke = _Stop("protocol_error", verdict.detail or "") if verdict.protocol_break else None
        return _RecordVerdict(verdict.status, verdict.answer, verdict.detail), broke

    def _count(self, status: RecordStatus, runtime_ms: float, answered: bool) -> None:
        self.outcome.counts[status] += 1
        if answered:
            self.outcome.latencies_ms.append(runtime_ms)
        if status == "timeout" or runtime_ms > self.latency_ms:
            self.outcome.latency_violations += 1

    def budget_stop(self, final: bool) -> _Stop | None:
        """Invalid answers over the threshold, then latency violations over the budget."""
        counts, total = self.outcome.counts, len(self.requests)
        unusable = counts["invalid"] + counts["error"]
        allowed_pct = self.card.resource_budget.max_latency_violation_pct
        decided = final or self.limits.stop_when_decided
        if decided and unusable > self.limits.max_invalid_predictions:
            return _Stop("invalid_predictions", f"{counts['invalid']} invalid and "
                                                f"{counts['error']} error answers")
        if decided and self.outcome.latency_violations * 100.0 > allowed_pct * total:
            return _Stop("latency_budget_exceeded",
                         f"{self.outcome.latency_violations} of {total} predictions over "
                         f"{self.latency_ms} ms (allowed {allowed_pct}%)")
        return None

    # -- the whole attempt ----------------------------------------------------------------------

    def run(self) -> _Stop:
        stop = self.startup()
        if stop is not None:
            return stop
        for index, request in enumerate(self.requests):
            stop = self.before_request() or self.call(index, request) or self.budget_stop(False)
            if stop is not None:
                return stop
        return self.budget_stop(True) or _Stop("completed", "")

    def finish(self, stop: _Stop) -> TaskOutcome:
        proc = self.proc
        try:
            if stop.status in _POLITE_ENDS and proc.poll() is None:
                deadline = _now_ns() + int(self.limits.bye_grace_s * _NS_PER_S)
                if self.writer.write(_encode({"type": "bye"}), deadline) == "ok":
                    proc.wait(self.limits.bye_grace_s)
            if proc.poll() is None:
                proc.kill()  # close() below closes our pipe ends, then reaps the process
            self._note_peak(proc.memory_peak_bytes())
            oom = proc.oom_observed()
        finally:
            self.reader.close()
            self.writer.close()
            proc.close()
        return self._summarize(stop, oom)

    def _summarize(self, stop: _Stop, oom: bool | None) -> TaskOutcome:
        out, proc = self.outcome, self.proc
        out.status, out.detail = stop.status, stop.detail
        out.exit_code = proc.exit_code
        out.killed_by_platform = proc.killed_by_platform
        out.oom_observed = oom
        out.stderr_path = str(proc.stderr_path) if proc.stderr_path is not None else None
        out.stdout_bytes = self.reader.total_bytes
        out.wall_ms = round((_now_ns() - proc.started_ns) / 1e6, 3)
        out.memory_peak_mb = None if self.peak_bytes is None else round(self.peak_bytes / _MIB, 3)
        if self.requests:
            pct = 100.0 * out.latency_violations / len(self.requests)
            out.latency_violation_pct = round(pct, 4)
        if out.latencies_ms:
            ordered = sorted(out.latencies_ms)
            out.latency_p50_ms = round(percentile(ordered, 50), 3)
            out.latency_p95_ms = round(percentile(ordered, 95), 3)
            out.latency_p99_ms = round(percentile(ordered, 99), 3)
            out.latency_max_ms = ordered[-1]
        return out


@dataclass(frozen=True, slots=True)
class _Exchange:
    issued: str
    written: str
    result: ReadResult | None
    runtime_ms: float
    answered: bool
    peak_bytes: int | None


@dataclass(frozen=True, slots=True)
class _RecordVerdict:
    status: RecordStatus
    answer: Any
    detail: str | None


def drive_task(
    proc: SealedProcess,
    *,
    card: TaskCard,
    requests: Sequence[ForecastRequest],
    seed: int,
    run_id: str,
    on_record: Callable[[dict[str, Any]], None],
    clock: Clock | None = None,
    limits: DriverLimits | None = None,
    attempt: int = 0,
    cancel: Cancel = None,
) -> TaskOutcome:
    """Run one task attempt on a started model; always stops and removes it before returning.

    ``on_record`` gets one record per request sent, synchronously, before the next request:
    ``run_id, task_id, attempt, window_id, request_id, request_sha256`` (sha256 hex of the exact
    request line sent, newline included), ``platform_issued_at`` (ISO 8601 UTC, microseconds),
    ``runtime_ms``, ``memory_mb`` (cgroup peak during the call, MiB; ``None`` if unmeasurable),
    ``status`` (``ok``/``invalid``/``timeout``/``error``), ``answer`` (the parsed answer, or
    ``{"raw_prefix", "raw_bytes", "raw_sha256"}`` for bytes that are not canonical JSON, or
    ``None`` when nothing came back) and ``detail`` (why it is not ``ok``). ``seq`` is the log's.
    An exception from ``on_record`` ends the attempt as ``platform_error``. ``clock`` gives the
    wall-clock stamps only; durations and deadlines use ``time.perf_counter_ns``.
    """
    try:
        session = _Session(
            proc, card, requests, seed, run_id, on_record,
            clock or SystemClock(), limits or DriverLimits(), attempt, cancel,
        )
    except BaseException:
        proc.close()
        raise
    try:
        stop = session.run()
    except Exception as exc:  # the platform's own fault: the pipeline retries these
        log.exception("driving %s failed", proc.name)
        stop = _Stop("platform_error", f"{type(exc).__name__}: {exc}")
    return session.finish(stop)
