"""Offline verification of a signed BenchmarkReport against its archive and a JWKS.

``verify_report`` runs the checks below in this order and stops at the first failure, which it
names (``VerifyFailure.check``) so the CLI can exit non-zero saying exactly what does not match:

1. ``envelope``            the DSSE envelope parses (JSON, canonical base64 in either alphabet)
2. ``jwks``                the JWKS parses (OKP/Ed25519, kid = RFC 7638 thumbprint)
3. ``signature``           a signature verifies over PAE with a *report* key chosen by its keyid
4. ``payload_type``        ``application/vnd.in-toto+json``
5. ``statement``           JSON object, ``_type`` Statement v1, our ``predicateType``, the fields
6. ``key_validity``        the report key's window covers the predicate's ``signed_at``, which is
                           not in the future
7. ``subject:predictions.jsonl``, ``subject:run_manifest.json``: SHA-256 of the archived bytes;
   ``subject:image``: the manifest digest in the archived ``container.json``
8. ``archive:<name>``      every object listed in ``predicate.archive.objects`` (digest and size)
9. ``tree_size``, ``merkle_root``: recomputed from the archived ``predictions.jsonl`` against
                           ``prediction_log.tree_size`` and ``prediction_hash``
10. ``checkpoint``         the checkpoint text parses, names ``prediction_log.origin`` and states
                           the recomputed size and root
11. ``checkpoint_signature`` signed under its origin by a *log* key of the JWKS
12. ``checkpoint_key_validity`` that log key's window covers ``checkpoint_signed_at``
13. ``metrics``            optional hook: a scorer recomputes the metrics from the archive

Nothing here trusts the database: only the envelope, the archived bytes and the JWKS.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.evidence.checkpoint import Checkpoint, NoteVerifier, open_note, parse_note
from app.evidence.dsse import PAYLOAD_TYPE_IN_TOTO, Envelope, verify_envelope
from app.evidence.errors import (
    ArchiveObjectCorrupted,
    ArchiveObjectMissing,
    ArchiveUnavailable,
    EnvelopeSignatureInvalid,
    EvidenceError,
    LogCorrupted,
    MalformedEnvelope,
    MalformedJWKS,
    MalformedNote,
    NoteSignatureInvalid,
)
from app.evidence.keys import VerificationKey, format_time, parse_time, verification_keys_from_jwks
from app.evidence.prediction_log import TreeHead, root_of_bytes
from app.evidence.report import (
    IMAGE_SUBJECT_PREFIX,
    PREDICATE_TYPE,
    PREDICTIONS_SUBJECT,
    RUN_MANIFEST_SUBJECT,
    STATEMENT_TYPE,
)
from app.storage.errors import ObjectCorrupted, ObjectNotFound, StoreError
from app.storage.layout import CONTAINER, run_key

if TYPE_CHECKING:
    from app.storage.port import ArtifactStore

CLOCK_SKEW = timedelta(minutes=5)


class ArchiveReader(Protocol):
    """Read one archived object of a run by its name (``predictions.jsonl``, ``checkpoint``...)."""

    def read(self, name: str) -> bytes:
        """Return the object's bytes.

        Raises ``ArchiveObjectMissing`` if there is none, ``ArchiveObjectCorrupted`` if the store
        itself detects changed bytes (both become verification failures), and
        ``ArchiveUnavailable`` if the archive cannot be read at all (``verify_report`` lets that
        one propagate: it is not evidence about the report).
        """
        ...


def _check_name(name: str) -> str:
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ArchiveObjectMissing(f"{name!r} is not an archive object name")
    return name


class DirectoryArchive:
    """A run archive downloaded to a local directory (``future-ts verify --archive DIR``)."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def read(self, name: str) -> bytes:
        try:
            return (self._root / _check_name(name)).read_bytes()
        except (FileNotFoundError, IsADirectoryError) as exc:
            raise ArchiveObjectMissing(f"{name} is not in {self._root}") from exc
        except OSError as exc:
            raise ArchiveUnavailable(f"cannot read {name} in {self._root}: {exc}") from exc


