"""C2SP signed notes (c2sp.org/signed-note) and log checkpoints (c2sp.org/tlog-checkpoint).

A checkpoint is the note text::

    <origin>\\n<tree size>\\n<base64 RFC 6962 root>\\n[extension lines\\n]

followed by a blank line and one signature line per key::

    \u2014 <key name> <base64(4-byte big-endian key ID || 64-byte Ed25519 signature)>\\n

For Ed25519 (signature type 0x01) the key ID is ``SHA-256(name || 0x0A || 0x01 || pubkey)[:4]``.
The log signs with key name = origin (tlog-checkpoint: "The log's key name in its signature line
SHOULD match the origin line"); the origin is ``<Settings.log_origin>/<run_id>``, so every run's
checkpoint names its own log. Verifiers ignore signatures from unknown keys, reject the note if a
known key's signature fails, and require at least one verified signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from app.evidence.errors import MalformedNote, NoteSignatureInvalid
from app.evidence.keys import Signer, raw_public_key
from app.evidence.merkle import HASH_SIZE

EM_DASH = "\u2014"
SIG_TYPE_ED25519 = 0x01
MAX_SIGNATURES = 100  # the spec requires accepting at least 16
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")
_SIZE = re.compile(r"0|[1-9][0-9]*")


def check_key_name(name: str) -> None:
    """Key names are non-empty and contain neither Unicode spaces nor ``+``."""
    if not name or "+" in name or any(ch.isspace() for ch in name):
        raise MalformedNote(f"invalid key name {name!r}")


def note_key_id(name: str, public_key: Ed25519PublicKey | bytes) -> int:
    """Ed25519 key ID: the first 4 bytes (big-endian) of SHA-256(name || 0x0A || 0x01 || pubkey)."""
    raw = public_key if isinstance(public_key, bytes) else raw_public_key(public_key)
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([SIG_TYPE_ED25519]) + raw).digest()
    return int.from_bytes(digest[:4], "big")


def _b64decode_canonical(text: str) -> bytes:
    """Standard base64 with padding, canonical only (so no two encodings of one signature)."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedNote(f"invalid base64 {text!r}") from exc
    if base64.b64encode(data).decode() != text:
        raise MalformedNote(f"non-canonical base64 {text!r}")
    return data


@dataclass(frozen=True)
class NoteVerifier:
    """A trusted (key name, Ed25519 public key) pair."""

    name: str
    public_key: Ed25519PublicKey
    key_id: int = field(init=False)

    def __post_init__(self) -> None:
        check_key_name(self.name)
        object.__setattr__(self, "key_id", note_key_id(self.name, self.public_key))

    @property
    def vkey(self) -> str:
        """The verifier key string ``<name>+<hex key ID>+<base64(0x01 || pubkey)>``."""
        material = base64.b64encode(bytes([SIG_TYPE_ED25519]) + raw_public_key(self.public_key))
        return f"{self.name}+{self.key_id:08x}+{material.decode()}"

    @classmethod
    def from_vkey(cls, vkey: str) -> NoteVerifier:
        """Parse a verifier key string; its key ID must match the name and key."""
        parts = vkey.split("+")
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{8}", parts[1]):
            raise MalformedNote(f"malformed verifier key {vkey!r}")
        material = _b64decode_canonical(parts[2])
        if len(material) != 33 or material[0] != SIG_TYPE_ED25519:
            raise MalformedNote("only 32-byte Ed25519 verifier keys (type 0x01) are supported")
        verifier = cls(parts[0], Ed25519PublicKey.from_public_bytes(material[1:]))
        if verifier.key_id != int(parts[1], 16):
            raise MalformedNote(f"verifier key {vkey!r} has the wrong key ID")
        return verifier

    def verify(self, text: bytes, signature: bytes) -> bool:
        try:
            self.public_key.verify(signature, text)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class NoteSigner:
    """Signs notes under ``name`` with any ``Signer`` (an Ed25519 key file, a KMS...)."""

    name: str
    signer: Signer

    def __post_init__(self) -> None:
        check_key_name(self.name)

    @property
    def key_id(self) -> int:
        return note_key_id(self.name, self.signer.public_key)

    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.name, self.signer.public_key)

    def signature_line(self, text: str) -> str:
        signature = self.signer.sign(text.encode())
        blob = self.key_id.to_bytes(4, "big") + signature
        return f"{EM_DASH} {self.name} {base64.b64encode(blob).decode()}\n"


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_id: int
    signature: bytes  # without the 4-byte key ID


@dataclass(frozen=True)
class OpenedNote:
    """A note whose signatures were checked: ``text`` may be trusted, ``verified`` names who."""

    text: str
    verified: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...]


def _check_text(text: str) -> None:
    if not text.endswith("\n") or text == "\n":
        raise MalformedNote("note text must be non-empty and end with a newline")
    if _CONTROL.search(text):
        raise MalformedNote("note text contains control characters")


