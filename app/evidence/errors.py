"""Errors of the evidence library. Each name states the fact that was found to be false."""

from __future__ import annotations


class EvidenceError(Exception):
    """Base class of every error raised by ``app.evidence``."""


class NotCanonicalJSON(EvidenceError, ValueError):
    """A value cannot be serialized as RFC 8785 JSON (NaN, Infinity, a huge int, a bad key)."""


class MerkleProofInvalid(EvidenceError):
    """An inclusion or consistency proof does not verify."""


class LogCorrupted(EvidenceError):
    """A ``predictions.jsonl`` file is not a well-formed log (torn last line, bad sequence)."""


class LogLocked(EvidenceError):
    """Another process holds the log open for appending."""


class MalformedNote(EvidenceError):
    """A signed note or checkpoint does not follow the C2SP format."""


class NoteSignatureInvalid(EvidenceError):
    """No trusted key produced a valid signature on the note, or a known key's signature failed."""


class MalformedEnvelope(EvidenceError):
    """A DSSE envelope is not valid JSON of the expected shape or has invalid base64."""


class EnvelopeSignatureInvalid(EvidenceError):
    """No signature of the envelope verifies with a trusted key."""


class KeyConfigError(EvidenceError):
    """The signing keys are missing, unreadable, of the wrong type or used for both purposes."""


class NoActiveKey(KeyConfigError):
    """No key of the purpose has a validity window covering the requested time."""


class SameKeyForBothPurposes(KeyConfigError):
    """The report key and the log key are the same key; they must be distinct."""


class MalformedJWKS(EvidenceError):
    """A JWKS document (or one of its keys) is not a valid OKP/Ed25519 key set."""


class ArchiveObjectMissing(EvidenceError):
    """The archive has no object of that name."""


class ArchiveObjectCorrupted(EvidenceError):
    """The store's own digest check failed: the bytes changed after they were written."""


class ArchiveUnavailable(EvidenceError):
    """The archive cannot be read at all (store down, credentials refused, permissions)."""
