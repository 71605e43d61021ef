"""The forward-protocol driver against local fake models: every terminal state, record shape."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.runner.helpers import Recorder, fake_process, make_card, make_requests
from workers.runner.forward import (
    DriverLimits,
    TaskOutcome,
    derive_seed,
    drive_task,
    hello_message,
    line_cap,
    percentile,
    request_message,
)


def run(
    mode: str,
    arg: str = "",
    *,
    tmp_path: Path | None = None,
    limits: DriverLimits | None = None,
    cancel: Any = None,
    on_record: Any = None,
    **card_kw: Any,
) -> tuple[TaskOutcome, Recorder]:
    card = make_card(**card_kw)
    recorder = Recorder()
    outcome = drive_task(
        fake_process(mode, arg, tmp_path), card=card, requests=make_requests(card), seed=1234,
        run_id="run-1", on_record=on_record or recorder, limits=limits, cancel=cancel, attempt=2,
    )
    return outcome, recorder


def test_completed_run_records_every_window() -> None:
    card = make_card(windows=6)
    requests = make_requests(card)
    sent: list[bytes] = []
    recorder = Recorder()
    outcome = drive_task(fake_process("ok"), card=card, requests=requests, seed=9,
                         run_id="run-1", on_record=recorder, attempt=1)
    assert outcome.status == "completed", outcome.detail
    assert outcome.counts == {"ok": 6, "invalid": 0, "timeout": 0, "error": 0}
    assert outcome.requests_sent == 6 and outcome.exit_code == 0
    assert not outcome.killed_by_platform
    assert outcome.startup_ms is not None and outcome.startup_ms > 0
    assert len(outcome.latencies_ms) == 6 and outcome.latency_p50_ms is not None
    assert outcome.latency_max_ms == max(outcome.latencies_ms)
    for n, (record, request) in enumerate(zip(recorder.records, requests, strict=True)):
        assert set(record) == {
            "run_id", "task_id", "attempt", "window_id", "request_id", "request_sha256",
            "platform_issued_at", "runtime_ms", "memory_mb", "status", "answer", "detail",
        }
        assert record["request_id"] == f"{request.window_id}-{n}"
        assert record["attempt"] == 1 and record["status"] == "ok" and record["detail"] is None
        line = json.dumps(request_message(card, request, record["request_id"]),
                          separators=(",", ":")).encode() + b"\n"
        sent.append(line)
        assert record["request_sha256"] == hashlib.sha256(line).hexdigest()
        forecasts = record["answer"]["forecasts"]
        assert [f["item_id"] for f in forecasts] == ["item-0", "item-1"]
        assert all(len(f["mean"]) == card.horizon for f in forecasts)
        assert set(forecasts[0]["quantiles"]) == {"0.1", "0.5", "0.9"}
        assert record["platform_issued_at"].endswith("Z")
        datetime.fromisoformat(record["platform_issued_at"].replace("Z", "+00:00"))
    stamps = [r["platform_issued_at"] for r in recorder.records]
    assert stamps == sorted(stamps)
    assert outcome.first_issued_at == stamps[0] and outcome.last_issued_at == stamps[-1]


def test_hello_carries_public_card_and_seed_but_no_labels() -> None:
    card = make_card()
    hello = hello_message(card, 77)
    assert hello["protocol"] == "future-ts-forward/1" and hello["seed"] == 77
    text = json.dumps(hello)
    assert "labels" not in text and "available_at" not in text
    assert hello["task"]["task_id"] == card.task_id


def test_each_record_is_handed_over_before_the_next_request() -> None:
    seen: list[dict[str, Any]] = []

    def slow_sink(record: dict[str, Any]) -> None:
        seen.append(record)
        time.sleep(0.05)

    outcome, _ = run("ok", windows=3, on_record=slow_sink)
    assert outcome.status == "completed"
    stamps = [datetime.fromisoformat(r["platform_issued_at"].replace("Z", "+00:00"))
              for r in seen]
    assert all((b - a).total_seconds() >= 0.05 for a, b in itertools.pairwise(stamps))


class FrozenClock:
    def now(self) -> datetime:
        return datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

    def monotonic_ns(self) -> int:
        return 0


def test_an_injected_clock_stamps_but_does_not_time() -> None:
    card = make_card(windows=2)
    recorder = Recorder()
    outcome = drive_task(fake_process("slow", "20"), card=card, requests=make_requests(card),
                         seed=1, run_id="r", on_record=recorder, clock=FrozenClock())
    assert outcome.status == "completed"
    assert {r["platform_issued_at"] for r in recorder.records} == {"2030-01-02T03:04:05.123456Z"}
    assert all(r["runtime_ms"] >= 20 for r in recorder.records)


def test_runtime_is_the_platform_measurement() -> None:
    outcome, rec = run("slow", "30", windows=4)
    assert outcome.status == "completed"
    assert all(30.0 <= r["runtime_ms"] < 250.0 for r in rec.records)


@pytest.mark.parametrize(
    ("mode", "status", "statuses"),
    [
        ("never-ready", "startup_timeout", []),
        ("bad-ready", "protocol_error", []),
        ("garbage", "protocol_error", ["invalid"]),
        ("giant-line", "protocol_error", ["invalid"]),
        ("flood", "protocol_error", ["invalid"]),
        ("unsolicited", "protocol_error", ["ok"]),
        ("exit-midrun", "container_crashed", ["ok", "ok", "invalid"]),
        ("exit0-midrun", "container_crashed", ["ok", "ok", "invalid"]),
        ("crash-at-start", "container_crashed", []),
        ("error", "invalid_predictions", ["error"] * 5),
        ("short", "invalid_predictions", ["invalid"] * 5),
        ("nan", "invalid_predictions", ["invalid"] * 5),
        ("wrong-id", "invalid_predictions", ["invalid"] * 5),
        ("no-forecasts", "invalid_predictions", ["invalid"] * 5),
        ("bad-keys", "invalid_predictions", ["invalid"] * 5),
        ("big-int", "invalid_predictions", ["invalid"] * 5),
    ],
)
def test_terminal_states(mode: str, status: str, statuses: list[str]) -> None:
    outcome, rec = run(mode, windows=5, startup_s=1.0)
    assert outcome.status == status, outcome.detail
    assert rec.statuses == statuses
    assert outcome.exit_code is not None  # always reaped


def test_sigkill_not_sent_by_the_platform_is_oom_without_cgroup_evidence() -> None:
    # With no cgroup (plain child process) exit 137 is the practical OOM signal.
    outcome, rec = run("self-kill", windows=5)
    assert outcome.status == "oom" and outcome.exit_code == 137
    assert not outcome.killed_by_platform
    assert rec.statuses == ["ok", "ok", "invalid"]


def test_a_hung_call_times_out_and_ends_the_task() -> None:
    limits = DriverLimits(call_deadline_floor_s=0.5, call_deadline_factor=1.0)
    started = time.monotonic()
    outcome, rec = run("hang", windows=5, latency_ms=100, limits=limits)
    assert outcome.status == "timeout" and "no answer within 0.5 s" in outcome.detail
    assert rec.statuses == ["timeout"] and rec.records[0]["answer"] is None
    assert outcome.killed_by_platform and outcome.exit_code == 137
    assert time.monotonic() - started < 3


def test_wall_clock_budget_ends_the_task() -> None:
    outcome, rec = run("slow", "400", windows=10, wall_clock_s=1.5)
    assert outcome.status == "timeout" and "wall clock" in outcome.detail
    assert rec.statuses[-1] == "timeout" and outcome.killed_by_platform
    assert outcome.wall_ms < 2500


def test_a_model_that_stops_reading_cannot_block_the_writer() -> None:
    card = make_card(windows=2, latency_ms=50)
    limits = DriverLimits(call_deadline_floor_s=0.5, call_deadline_factor=1.0)
    recorder = Recorder()
    huge = make_requests(card, items=4, length=100_000)  # ~2.6 MB per request > pipe buffer
    outcome = drive_task(fake_process("no-read"), card=card, requests=huge, seed=1,
                         run_id="r", on_record=recorder, limits=limits)
    assert outcome.status == "timeout"
    assert recorder.statuses == ["timeout"]


def test_latency_budget() -> None:
    # every 2nd call sleeps 300 ms: 2 of 5 over 200 ms = 40 % > 20 %
    outcome, rec = run("slow-every", "2", windows=5, latency_ms=200, violation_pct=20)
    assert outcome.status == "latency_budget_exceeded"
    assert outcome.latency_violations == 2 and outcome.latency_violation_pct == 40.0
    assert rec.statuses == ["ok"] * 5
    outcome, _ = run("slow-every", "2", windows=5, latency_ms=200, violation_pct=40)
    assert outcome.status == "completed"


def test_stop_when_decided_ends_early() -> None:
    limits = DriverLimits(stop_when_decided=True)
    outcome, rec = run("short", windows=5, limits=limits)
    assert outcome.status == "invalid_predictions" and rec.statuses == ["invalid"]


def test_cancel_while_waiting() -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    outcome, rec = run("hang", windows=3, cancel=cancel)
    assert outcome.status == "cancelled"
    assert rec.statuses == ["timeout"]
    assert time.monotonic() - started < 2


def test_cancel_between_requests() -> None:
    outcome, rec = run("ok", windows=3, cancel=lambda: True)
    assert outcome.status == "cancelled" and rec.statuses == []


def test_sink_failure_is_a_platform_error_and_the_model_is_stopped() -> None:
    def broken_sink(record: dict[str, Any]) -> None:
        raise OSError("disk full")

    outcome, _ = run("ok", windows=3, on_record=broken_sink)
    assert outcome.status == "platform_error" and "disk full" in outcome.detail
    assert outcome.exit_code is not None


def test_stderr_is_captured_and_capped(tmp_path: Path) -> None:
    outcome, _ = run("stderr-spam", windows=3, tmp_path=tmp_path)
    assert outcome.status == "completed"
    assert outcome.stderr_path is not None
    data = Path(outcome.stderr_path).read_bytes()
    assert data.startswith(b"x" * 4096)
    assert b"stderr truncated" in data and len(data) < 4096 + 200


def test_derive_seed_is_stable_and_31_bit() -> None:
    snap = "sha256:" + "0" * 64
    seed = derive_seed(snap)
    assert seed == derive_seed(snap) and 0 <= seed < 2**31
    expected = int.from_bytes(hashlib.sha256(snap.encode()).digest()[:8], "big") & 0x7FFFFFFF
    assert seed == expected
    assert derive_seed(snap, "salt") != seed


def test_line_cap_bounds() -> None:
    card = make_card(horizon=4)
    small = make_requests(card, items=1)[0]
    assert line_cap(card, small, DriverLimits()) == 1024 * 1024
    big_card = make_card(horizon=10_000, levels=tuple(i / 100 for i in range(1, 100)))
    big = make_requests(big_card, items=50)[0]
    assert line_cap(big_card, big, DriverLimits()) == 16 * 1024 * 1024
    assert line_cap(card, small, DriverLimits(max_line_bytes=10)) == 10


def test_percentile_matches_linear_interpolation() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0 and percentile(values, 0) == 1.0


def test_missing_history_values_are_sent_as_null() -> None:
    card = make_card()
    request = make_requests(card, items=1)[0]
    request.series[0].target[3] = float("nan")
    message = request_message(card, request, "w-0")
    assert message["series"][0]["target"][3] is None
    json.dumps(message, allow_nan=False)