def sign_note(text: str, signers: Sequence[NoteSigner]) -> str:
    """Return ``text``, a blank line and one signature line per signer."""
    _check_text(text)
    if not signers:
        raise ValueError("a signed note needs at least one signer")
    return text + "\n" + "".join(s.signature_line(text) for s in signers)


def parse_note(note: str | bytes) -> tuple[str, list[NoteSignature]]:
    """Split a signed note into its text and signatures without verifying anything."""
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedNote("a signed note must be UTF-8") from exc
    if _CONTROL.search(note) or not note.endswith("\n"):
        raise MalformedNote("a signed note ends with a newline and has no control characters")
    split = note.rfind("\n\n")
    if split < 0:
        raise MalformedNote("a signed note has a blank line before its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    _check_text(text)
    lines = block.splitlines()
    if not lines or len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"a signed note has 1 to {MAX_SIGNATURES} signature lines")
    return text, [_parse_signature_line(line) for line in lines]


def _parse_signature_line(line: str) -> NoteSignature:
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != EM_DASH:
        raise MalformedNote(f"malformed signature line {line!r}")
    check_key_name(parts[1])
    blob = _b64decode_canonical(parts[2])
    if len(blob) < 5:
        raise MalformedNote(f"signature of {parts[1]} is too short")
    return NoteSignature(parts[1], int.from_bytes(blob[:4], "big"), blob[4:])


def open_note(note: str | bytes, verifiers: Sequence[NoteVerifier]) -> OpenedNote:
    """Verify a note: ``NoteSignatureInvalid`` unless a trusted key signed it and none failed."""
    text, signatures = parse_note(note)
    trusted = {(v.name, v.key_id): v for v in verifiers}
    verified: list[NoteSignature] = []
    unverified: list[NoteSignature] = []
    for sig in signatures:
        verifier = trusted.get((sig.name, sig.key_id))
        if verifier is None:
            unverified.append(sig)  # unknown keys MUST be ignored
        elif not verifier.verify(text.encode(), sig.signature):
            raise NoteSignatureInvalid(f"invalid signature for key {sig.name}+{sig.key_id:08x}")
        elif sig not in verified:
            verified.append(sig)
    if not verified:
        raise NoteSignatureInvalid("the note has no signature from a trusted key")
    return OpenedNote(text, tuple(verified), tuple(unverified))


# --- checkpoints --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """The signed tree head of one run's prediction log."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_key_name(self.origin)  # origin doubles as the log's key name
        if self.size < 0 or len(self.root) != HASH_SIZE:
            raise ValueError("a checkpoint has a size >= 0 and a 32-byte root")
        if any(not line or "\n" in line for line in self.extensions):
            raise ValueError("extension lines are non-empty single lines")

    @property
    def prediction_hash(self) -> str:
        return "sha256:" + self.root.hex()

    def text(self) -> str:
        """The note text that is signed."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode()]
        return "\n".join([*lines, *self.extensions]) + "\n"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Parse checkpoint note text (not a signed note; see ``open_checkpoint``)."""
        _check_text(text)
        lines = text[:-1].split("\n")
        if len(lines) < 3 or not all(lines):
            raise MalformedNote("a checkpoint has at least three non-empty lines")
        origin, size, root = lines[:3]
        if not _SIZE.fullmatch(size):
            raise MalformedNote(f"tree size {size!r} is not a decimal without leading zeros")
        root_bytes = _b64decode_canonical(root)
        if len(root_bytes) != HASH_SIZE:
            raise MalformedNote("the root hash is not 32 bytes")
        try:
            return cls(origin, int(size), root_bytes, tuple(lines[3:]))
        except ValueError as exc:
            raise MalformedNote(str(exc)) from exc


def sign_checkpoint(checkpoint: Checkpoint, signer: Signer) -> str:
    """Sign with key name = origin; returns the full signed note text (what is archived)."""
    return sign_note(checkpoint.text(), [NoteSigner(checkpoint.origin, signer)])


def open_checkpoint(
    note: str | bytes, public_keys: Sequence[Ed25519PublicKey], *, origin: str | None = None
) -> tuple[Checkpoint, OpenedNote]:
    """Verify a checkpoint signed under its own origin by one of ``public_keys``.

    With ``origin`` given, a checkpoint of any other log is refused before its signature is
    checked. Raises ``MalformedNote`` or ``NoteSignatureInvalid``.
    """
    text, _ = parse_note(note)
    checkpoint = Checkpoint.parse(text)
    if origin is not None and checkpoint.origin != origin:
        raise MalformedNote(f"checkpoint origin {checkpoint.origin!r} is not {origin!r}")
    verifiers = [NoteVerifier(checkpoint.origin, key) for key in public_keys]
    return checkpoint, open_note(note, verifiers)
