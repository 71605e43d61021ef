"""Ed25519 signing keys: PEM loading, generation, RFC 7638 thumbprints, the key ring and its JWKS.

Two purposes, two keys: the **report** key signs DSSE envelopes of BenchmarkReports, the **log**
key signs the C2SP checkpoints of prediction logs. One key for both would let a signature made in
one protocol be replayed in the other, so the ring refuses it (``SameKeyForBothPurposes``).

Keys are identified by content: ``kid`` is the RFC 7638 JWK thumbprint (SHA-256 over
``{"crv":"Ed25519","kty":"OKP","x":"<b64url>"}``, base64url without padding), and the same value is
the DSSE ``keyid``. Each key has a validity window ``[not_before, not_after)``; ``None`` is an
open bound. The active key of a purpose is the one whose window covers "now" (the latest
``not_before`` wins); retired keys stay listed in the JWKS forever so old reports stay verifiable.

Key directory layout (``Settings.keys_dir``)::

    report-2026-01-01.pem        PKCS#8 private key, valid from 2026-01-01T00:00:00Z
    report-2025-06-01.pub.pem    a retired key whose private part was destroyed (public only)
    log-20260101.pem             (the date may also be written without dashes)

A key's window ends where the next key of the same purpose begins. Other files (for example
``report-dev.pem`` named by an explicit ``*_KEY_PATH``) are not part of the dated chain.

JWKS members (RFC 7517 allows extra members; ours carry the ``future_ts:`` prefix)::

    {"kty":"OKP","crv":"Ed25519","x":..., "kid":<RFC 7638 thumbprint>, "use":"sig", "alg":"EdDSA",
     "key_ops":["verify"],
     "future_ts:purpose":"report"|"log",
     "future_ts:not_before":<RFC 3339 UTC or null>, "future_ts:not_after":<RFC 3339 UTC or null>}

(RFC 7517 says ``use`` and ``key_ops`` SHOULD NOT both appear; when they do they MUST agree, and
``sig``/``["verify"]`` agree. Both are emitted because consumers differ in which one they read.)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from app.evidence.errors import (
    KeyConfigError,
    MalformedJWKS,
    NoActiveKey,
    SameKeyForBothPurposes,
)
from app.warnings import DevOnlyWarning

if TYPE_CHECKING:
    from app.settings import Settings

Purpose = Literal["report", "log"]
PURPOSES: tuple[Purpose, ...] = ("report", "log")
JWK_PURPOSE = "future_ts:purpose"
JWK_NOT_BEFORE = "future_ts:not_before"
JWK_NOT_AFTER = "future_ts:not_after"
_KEY_FILE = re.compile(r"^(report|log)-(\d{4})-?(\d{2})-?(\d{2})(\.pub)?\.pem$")


# --- encodings ----------------------------------------------------------------------------------


def b64url_encode(data: bytes) -> str:
    """base64url without padding (RFC 7515 section 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url without padding: refuses other alphabets and non-canonical encodings."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url_encode(data) != text:
        raise ValueError("non-canonical base64url")
    return data


def format_time(when: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` suffix, the one time format of evidence documents."""
    if when.tzinfo is None:
        raise ValueError("evidence times must be timezone-aware")
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 time with an explicit offset; naive times are refused."""
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"time {text!r} has no UTC offset")
    return parsed


# --- keys ---------------------------------------------------------------------------------------


def raw_public_key(public_key: Ed25519PublicKey) -> bytes:
    """The 32-byte RFC 8032 encoding of an Ed25519 public key."""
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def jwk_thumbprint(public_key: Ed25519PublicKey | bytes) -> str:
    """RFC 7638 thumbprint of an OKP/Ed25519 key (RFC 8037 section 2): ``kid`` and DSSE keyid."""
    raw = public_key if isinstance(public_key, bytes) else raw_public_key(public_key)
    if len(raw) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    # Required members only, lexicographic order, no whitespace (RFC 7638 section 3.2).
    members = json.dumps(
        {"crv": "Ed25519", "kty": "OKP", "x": b64url_encode(raw)},
        separators=(",", ":"), sort_keys=True,
    )
    return b64url_encode(hashlib.sha256(members.encode("ascii")).digest())


def load_private_key_pem(pem: bytes | str, password: bytes | None = None) -> Ed25519PrivateKey:
    """Load an Ed25519 private key from PEM (PKCS#8 ``BEGIN PRIVATE KEY``)."""
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except (ValueError, TypeError) as exc:
        raise KeyConfigError(f"cannot load the private key PEM: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyConfigError(f"expected an Ed25519 private key, got {type(key).__name__}")
    return key


def load_public_key_pem(pem: bytes | str) -> Ed25519PublicKey:
    """Load an Ed25519 public key from PEM (SPKI ``BEGIN PUBLIC KEY``)."""
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyConfigError(f"cannot load the public key PEM: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise KeyConfigError(f"expected an Ed25519 public key, got {type(key).__name__}")
    return key


def load_private_key_file(path: Path, password: bytes | None = None) -> Ed25519PrivateKey:
    try:
        return load_private_key_pem(path.read_bytes(), password)
    except OSError as exc:
        raise KeyConfigError(f"cannot read key file {path}: {exc}") from exc


def generate_keypair(path: Path) -> Ed25519PrivateKey:
    """Generate an Ed25519 key and write it to ``path`` as unencrypted PKCS#8 PEM, mode 0600.

    Refuses to overwrite an existing file (``O_EXCL``): a signing key is never replaced silently.
    The file is created with mode 0600 at ``open`` time, so it is never readable by others, not
    even between creation and a later ``chmod``.
    """
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise KeyConfigError(f"refusing to overwrite the existing key file {path}") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
        handle.flush()
        os.fsync(handle.fileno())
    return key


def public_key_pem(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


class Signer(Protocol):
    """What signs evidence: an Ed25519 key file today, a KMS/HSM tomorrow."""

    @property
    def kid(self) -> str: ...

    @property
    def public_key(self) -> Ed25519PublicKey: ...

    def sign(self, data: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``data`` (the exact bytes, no prehash)."""
        ...


def _covers(not_before: datetime | None, not_after: datetime | None, when: datetime) -> bool:
    if when.tzinfo is None:
        raise ValueError("validity checks need a timezone-aware time")
    return (not_before is None or not_before <= when) and (not_after is None or when < not_after)


@dataclass(frozen=True)
class VerificationKey:
    """A public key with its purpose and validity window, as published in the JWKS."""

    purpose: Purpose
    public_key: Ed25519PublicKey
    not_before: datetime | None = None
    not_after: datetime | None = None
    kid: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kid", jwk_thumbprint(self.public_key))

    @property
    def raw(self) -> bytes:
        return raw_public_key(self.public_key)

    def covers(self, when: datetime) -> bool:
        """Whether ``when`` lies in ``[not_before, not_after)``."""
        return _covers(self.not_before, self.not_after, when)

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            self.public_key.verify(signature, data)
        except InvalidSignature:
            return False
        return True

    def to_jwk(self) -> dict[str, Any]:
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64url_encode(self.raw),
            "kid": self.kid,
            "use": "sig",
            "alg": "EdDSA",
            "key_ops": ["verify"],
            JWK_PURPOSE: self.purpose,
            JWK_NOT_BEFORE: format_time(self.not_before) if self.not_before else None,
            JWK_NOT_AFTER: format_time(self.not_after) if self.not_after else None,
        }

    @classmethod
    def from_jwk(cls, jwk: Mapping[str, Any]) -> VerificationKey:
        """Parse one JWKS entry; the ``kid`` must equal the key's RFC 7638 thumbprint."""
        try:
            if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
                raise ValueError("not an OKP/Ed25519 key")
            raw = b64url_decode(str(jwk["x"]))
            public_key = Ed25519PublicKey.from_public_bytes(raw)
            purpose = jwk.get(JWK_PURPOSE)
            if purpose not in PURPOSES:
                raise ValueError(f"{JWK_PURPOSE} must be one of {PURPOSES}")
            windows = [jwk.get(JWK_NOT_BEFORE), jwk.get(JWK_NOT_AFTER)]
            not_before, not_after = (parse_time(str(w)) if w else None for w in windows)
        except (KeyError, ValueError) as exc:
            raise MalformedJWKS(f"key {jwk.get('kid')!r}: {exc}") from exc
        key = cls(purpose, public_key, not_before, not_after)
        if jwk.get("kid") != key.kid:
            raise MalformedJWKS(f"kid {jwk.get('kid')!r} is not the key's thumbprint {key.kid}")
        return key


@dataclass(frozen=True)
class SigningKey:
    """A private key with its purpose and validity window. Implements ``Signer``."""

    purpose: Purpose
    private_key: Ed25519PrivateKey
    not_before: datetime | None = None
    not_after: datetime | None = None
    verification: VerificationKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        public = self.private_key.public_key()
        verification = VerificationKey(self.purpose, public, self.not_before, self.not_after)
        object.__setattr__(self, "verification", verification)

    @property
    def kid(self) -> str:
        return self.verification.kid

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.verification.public_key

    def covers(self, when: datetime) -> bool:
        return self.verification.covers(when)

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)


# --- the ring -----------------------------------------------------------------------------------


class KeyRing:
    """Signing keys (with private parts) and retired public keys, for both purposes."""

    def __init__(
        self, signing: Iterable[SigningKey] = (), retired: Iterable[VerificationKey] = ()
    ) -> None:
        self._signing = list(signing)
        published = [k.verification for k in self._signing] + list(retired)
        _refuse_shared_keys(published)
        self._published = sorted(published, key=_window_order)

    def signer(self, purpose: Purpose, at: datetime | None = None) -> SigningKey:
        """The active signing key of ``purpose`` at ``at`` (default now): latest ``not_before``."""
        when = at or datetime.now(UTC)
        candidates = [k for k in self._signing if k.purpose == purpose and k.covers(when)]
        if not candidates:
            raise NoActiveKey(f"no {purpose} signing key is valid at {format_time(when)}")
        return max(candidates, key=lambda k: k.not_before or datetime.min.replace(tzinfo=UTC))

    def signing_keys(self, purpose: Purpose | None = None) -> list[SigningKey]:
        return [k for k in self._signing if purpose is None or k.purpose == purpose]

    def verification_keys(self, purpose: Purpose | None = None) -> list[VerificationKey]:
        return [k for k in self._published if purpose is None or k.purpose == purpose]

    def jwks(self) -> dict[str, Any]:
        """The JWKS served at ``GET /v1/keys``: every key ever used, retired ones included."""
        return {"keys": [k.to_jwk() for k in self._published]}

    @classmethod
    def from_directory(cls, keys_dir: Path) -> KeyRing:
        """Load ``<purpose>-<YYYY-MM-DD>[.pub].pem`` files; windows chain by date per purpose."""
        signing: list[SigningKey] = []
        retired: list[VerificationKey] = []
        for purpose in PURPOSES:
            files = sorted(_key_files(keys_dir, purpose))
            for i, (start, path, public_only) in enumerate(files):
                end = files[i + 1][0] if i + 1 < len(files) else None
                if public_only:
                    public = load_public_key_pem(path.read_bytes())
                    retired.append(VerificationKey(purpose, public, start, end))
                else:
                    private = load_private_key_file(path)
                    signing.append(SigningKey(purpose, private, start, end))
        return cls(signing, retired)


def _window_order(key: VerificationKey) -> tuple[str, datetime]:
    return key.purpose, key.not_before or datetime.min.replace(tzinfo=UTC)


def _refuse_shared_keys(keys: Sequence[VerificationKey]) -> None:
    seen: dict[bytes, Purpose] = {}
    for key in keys:
        other = seen.setdefault(key.raw, key.purpose)
        if other != key.purpose:
            raise SameKeyForBothPurposes(
                f"key {key.kid} is configured as both the report key and the log key"
            )


def _key_files(keys_dir: Path, purpose: Purpose) -> list[tuple[datetime, Path, bool]]:
    found: list[tuple[datetime, Path, bool]] = []
    if not keys_dir.is_dir():
        return found
    for path in keys_dir.iterdir():
        match = _KEY_FILE.match(path.name)
        if match and match.group(1) == purpose:
            day = date(int(match.group(2)), int(match.group(3)), int(match.group(4)))
            start = datetime.combine(day, datetime.min.time(), UTC)
            found.append((start, path, match.group(5) is not None))
    starts = [start for start, _, _ in found]
    if len(set(starts)) != len(starts):
        raise KeyConfigError(f"two {purpose} keys in {keys_dir} start on the same date")
    return found


def verification_keys_from_jwks(jwks: Mapping[str, Any]) -> list[VerificationKey]:
    """Parse a JWKS document into verification keys (``MalformedJWKS`` on any bad entry)."""
    entries = jwks.get("keys")
    if not isinstance(entries, list):
        raise MalformedJWKS('a JWKS is an object with a "keys" array')
    keys = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise MalformedJWKS("each JWKS entry must be an object")
        keys.append(VerificationKey.from_jwk(entry))
    try:
        _refuse_shared_keys(keys)
    except SameKeyForBothPurposes as exc:
        raise MalformedJWKS(str(exc)) from exc
    return keys


# --- configuration ------------------------------------------------------------------------------


def load_keyring(settings: Settings, *, now: datetime | None = None) -> KeyRing:
    """Build the ring from settings: explicit PEM/path per purpose, else the keys directory.

    An explicit key (``FUTURE_TS_<PURPOSE>_KEY_PEM`` or ``..._KEY_PATH``) has an open window and
    is listed together with the directory's retired ``<purpose>-*.pub.pem`` keys. Without an
    explicit key, the directory's keys are used. When a purpose has no usable key at all, a dev or
    test environment generates ``<purpose>-<today>.pem`` with a ``DevOnlyWarning``; production
    refuses to start (``KeyConfigError``): keys are never generated silently in production.
    """
    when = now or datetime.now(UTC)
    ring = KeyRing.from_directory(settings.keys_dir)
    signing: list[SigningKey] = []
    retired: list[VerificationKey] = []
    for purpose in PURPOSES:
        explicit = _explicit_key(settings, purpose)
        if explicit is not None:
            signing.append(SigningKey(purpose, explicit))
            retired.extend(_public_only(ring, purpose))
            continue
        if not any(k.covers(when) for k in ring.signing_keys(purpose)):
            _generate_dev_key(settings, purpose, when)
            ring = KeyRing.from_directory(settings.keys_dir)
        signing.extend(ring.signing_keys(purpose))
        retired.extend(_public_only(ring, purpose))
    return KeyRing(signing, retired)


def _public_only(ring: KeyRing, purpose: Purpose) -> list[VerificationKey]:
    private = {k.kid for k in ring.signing_keys()}
    return [k for k in ring.verification_keys(purpose) if k.kid not in private]


def _explicit_key(settings: Settings, purpose: Purpose) -> Ed25519PrivateKey | None:
    pem = settings.report_key_pem if purpose == "report" else settings.log_key_pem
    path = settings.report_key_path if purpose == "report" else settings.log_key_path
    if pem is not None and pem.get_secret_value():
        return load_private_key_pem(pem.get_secret_value())
    if path is not None:
        return load_private_key_file(path)
    return None


def _generate_dev_key(settings: Settings, purpose: Purpose, when: datetime) -> None:
    if settings.environment == "production":
        raise KeyConfigError(
            f"no {purpose} signing key is configured; run `future-ts keys generate` or set "
            f"FUTURE_TS_{purpose.upper()}_KEY_PATH"
        )
    path = settings.keys_dir / f"{purpose}-{when.astimezone(UTC).date().isoformat()}.pem"
    warnings.warn(
        f"generated a dev {purpose} signing key at {path}; production needs configured keys",
        DevOnlyWarning,
        stacklevel=3,
    )
    generate_keypair(path)
