"""DSSE v1 envelopes (secure-systems-lab/dsse protocol.md and envelope.md, v1.0.2).

The signature covers the pre-authentication encoding, never the bare payload::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

with ``LEN`` the ASCII decimal *byte* length (no leading zeros) and ``SP`` one 0x20 byte.
Envelopes are emitted with standard base64; on input both the standard and the URL-safe
alphabet are accepted, as the spec requires of verifiers, but one string may not mix them and
the encoding must be canonical, so a stored envelope has exactly one decoding.

``keyid`` is the RFC 7638 thumbprint of the signing key. The spec calls it an unauthenticated
hint; here it only selects which trusted key to try, and this profile requires it: a signature
without a keyid, or with the keyid of no trusted key, is ignored (so changing a keyid makes an
envelope fail instead of being silently re-routed to another key).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.evidence.errors import EnvelopeSignatureInvalid, MalformedEnvelope
from app.evidence.jcs import canonical_bytes
from app.evidence.keys import Signer, VerificationKey

PAYLOAD_TYPE_IN_TOTO = "application/vnd.in-toto+json"
_STD = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding of ``payload_type`` and ``payload``."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def b64decode_either(text: str) -> bytes:
    """Decode standard or URL-safe base64 (padding optional); refuse mixed or non-canonical."""
    body = text.rstrip("=")
    if _STD.fullmatch(text):
        alphabet_std = True
    elif _URL.fullmatch(text):
        alphabet_std = False
    else:
        raise MalformedEnvelope("not base64 (standard or URL-safe)")
    if len(body) % 4 == 1 or (text != body and len(text) % 4 != 0):
        raise MalformedEnvelope("base64 of impossible length or bad padding")
    padded = body + "=" * (-len(body) % 4)
    try:
        data = base64.b64decode(padded) if alphabet_std else base64.urlsafe_b64decode(padded)
    except (binascii.Error, ValueError) as exc:
        raise MalformedEnvelope(f"invalid base64: {exc}") from exc
    encoder = base64.b64encode if alphabet_std else base64.urlsafe_b64encode
    if encoder(data).decode().rstrip("=") != body:
        raise MalformedEnvelope("non-canonical base64")
    return data


@dataclass(frozen=True)
class EnvelopeSignature:
    keyid: str | None
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[EnvelopeSignature, ...]

    def to_dict(self) -> dict[str, Any]:
        signatures: list[dict[str, str]] = []
        for s in self.signatures:
            entry = {"sig": base64.b64encode(s.sig).decode()}
            if s.keyid is not None:
                entry["keyid"] = s.keyid
            signatures.append(entry)
        return {
            "payload": base64.b64encode(self.payload).decode(),
            "payloadType": self.payload_type,
            "signatures": signatures,
        }

    def to_json_bytes(self) -> bytes:
        """The envelope as canonical (RFC 8785) JSON: what is archived and served."""
        return canonical_bytes(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Envelope:
        payload, payload_type, signatures = (
            obj.get("payload"), obj.get("payloadType"), obj.get("signatures"))
        if not isinstance(payload, str) or not isinstance(payload_type, str):
            raise MalformedEnvelope('"payload" and "payloadType" must be strings')
        if not isinstance(signatures, list):
            raise MalformedEnvelope('"signatures" must be an array')
        parsed = []
        for entry in signatures:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("sig"), str):
                raise MalformedEnvelope('each signature is an object with a string "sig"')
            keyid = entry.get("keyid")
            if keyid is not None and not isinstance(keyid, str):
                raise MalformedEnvelope('"keyid" must be a string')
            parsed.append(EnvelopeSignature(keyid, b64decode_either(entry["sig"])))
        return cls(payload_type, b64decode_either(payload), tuple(parsed))

    @classmethod
    def from_json_bytes(cls, data: bytes) -> Envelope:
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise MalformedEnvelope(f"the envelope is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise MalformedEnvelope("the envelope is not a JSON object")
        return cls.from_dict(obj)


def sign_envelope(payload_type: str, payload: bytes, signers: Sequence[Signer]) -> Envelope:
    """Sign ``PAE(payload_type, payload)`` with each signer; ``keyid`` = its RFC 7638 thumbprint."""
    if not signers:
        raise ValueError("an envelope needs at least one signer")
    message = pae(payload_type, payload)
    signatures = tuple(EnvelopeSignature(s.kid, s.sign(message)) for s in signers)
    return Envelope(payload_type, payload, signatures)


def verify_envelope(
    envelope: Envelope, keys: Sequence[VerificationKey], *, threshold: int = 1
) -> list[VerificationKey]:
    """Return the distinct trusted keys whose signatures verify; at least ``threshold`` of them.

    A signature under a trusted keyid that fails is an error, not something to skip: the
    envelope was altered or signed with a key other than the one it names.
    """
    by_kid = {k.kid: k for k in keys}
    message = pae(envelope.payload_type, envelope.payload)
    verified: dict[str, VerificationKey] = {}
    for signature in envelope.signatures:
        key = by_kid.get(signature.keyid) if signature.keyid is not None else None
        if key is None:
            continue
        if not key.verify(signature.sig, message):
            raise EnvelopeSignatureInvalid(f"the signature of key {key.kid} does not verify")
        verified[key.kid] = key
    if len(verified) < threshold:
        named = [s.keyid for s in envelope.signatures]
        raise EnvelopeSignatureInvalid(
            f"{len(verified)} of {threshold} required signatures from trusted keys "
            f"(envelope keyids: {named})"
        )
    return list(verified.values())