class StoreArchive:
    """A run archive in an ``ArtifactStore`` under ``runs/<run_id>/``."""

    def __init__(self, store: ArtifactStore, run_id: str) -> None:
        self._store = store
        self._run_id = run_id

    def read(self, name: str) -> bytes:
        key = run_key(self._run_id, _check_name(name))
        try:
            return self._store.get(key)
        except ObjectNotFound as exc:
            raise ArchiveObjectMissing(f"{key} is not in the store") from exc
        except ObjectCorrupted as exc:
            raise ArchiveObjectCorrupted(str(exc)) from exc
        except StoreError as exc:
            raise ArchiveUnavailable(f"cannot read {key}: {exc}") from exc


MetricsHook = Callable[[Mapping[str, Any], ArchiveReader], Sequence[str]]
"""Recompute the metrics of a verified predicate from the archive; return the differences."""


@dataclass(frozen=True)
class VerifyFailure:
    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    failure: VerifyFailure | None
    passed: tuple[str, ...]
    statement: Mapping[str, Any] | None = None  # trusted only when ``ok``
    report_kid: str | None = None
    tree: TreeHead | None = None


class _Failed(Exception):
    def __init__(self, check: str, detail: str) -> None:
        super().__init__(detail)
        self.failure = VerifyFailure(check, detail)


@dataclass
class _State:
    archive: ArchiveReader
    now: datetime
    passed: list[str] = field(default_factory=list)
    envelope: Envelope | None = None
    keys: list[VerificationKey] = field(default_factory=list)
    report_key: VerificationKey | None = None
    statement: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, bytes] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    tree: TreeHead | None = None

    @property
    def predicate(self) -> dict[str, Any]:
        predicate = self.statement["predicate"]
        assert isinstance(predicate, dict)
        return predicate

    def read(self, name: str, check: str) -> bytes:
        if name not in self.cache:
            try:
                self.cache[name] = self.archive.read(name)
            except ArchiveObjectMissing as exc:
                raise _Failed(check, f"the archive has no {name}: {exc}") from exc
            except ArchiveObjectCorrupted as exc:
                raise _Failed(check, f"the store reports {name} changed after it was written: "
                              f"{exc}") from exc
        return self.cache[name]

    def sha256(self, name: str, check: str) -> str:
        """Hex SHA-256 of an archived object, hashed once however many checks need it."""
        if name not in self.digests:
            self.digests[name] = hashlib.sha256(self.read(name, check)).hexdigest()
        return self.digests[name]

    def ok(self, check: str) -> None:
        self.passed.append(check)


def verify_report(
    envelope: bytes,
    archive: ArchiveReader,
    jwks: Mapping[str, Any],
    now: datetime | None = None,
    *,
    recompute_metrics: MetricsHook | None = None,
) -> VerifyResult:
    """Verify a report envelope offline; the result names the first check that failed.

    Raises ``ArchiveUnavailable`` only when the archive cannot be read at all.
    """
    state = _State(archive, now or datetime.now(UTC))
    steps: list[Callable[[_State], None]] = [
        lambda s: _envelope(s, envelope), lambda s: _jwks(s, jwks), _signature, _payload_type,
        _statement, _key_validity, _subjects, _archive_objects, _log_root, _checkpoint,
    ]
    if recompute_metrics is not None:
        steps.append(lambda s: _metrics(s, recompute_metrics))
    try:
        for step in steps:
            step(state)
    except _Failed as failed:
        return VerifyResult(False, failed.failure, tuple(state.passed), None,
                            _kid(state), state.tree)
    return VerifyResult(True, None, tuple(state.passed), state.statement, _kid(state), state.tree)


def _kid(state: _State) -> str | None:
    return state.report_key.kid if state.report_key else None


# --- the steps, in order ------------------------------------------------------------------------


def _envelope(state: _State, data: bytes) -> None:
    try:
        state.envelope = Envelope.from_json_bytes(data)
    except MalformedEnvelope as exc:
        raise _Failed("envelope", str(exc)) from exc
    state.ok("envelope")


def _jwks(state: _State, jwks: Mapping[str, Any]) -> None:
    try:
        state.keys = verification_keys_from_jwks(jwks)
    except MalformedJWKS as exc:
        raise _Failed("jwks", str(exc)) from exc
    state.ok("jwks")


def _signature(state: _State) -> None:
    assert state.envelope is not None
    report_keys = [k for k in state.keys if k.purpose == "report"]
    try:
        state.report_key = verify_envelope(state.envelope, report_keys)[0]
    except EnvelopeSignatureInvalid as exc:
        raise _Failed("signature", f"{exc}; trusted report keys: "
                      f"{[k.kid for k in report_keys]}") from exc
    state.ok("signature")


