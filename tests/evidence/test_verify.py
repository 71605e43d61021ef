"""Offline verification of a signed report: the happy path and tampering with every part.

Change any byte of any archived object, or any field of the envelope or of the signed payload,
and ``verify_report`` must fail, naming the first check that does not hold.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.evidence.errors import ArchiveObjectMissing, ArchiveUnavailable, NoActiveKey
from app.evidence.keys import KeyRing
from app.evidence.report import PREDICATE_TYPE, peek_statement
from app.evidence.verify import (
    ArchiveReader,
    DirectoryArchive,
    StoreArchive,
    VerifyResult,
    verify_report,
)
from app.storage import ObjectCorrupted, StoreUnavailable, layout
from app.storage.local import LocalDirectoryStore
from app.warnings import DevOnlyWarning
from tests.evidence.runfactory import (
    KEYS_FROM,
    SIGNED_AT,
    VERIFY_NOW,
    BuiltRun,
    build_run,
    seeded_key,
)

ALL_CHECKS = (
    "envelope", "jwks", "signature", "payload_type", "statement", "key_validity",
    "subject:predictions.jsonl", "subject:run_manifest.json", "subject:image",
    "archive:checkpoint", "archive:container.json", "archive:predictions.jsonl",
    "archive:run_manifest.json", "archive:stderr.log",
    "tree_size", "merkle_root", "checkpoint", "checkpoint_signature", "checkpoint_key_validity",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> BuiltRun:
    return build_run(tmp_path_factory.mktemp("run"))


def _verify(run: BuiltRun, envelope: bytes | None = None, archive: ArchiveReader | None = None,
            jwks: Mapping[str, Any] | None = None, **kwargs: Any) -> VerifyResult:
    return verify_report(envelope if envelope is not None else run.envelope,
                         archive or DirectoryArchive(run.archive_dir),
                         jwks if jwks is not None else run.jwks, VERIFY_NOW, **kwargs)


def _failed(result: VerifyResult) -> str:
    assert not result.ok and result.failure is not None
    return result.failure.check


def test_an_untouched_run_verifies(run: BuiltRun) -> None:
    result = _verify(run)
    assert result.ok, result.failure
    assert result.passed == ALL_CHECKS
    assert result.tree is not None and result.tree.size == 25
    assert result.statement is not None
    assert result.statement["predicate"]["prediction_hash"] == result.tree.prediction_hash
    assert result.report_kid == run.report_key.kid
    assert peek_statement(run.envelope) == run.statement


# --- archived objects -----------------------------------------------------------------------------

EXPECTED_BY_OBJECT = {
    layout.PREDICTIONS: {"subject:predictions.jsonl"},
    layout.RUN_MANIFEST: {"subject:run_manifest.json"},
    layout.CONTAINER: {"subject:image", "archive:container.json"},
    layout.CHECKPOINT: {"archive:checkpoint"},
    layout.STDERR: {"archive:stderr.log"},
}


class FlippedArchive:
    """The real archive with one byte of one object flipped."""

    def __init__(self, root: Path, name: str, position: int) -> None:
        self._inner = DirectoryArchive(root)
        self._name, self._position = name, position

    def read(self, name: str) -> bytes:
        data = self._inner.read(name)
        if name != self._name:
            return data
        changed = bytearray(data)
        changed[self._position % len(data)] ^= 0x01
        return bytes(changed)


def _positions(size: int, count: int = 24) -> list[int]:
    return sorted({0, 1, size // 2, size - 2, size - 1, *range(0, size, max(1, size // count))})


def _object_cases() -> list[Any]:
    sizes = {name: len(data) for name, data in _sample_objects().items()}
    return [pytest.param(name, pos, id=f"{name}@{pos}")
            for name in EXPECTED_BY_OBJECT for pos in _positions(sizes[name])]


def _sample_objects() -> dict[str, bytes]:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        sample = build_run(Path(directory))
        return {name: sample.path(name).read_bytes() for name in EXPECTED_BY_OBJECT}


@pytest.mark.parametrize(("name", "position"), _object_cases())
def test_flipping_any_byte_of_an_archived_object_fails(
    run: BuiltRun, name: str, position: int
) -> None:
    result = _verify(run, archive=FlippedArchive(run.archive_dir, name, position))
    assert _failed(result) in EXPECTED_BY_OBJECT[name], result.failure


def test_every_byte_of_predictions_is_covered(run: BuiltRun) -> None:
    data = run.path(layout.PREDICTIONS).read_bytes()
    for position in range(0, len(data), 3):
        result = _verify(run, archive=FlippedArchive(run.archive_dir, layout.PREDICTIONS, position))
        assert _failed(result) == "subject:predictions.jsonl"


class MissingArchive:
    def __init__(self, root: Path, name: str) -> None:
        self._inner, self._name = DirectoryArchive(root), name

    def read(self, name: str) -> bytes:
        if name == self._name:
            raise ArchiveObjectMissing(name)
        return self._inner.read(name)


@pytest.mark.parametrize(("name", "check"), [
    (layout.PREDICTIONS, "subject:predictions.jsonl"),
    (layout.RUN_MANIFEST, "subject:run_manifest.json"),
    (layout.CONTAINER, "subject:image"),
    (layout.CHECKPOINT, "archive:checkpoint"),
    (layout.STDERR, "archive:stderr.log"),
])
def test_a_missing_archived_object_fails(run: BuiltRun, name: str, check: str) -> None:
    result = _verify(run, archive=MissingArchive(run.archive_dir, name))
    assert _failed(result) == check
    assert result.failure is not None and name in result.failure.detail


# --- the envelope ---------------------------------------------------------------------------------


def test_flipping_any_byte_of_the_envelope_fails(run: BuiltRun) -> None:
    for position in range(len(run.envelope)):
        changed = bytearray(run.envelope)
        changed[position] ^= 0x01
        result = _verify(run, envelope=bytes(changed))
        assert _failed(result) in {"envelope", "signature"}, (position, result.failure)


def _envelope_dict(run: BuiltRun) -> dict[str, Any]:
    return json.loads(run.envelope)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("field", "value", "check"), [
    ("payloadType", "application/json", "signature"),
    ("payload", base64.b64encode(b"{}").decode(), "signature"),
    ("signatures", [], "signature"),
    ("sig", base64.b64encode(bytes(64)).decode(), "signature"),
    ("keyid", "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k", "signature"),
    ("keyid", None, "signature"),
    ("payload", None, "envelope"),
])
def test_changing_an_envelope_field_fails(run: BuiltRun, field: str, value: Any,
                                          check: str) -> None:
    document = _envelope_dict(run)
    target = document["signatures"][0] if field in {"sig", "keyid"} else document
    if value is None:
        del target[field]
    else:
        target[field] = value
    assert _failed(_verify(run, envelope=json.dumps(document).encode())) == check


PAYLOAD_EDITS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("_type", lambda s: s.update({"_type": "https://in-toto.io/Statement/v0.1"})),
    ("predicateType", lambda s: s.update({"predicateType": PREDICATE_TYPE + "x"})),
    ("subject digest", lambda s: s["subject"][1]["digest"].update({"sha256": "0" * 64})),
    ("subject name", lambda s: s["subject"][0].update({"name": "oci:evil/model"})),
    ("run_id", lambda s: s["predicate"].update({"run_id": "other"})),
    ("prediction_hash", lambda s: s["predicate"].update({"prediction_hash": "sha256:" + "0" * 64})),
    ("signed_at", lambda s: s["predicate"].update({"signed_at": "2026-11-30T12:00:01Z"})),
    ("metric", lambda s: s["predicate"]["metrics"]["m4-hourly"]["mase"].update({"mean": 0.5})),
    ("capability", lambda s: s["predicate"]["capability_vector"].update({"accuracy": 0.99})),
    ("checkpoint", lambda s: s["predicate"]["prediction_log"].update({"checkpoint": "x"})),
    ("archive digest", lambda s: s["predicate"]["archive"]["objects"]["stderr.log"].update(
        {"sha256": "0" * 64})),
    ("tier", lambda s: s["predicate"].update({"tier": "live"})),
]


@pytest.mark.parametrize(("what", "edit"), PAYLOAD_EDITS, ids=[w for w, _ in PAYLOAD_EDITS])
def test_changing_a_payload_field_without_the_key_fails_the_signature(
    run: BuiltRun, what: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    statement = copy.deepcopy(run.statement)
    edit(statement)
    document = _envelope_dict(run)
    document["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    assert _failed(_verify(run, envelope=json.dumps(document).encode())) == "signature"


# --- validly signed, but wrong: each later check names itself ----------------------------------


def _mutated(tmp_path: Path, edit: Callable[[dict[str, Any]], None], **kwargs: Any) -> BuiltRun:
    return build_run(tmp_path, mutate_statement=edit, **kwargs)


@pytest.mark.parametrize(("edit", "check"), [
    (lambda s: s.update({"_type": "https://in-toto.io/Statement/v0.1"}), "statement"),
    (lambda s: s.update({"predicateType": "https://slsa.dev/provenance/v1"}), "statement"),
    (lambda s: s["predicate"].pop("signed_at"), "key_validity"),
    (lambda s: s["predicate"].update({"signed_at": "2025-12-31T23:59:59Z"}), "key_validity"),
    (lambda s: s["predicate"].update({"signed_at": "2026-12-30T00:00:00Z"}), "key_validity"),
    (lambda s: s["subject"].pop(1), "subject:predictions.jsonl"),
    (lambda s: s["subject"][2]["digest"].update({"sha256": "0" * 64}), "subject:run_manifest.json"),
    (lambda s: s["subject"][0]["digest"].update({"sha256": "0" * 64}), "subject:image"),
    (lambda s: s["subject"][0].update({"name": "oci:127.0.0.1:5000/other"}), "subject:image"),
    (lambda s: s["predicate"]["archive"]["objects"]["stderr.log"].update({"size": 1}),
     "archive:stderr.log"),
    (lambda s: s["predicate"]["prediction_log"].update({"tree_size": 24}), "tree_size"),
    (lambda s: s["predicate"].update({"prediction_hash": "sha256:" + "0" * 64}), "merkle_root"),
    (lambda s: s["predicate"]["prediction_log"].update({"origin": "future-ts.test/run/x"}),
     "checkpoint"),
    (lambda s: s["predicate"]["prediction_log"].update(
        {"checkpoint_signed_at": "2025-06-01T00:00:00Z"}), "checkpoint_key_validity"),
])
def test_a_signed_but_wrong_report_names_the_failing_check(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], check: str
) -> None:
    built = _mutated(tmp_path, edit)
    assert _failed(_verify(built)) == check


def test_wrong_payload_type_even_when_signed(tmp_path: Path) -> None:
    built = build_run(tmp_path, payload_type="application/json")
    assert _failed(_verify(built)) == "payload_type"


def test_checkpoint_for_another_log_state(tmp_path: Path) -> None:
    built = build_run(tmp_path)
    other = build_run(tmp_path / "other", records=24)
    note = other.statement["predicate"]["prediction_log"]["checkpoint"]

    def swap(statement: dict[str, Any]) -> None:
        statement["predicate"]["prediction_log"]["checkpoint"] = note

    again = _mutated(tmp_path / "again", swap)
    assert _verify(built).ok
    assert _failed(_verify(again)) == "checkpoint"


def test_checkpoint_signed_with_the_report_key_is_refused(tmp_path: Path) -> None:
    report_key = seeded_key("report", 1)
    built = build_run(tmp_path, checkpoint_signer=report_key)
    assert _failed(_verify(built)) == "checkpoint_signature"


def test_report_signed_with_the_log_key_is_refused(tmp_path: Path) -> None:
    built = build_run(tmp_path, report_key=seeded_key("report", 2), log_key=seeded_key("log", 3))
    wrong = build_run(tmp_path / "w", report_key=seeded_key("report", 3),
                      log_key=seeded_key("log", 2))
    # The JWKS lists key 3 for the log purpose only: a report signed with it must not verify.
    assert _failed(_verify(built, envelope=wrong.envelope, archive=DirectoryArchive(
        wrong.archive_dir))) == "signature"


def test_report_key_outside_its_window(tmp_path: Path) -> None:
    retired = seeded_key("report", 1, not_after=SIGNED_AT - timedelta(days=1))
    with pytest.raises(NoActiveKey):  # sign_report itself refuses a key outside its window
        build_run(tmp_path / "refused", report_key=retired)
    built = build_run(tmp_path, report_key=retired, mutate_statement=lambda s: None)
    result = _verify(built, jwks=KeyRing([retired, built.log_key]).jwks())
    assert _failed(result) == "key_validity"
    assert result.failure is not None and "window" in result.failure.detail


def test_log_key_outside_its_window(tmp_path: Path) -> None:
    early = seeded_key("log", 2, not_before=SIGNED_AT + timedelta(days=1))
    built = build_run(tmp_path, log_key=early)
    assert _failed(_verify(built, jwks=KeyRing([built.report_key, early]).jwks())) == (
        "checkpoint_key_validity")


def test_rotated_keys_still_verify_old_reports(tmp_path: Path) -> None:
    old = seeded_key("report", 1, not_before=KEYS_FROM, not_after=SIGNED_AT + timedelta(days=1))
    new = seeded_key("report", 5, not_before=SIGNED_AT + timedelta(days=1))
    built = build_run(tmp_path, report_key=old)
    assert _verify(built, jwks=KeyRing([new, built.log_key], [old.verification]).jwks()).ok


def test_a_malformed_jwks_fails(run: BuiltRun) -> None:
    jwks = copy.deepcopy(run.jwks)
    jwks["keys"][0]["x"] = jwks["keys"][1]["x"]
    assert _failed(_verify(run, jwks=jwks)) == "jwks"
    assert _failed(_verify(run, jwks={"keys": []})) == "signature"


def test_torn_predictions_fail_before_the_root(tmp_path: Path) -> None:
    def drop_newline(statement: dict[str, Any]) -> None:
        data = (tmp_path / layout.PREDICTIONS).read_bytes()[:-1]
        (tmp_path / layout.PREDICTIONS).write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        statement["subject"][1]["digest"]["sha256"] = digest
        statement["predicate"]["archive"]["objects"][layout.PREDICTIONS] = {
            "sha256": digest, "size": len(data)}

    built = _mutated(tmp_path, drop_newline)
    result = _verify(built)
    assert _failed(result) == "tree_size"
    assert result.failure is not None and "torn" in result.failure.detail


def test_metrics_hook(run: BuiltRun) -> None:
    seen: list[Mapping[str, Any]] = []

    def agree(predicate: Mapping[str, Any], archive: ArchiveReader) -> Sequence[str]:
        seen.append(predicate)
        assert archive.read(layout.PREDICTIONS)
        return []

    def disagree(predicate: Mapping[str, Any], archive: ArchiveReader) -> Sequence[str]:
        return ["m4-hourly mase: report 0.91, recomputed 0.93"]

    result = _verify(run, recompute_metrics=agree)
    assert result.ok and result.passed[-1] == "metrics" and seen[0]["run_id"] == run.run_id
    failed = _verify(run, recompute_metrics=disagree)
    assert _failed(failed) == "metrics" and failed.failure is not None
    assert "0.93" in failed.failure.detail


def test_directory_archive_refuses_paths(run: BuiltRun) -> None:
    archive = DirectoryArchive(run.archive_dir)
    for name in ("../x", ".hidden", "a/b", ""):
        with pytest.raises(ArchiveObjectMissing):
            archive.read(name)


class _FlakyStore(LocalDirectoryStore):
    """A real local store whose reads fail the way a remote store can."""

    def __init__(self, root: Path, error: Exception) -> None:
        with pytest.warns(DevOnlyWarning):
            super().__init__(root)
        self.error = error

    def get(self, key: str) -> bytes:
        raise self.error


def test_store_detected_corruption_fails_the_named_check(run: BuiltRun, tmp_path: Path) -> None:
    store = _FlakyStore(tmp_path, ObjectCorrupted("runs/r/predictions.jsonl", "aa", "bb"))
    result = _verify(run, archive=StoreArchive(store, run.run_id))
    assert _failed(result) == "subject:predictions.jsonl"
    assert result.failure is not None and "changed after it was written" in result.failure.detail


def test_an_unreadable_archive_is_not_a_verdict(run: BuiltRun, tmp_path: Path) -> None:
    store = _FlakyStore(tmp_path, StoreUnavailable("connection refused"))
    with pytest.raises(ArchiveUnavailable, match="connection refused"):
        _verify(run, archive=StoreArchive(store, run.run_id))
