"""The per-run log: JCS lines, durable appends, resume after a crash, and the fast verifier."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from app.evidence import prediction_log
from app.evidence.errors import LogCorrupted, LogLocked, NotCanonicalJSON
from app.evidence.merkle import EMPTY_ROOT, CompactRange, root_of_leaves, verify_inclusion
from app.evidence.prediction_log import (
    PredictionLog,
    PredictionRecord,
    inclusion_proof_of,
    iter_records,
    root_of_bytes,
    root_of_file,
)


def _record(seq: int, **extra: object) -> dict[str, object]:
    return {"seq": seq, "run_id": "r1", "status": "ok", "answer": {"mean": [seq, 1.5]}, **extra}


def test_append_writes_jcs_lines_and_tracks_the_root(tmp_path: Path) -> None:
    path = tmp_path / "predictions.jsonl"
    with PredictionLog.create(path) as log:  # durable: fsync per record
        entries = [log.append(_record(i, note="line\nbreak")) for i in range(5)]
        head = log.tree_head()
        assert log.prediction_hash == "sha256:" + head.root.hex()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 6  # one record per line, newline-terminated
    assert [e.line_bytes for e in entries] == lines[:-1]
    assert lines[0] == (
        b'{"answer":{"mean":[0,1.5]},"note":"line\\nbreak","run_id":"r1","seq":0,"status":"ok"}')
    assert [e.seq for e in entries] == list(range(5))
    assert head.size == 5 and head.root == root_of_leaves(lines[:-1])
    assert root_of_file(path) == head == root_of_bytes(path.read_bytes())


def test_record_typed_dict_is_accepted(tmp_path: Path) -> None:
    record: PredictionRecord = {
        "run_id": "r", "seq": 0, "task_id": "t", "window_id": "w", "request_id": "q",
        "platform_issued_at": "2026-11-30T00:00:00Z", "runtime_ms": 1.0, "memory_mb": None,
        "status": "timeout", "request_sha256": "00" * 32, "answer": None,
    }
    with PredictionLog.create(tmp_path / "p.jsonl", durable=False) as log:
        assert log.append(record).seq == 0


def test_refused_records_write_nothing(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with PredictionLog.create(path, durable=False) as log:
        log.append(_record(0))
        with pytest.raises(ValueError, match="next position 1"):
            log.append(_record(5))
        with pytest.raises(NotCanonicalJSON):
            log.append(_record(1, answer={"mean": [math.nan]}))
        log.append(_record(1))
        assert log.size == 2
    assert root_of_file(path).size == 2


def test_create_refuses_an_existing_log(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    PredictionLog.create(path).close()
    with pytest.raises(FileExistsError):
        PredictionLog.create(path)


def test_second_writer_is_locked_out(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with PredictionLog.open(path, durable=False), pytest.raises(LogLocked):
        PredictionLog.open(path)
    PredictionLog.open(path).close()  # the lock goes with the first writer


def test_open_resumes_and_truncates_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with PredictionLog.create(path, durable=False) as log:
        for i in range(7):
            log.append(_record(i))
        head = log.tree_head()
    with path.open("ab") as handle:
        handle.write(b'{"answer":{"mean":[7,')  # a crash in the middle of the 8th write
    with pytest.raises(LogCorrupted, match="torn"):
        root_of_file(path)
    with PredictionLog.open(path) as log:
        assert log.tree_head() == head
        log.append(_record(7))
        assert log.size == 8
    assert root_of_file(path).size == 8
    assert json.loads(path.read_bytes().split(b"\n")[7])["seq"] == 7


def test_compact_state_resumes_the_root(tmp_path: Path) -> None:
    with PredictionLog.create(tmp_path / "p.jsonl", durable=False) as log:
        for i in range(11):
            log.append(_record(i))
        compact = CompactRange.from_state(*log.compact_state())
        assert compact.root() == log.root()


def test_empty_log(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    PredictionLog.create(path).close()
    head = root_of_file(path)
    assert (head.size, head.root) == (0, EMPTY_ROOT)


@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 1 << 20])
def test_verifier_handles_lines_across_read_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    path = tmp_path / "p.jsonl"
    with PredictionLog.create(path, durable=False) as log:
        for i in range(40):
            log.append(_record(i, pad="x" * (i * 3)))
        head = log.tree_head()
    monkeypatch.setattr(prediction_log, "_CHUNK", chunk)
    assert root_of_file(path) == head
    assert root_of_bytes(path.read_bytes()) == head
    with PredictionLog.open(path, durable=False) as again:  # rehash on open uses chunks too
        assert again.tree_head() == head


def test_inclusion_proof_of_a_record(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with PredictionLog.create(path, durable=False) as log:
        entries = [log.append(_record(i)) for i in range(13)]
    data = path.read_bytes()
    head, leaf, proof = inclusion_proof_of(data, 9)
    assert leaf == entries[9].leaf_hash
    verify_inclusion(9, head.size, leaf, proof, head.root)
    assert [r["seq"] for r in iter_records(data)] == list(range(13))


def test_failed_write_stops_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = PredictionLog.create(tmp_path / "p.jsonl", durable=False)

    def disk_full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError):
        log.append(_record(0))
    monkeypatch.undo()
    with pytest.raises(LogCorrupted, match="reopen"):
        log.append(_record(0))
    log.close()