def _payload_type(state: _State) -> None:
    assert state.envelope is not None
    if state.envelope.payload_type != PAYLOAD_TYPE_IN_TOTO:
        raise _Failed("payload_type", f"{state.envelope.payload_type!r} is not "
                      f"{PAYLOAD_TYPE_IN_TOTO!r}")
    state.ok("payload_type")


def _statement(state: _State) -> None:
    assert state.envelope is not None
    try:
        statement = json.loads(state.envelope.payload)
    except ValueError as exc:
        raise _Failed("statement", f"the payload is not JSON: {exc}") from exc
    if not isinstance(statement, dict):
        raise _Failed("statement", "the payload is not a JSON object")
    if statement.get("_type") != STATEMENT_TYPE:
        raise _Failed("statement", f"_type {statement.get('_type')!r} is not {STATEMENT_TYPE}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise _Failed("statement", f"predicateType {statement.get('predicateType')!r} is not "
                      f"{PREDICATE_TYPE}")
    if not isinstance(statement.get("predicate"), dict):
        raise _Failed("statement", "the statement has no predicate object")
    if not isinstance(statement.get("subject"), list):
        raise _Failed("statement", "the statement has no subject list")
    state.statement = statement
    state.ok("statement")


def _field(state: _State, check: str, *path: str) -> Any:
    value: Any = state.predicate
    for name in path:
        if not isinstance(value, dict) or name not in value:
            raise _Failed(check, f"the predicate has no {'.'.join(path)}")
        value = value[name]
    return value


def _time_field(state: _State, check: str, *path: str) -> datetime:
    value = _field(state, check, *path)
    try:
        return parse_time(str(value))
    except ValueError as exc:
        raise _Failed(check, f"{'.'.join(path)} is not an RFC 3339 time: {exc}") from exc


def _key_validity(state: _State) -> None:
    assert state.report_key is not None
    signed_at = _time_field(state, "key_validity", "signed_at")
    if signed_at > state.now + CLOCK_SKEW:
        raise _Failed("key_validity", f"signed_at {format_time(signed_at)} is in the future")
    if not state.report_key.covers(signed_at):
        raise _Failed("key_validity", f"report key {state.report_key.kid} was not valid at "
                      f"{format_time(signed_at)} (window {_window(state.report_key)})")
    state.ok("key_validity")


def _window(key: VerificationKey) -> str:
    start = format_time(key.not_before) if key.not_before else "-inf"
    end = format_time(key.not_after) if key.not_after else "+inf"
    return f"[{start}, {end})"


def _subject_digest(
    state: _State, check: str, match: Callable[[str], object]
) -> tuple[str, str]:
    for subject in state.statement["subject"]:
        name = subject.get("name") if isinstance(subject, dict) else None
        if isinstance(name, str) and match(name) is True:
            digest = subject.get("digest")
            if not isinstance(digest, dict) or not isinstance(digest.get("sha256"), str):
                raise _Failed(check, f"subject {name!r} has no sha256 digest")
            return name, digest["sha256"]
    raise _Failed(check, "the statement has no such subject")


def _subjects(state: _State) -> None:
    for name in (PREDICTIONS_SUBJECT, RUN_MANIFEST_SUBJECT):
        check = f"subject:{name}"
        _, expected = _subject_digest(state, check, name.__eq__)
        actual = state.sha256(name, check)
        if actual != expected:
            raise _Failed(check, f"archived {name} has sha256 {actual}, the report says {expected}")
        state.ok(check)
    _image_subject(state)


def _image_subject(state: _State) -> None:
    check = "subject:image"
    name, expected = _subject_digest(state, check, lambda n: n.startswith(IMAGE_SUBJECT_PREFIX))
    try:
        container = json.loads(state.read(CONTAINER, check))
    except ValueError as exc:
        raise _Failed(check, f"{CONTAINER} is not JSON: {exc}") from exc
    if not isinstance(container, dict) or not isinstance(container.get("manifest_digest"), str):
        raise _Failed(check, f"{CONTAINER} has no manifest_digest")
    actual = container["manifest_digest"].removeprefix("sha256:")
    if actual != expected:
        raise _Failed(check, f"{CONTAINER} records manifest sha256:{actual}, the report's subject "
                      f"{name} says sha256:{expected}")
    repository = container.get("repository")
    if repository is not None and IMAGE_SUBJECT_PREFIX + str(repository) != name:
        raise _Failed(check, f"{CONTAINER} records repository {repository!r}; subject is {name}")
    state.ok(check)


