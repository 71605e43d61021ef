"""DSSE v1: the spec's PAE vector, signing, both base64 alphabets, and refusals."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.evidence.dsse import (
    Envelope,
    EnvelopeSignature,
    b64decode_either,
    pae,
    sign_envelope,
    verify_envelope,
)
from app.evidence.errors import EnvelopeSignatureInvalid, MalformedEnvelope
from app.evidence.keys import SigningKey, VerificationKey


def _key(seed: int, purpose: str = "report") -> SigningKey:
    return SigningKey(purpose, Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32))  # type: ignore[arg-type]


def test_pae_spec_vector() -> None:
    # secure-systems-lab/dsse protocol.md, "Test Vectors".
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")


def test_pae_uses_byte_lengths() -> None:
    assert pae("t\u00e9", "\u00e9".encode()) == "DSSEv1 3 t\u00e9 2 \u00e9".encode()
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_sign_and_verify_round_trip() -> None:
    key = _key(1)
    envelope = sign_envelope("application/vnd.in-toto+json", b'{"a":1}', [key])
    document = json.loads(envelope.to_json_bytes())
    assert document == {"payload": "eyJhIjoxfQ==", "payloadType": "application/vnd.in-toto+json",
                        "signatures": [{"keyid": key.kid, "sig": document["signatures"][0]["sig"]}]}
    parsed = Envelope.from_json_bytes(envelope.to_json_bytes())
    assert parsed == envelope
    assert verify_envelope(parsed, [key.verification]) == [key.verification]
    key.verification.public_key.verify(envelope.signatures[0].sig,
                                       pae(envelope.payload_type, envelope.payload))


def test_url_safe_input_is_accepted() -> None:
    key = _key(2)
    payload = bytes(range(250, 256)) * 3  # encodes with "+" and "/" in standard base64
    envelope = sign_envelope("x", payload, [key])
    document = envelope.to_dict()
    assert "+" in document["payload"] or "/" in document["payload"]
    document["payload"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    document["signatures"][0]["sig"] = base64.urlsafe_b64encode(envelope.signatures[0].sig).decode()
    assert verify_envelope(Envelope.from_dict(document), [key.verification])


@pytest.mark.parametrize("text", ["a+_8", "aGl=", "a", "aGk===", "aG!k"])
def test_mixed_invalid_or_non_canonical_base64_is_refused(text: str) -> None:
    with pytest.raises(MalformedEnvelope):
        b64decode_either(text)


def test_tampering_fails() -> None:
    key = _key(3)
    envelope = sign_envelope("t", b"body", [key])
    sig = envelope.signatures[0]
    flipped = bytes([sig.sig[0] ^ 1]) + sig.sig[1:]
    for altered in (
        Envelope("t", b"Body", envelope.signatures),
        Envelope("u", b"body", envelope.signatures),
        Envelope("t", b"body", (EnvelopeSignature(sig.keyid, flipped),)),
    ):
        with pytest.raises(EnvelopeSignatureInvalid):
            verify_envelope(altered, [key.verification])
    for moved in (EnvelopeSignature(None, sig.sig), EnvelopeSignature(_key(4).kid, sig.sig)):
        with pytest.raises(EnvelopeSignatureInvalid, match="0 of 1"):
            verify_envelope(Envelope("t", b"body", (moved,)), [key.verification])


def test_unknown_signers_are_ignored_and_threshold_counts_distinct_keys() -> None:
    a, b, stranger = _key(5), _key(6), _key(7)
    envelope = sign_envelope("t", b"body", [stranger, a, b, a])
    trusted: list[VerificationKey] = [a.verification, b.verification]
    assert len(verify_envelope(envelope, trusted, threshold=2)) == 2
    with pytest.raises(EnvelopeSignatureInvalid):
        verify_envelope(envelope, trusted, threshold=3)


@pytest.mark.parametrize("document", [
    b"not json", b"[]", b'{"payload":"","payloadType":"t"}',
    b'{"payload":1,"payloadType":"t","signatures":[]}',
    b'{"payload":"","payloadType":"t","signatures":[{"keyid":"k"}]}',
    b'{"payload":"","payloadType":"t","signatures":[{"keyid":1,"sig":""}]}',
])
def test_malformed_envelopes(document: bytes) -> None:
    with pytest.raises(MalformedEnvelope):
        Envelope.from_json_bytes(document)