def _archive_objects(state: _State) -> None:
    objects = _field(state, "archive", "archive", "objects")
    if not isinstance(objects, dict):
        raise _Failed("archive", "predicate.archive.objects is not an object")
    for name, entry in sorted(objects.items()):
        check = f"archive:{name}"
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise _Failed(check, "the listed object has no sha256")
        size = len(state.read(name, check))
        actual = state.sha256(name, check)
        if actual != entry["sha256"] or size != entry.get("size", size):
            raise _Failed(check, f"archived {name} has sha256 {actual} and {size} bytes, "
                          f"the report lists {entry['sha256']} and {entry.get('size')} bytes")
        state.ok(check)


def _log_root(state: _State) -> None:
    expected_size = _field(state, "tree_size", "prediction_log", "tree_size")
    expected_hash = _field(state, "merkle_root", "prediction_hash")
    try:
        tree = root_of_bytes(state.read(PREDICTIONS_SUBJECT, "tree_size"))
    except LogCorrupted as exc:
        raise _Failed("tree_size", str(exc)) from exc
    state.tree = tree
    if tree.size != expected_size:
        raise _Failed("tree_size", f"{PREDICTIONS_SUBJECT} has {tree.size} records, the report "
                      f"says {expected_size}")
    state.ok("tree_size")
    if tree.prediction_hash != expected_hash:
        raise _Failed("merkle_root", f"the Merkle root of {PREDICTIONS_SUBJECT} is "
                      f"{tree.prediction_hash}, the report's prediction_hash is {expected_hash}")
    state.ok("merkle_root")


def _checkpoint(state: _State) -> None:
    assert state.tree is not None
    note = _field(state, "checkpoint", "prediction_log", "checkpoint")
    origin = _field(state, "checkpoint", "prediction_log", "origin")
    try:
        checkpoint = Checkpoint.parse(parse_note(str(note))[0])
    except MalformedNote as exc:
        raise _Failed("checkpoint", str(exc)) from exc
    if checkpoint.origin != origin:
        raise _Failed("checkpoint", f"origin {checkpoint.origin!r} is not {origin!r}")
    if (checkpoint.size, checkpoint.root) != (state.tree.size, state.tree.root):
        raise _Failed("checkpoint", f"the checkpoint states size {checkpoint.size} and root "
                      f"{checkpoint.prediction_hash}; the log has {state.tree.size} and "
                      f"{state.tree.prediction_hash}")
    state.ok("checkpoint")
    log_key = _checkpoint_signature(state, str(note), checkpoint.origin)
    signed_at = _time_field(state, "checkpoint_key_validity",
                            "prediction_log", "checkpoint_signed_at")
    if not log_key.covers(signed_at):
        raise _Failed("checkpoint_key_validity", f"log key {log_key.kid} was not valid at "
                      f"{format_time(signed_at)} (window {_window(log_key)})")
    state.ok("checkpoint_key_validity")


def _checkpoint_signature(state: _State, note: str, origin: str) -> VerificationKey:
    log_keys = [k for k in state.keys if k.purpose == "log"]
    verifiers = [NoteVerifier(origin, k.public_key) for k in log_keys]
    try:
        opened = open_note(note, verifiers)
    except (MalformedNote, NoteSignatureInvalid) as exc:
        raise _Failed("checkpoint_signature", f"{exc}; trusted log keys: "
                      f"{[k.kid for k in log_keys]}") from exc
    by_id = {v.key_id: k for v, k in zip(verifiers, log_keys, strict=True)}
    state.ok("checkpoint_signature")
    return by_id[opened.verified[0].key_id]


def _metrics(state: _State, hook: MetricsHook) -> None:
    try:
        differences = list(hook(state.predicate, state.archive))
    except EvidenceError as exc:
        raise _Failed("metrics", f"recomputation failed: {exc}") from exc
    if differences:
        raise _Failed("metrics", "; ".join(differences))
    state.ok("metrics")
