"""C2SP signed notes and checkpoints against the published vectors.

Sources:
- c2sp.org/signed-note (C2SP/C2SP signed-note.md, "Verifier keys" example, as of commit d4c16da):
  vkey ``example.com/foo+530d903a+...`` and its signed note ``This is an example message.``;
- golang.org/x/mod ``sumdb/note/note_test.go`` (TestSign, TestOpen, TestNewVerifier): the
  PeterNeumann signer key, the exact signed output, the EnochRoot signature and the malformed notes;
- c2sp.org/tlog-checkpoint (C2SP/C2SP tlog-checkpoint.md): the example checkpoint text.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.evidence.checkpoint import (
    EM_DASH,
    Checkpoint,
    NoteSigner,
    NoteVerifier,
    open_checkpoint,
    open_note,
    parse_note,
    sign_checkpoint,
    sign_note,
)
from app.evidence.errors import MalformedNote, NoteSignatureInvalid
from app.evidence.keys import SigningKey

C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n"
    f"{EM_DASH} example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsY"
    "jOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = ("If you think cryptography is the answer to your problem,\n"
           "then you don't know what your problem is.\n")
PETER_SIG = (f"{EM_DASH} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZ"
             "SNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n")
ENOCH_SIG = (f"{EM_DASH} EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5o"
             "vTG01oOTGwnWLox33WWd1RvMc+QQ=\n")


def _peter_signer() -> NoteSigner:
    seed = base64.b64decode(GO_SKEY.split("+", 4)[4])  # PRIVATE+KEY+<name>+<id>+<key>
    assert seed[0] == 0x01  # Ed25519 algorithm byte, then the 32-byte seed
    key = SigningKey("log", Ed25519PrivateKey.from_private_bytes(seed[1:]))
    return NoteSigner("PeterNeumann", key)


def test_c2sp_example_vector() -> None:
    verifier = NoteVerifier.from_vkey(C2SP_VKEY)
    assert verifier.key_id == 0x530D903A and verifier.vkey == C2SP_VKEY
    opened = open_note(C2SP_NOTE, [verifier])
    assert opened.text == "This is an example message.\n"
    assert [s.name for s in opened.verified] == ["example.com/foo"]


def test_go_sumdb_note_sign_vector() -> None:
    signer = _peter_signer()
    assert signer.key_id == 0xC74F20A3 and signer.verifier().vkey == PETER_VKEY
    assert sign_note(GO_TEXT, [signer]) == GO_TEXT + "\n" + PETER_SIG  # Ed25519 is deterministic


def test_go_sumdb_note_open_vectors() -> None:
    peter, enoch = NoteVerifier.from_vkey(PETER_VKEY), NoteVerifier.from_vkey(ENOCH_VKEY)
    note = GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG
    one = open_note(note, [peter])
    assert [s.name for s in one.verified] == ["PeterNeumann"]
    assert [(s.name, s.key_id) for s in one.unverified] == [("EnochRoot", 0xAF0CFE78)]
    both = open_note(note, [peter, enoch])
    assert [s.name for s in both.verified] == ["PeterNeumann", "EnochRoot"] and not both.unverified
    with pytest.raises(NoteSignatureInvalid, match="no signature from a trusted key"):
        open_note(note, [])
    bad = GO_TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(NoteSignatureInvalid, match="PeterNeumann"):
        open_note(bad, [peter])
    dup = open_note(GO_TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG, [peter])
    assert len(dup.verified) == 1


@pytest.mark.parametrize("note", [
    GO_TEXT,
    GO_TEXT + "\n",
    GO_TEXT + "\n" + PETER_SIG[:-1],
    "\x01" + GO_TEXT + "\n" + PETER_SIG,
    GO_TEXT + "\n" + PETER_SIG.replace("PeterNeumann", "Bad Name").rstrip("\n"),
    GO_TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    GO_TEXT + "\n" + PETER_SIG * 101,
])
def test_go_sumdb_note_malformed_vectors(note: str) -> None:
    with pytest.raises(MalformedNote):
        open_note(note, [NoteVerifier.from_vkey(PETER_VKEY)])


def test_invalid_utf8_is_malformed() -> None:
    with pytest.raises(MalformedNote):
        parse_note(b"\xff" + (GO_TEXT + "\n" + PETER_SIG).encode())


@pytest.mark.parametrize("vkey", [
    PETER_VKEY[:-1], PETER_VKEY[1:], PETER_VKEY.replace("c74f20a3", "c74f20a4"),
    "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
    "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
])
def test_go_sumdb_bad_verifier_keys(vkey: str) -> None:
    with pytest.raises((MalformedNote, ValueError)):
        NoteVerifier.from_vkey(vkey)


def test_c2sp_tlog_checkpoint_example_parses() -> None:
    text = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    checkpoint = Checkpoint.parse(text)
    assert (checkpoint.origin, checkpoint.size) == ("example.com/behind-the-sofa", 20852163)
    assert checkpoint.text() == text


@pytest.mark.parametrize("text", [
    "origin\n012\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # leading zero
    "origin\n12\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I\n",  # unpadded base64
    "origin\n12\nAAAA\n",  # not 32 bytes
    "origin\n12\n",
    "or gin\n12\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n",  # space in origin
    "origin\n12\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\nextension\n",  # empty line
])
def test_malformed_checkpoints(text: str) -> None:
    with pytest.raises(MalformedNote):
        Checkpoint.parse(text)


def _log_key(seed: int = 7) -> SigningKey:
    return SigningKey("log", Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32))


def test_sign_and_open_checkpoint() -> None:
    key = _log_key()
    checkpoint = Checkpoint("future-ts.test/run/r1", 3, hashlib.sha256(b"root").digest())
    note = sign_checkpoint(checkpoint, key)
    assert note.startswith(checkpoint.text() + "\n" + EM_DASH + " future-ts.test/run/r1 ")
    opened_checkpoint, opened = open_checkpoint(note, [key.public_key],
                                                origin="future-ts.test/run/r1")
    assert opened_checkpoint == checkpoint and len(opened.verified) == 1
    with pytest.raises(MalformedNote, match="origin"):
        open_checkpoint(note, [key.public_key], origin="future-ts.test/run/r2")
    with pytest.raises(NoteSignatureInvalid):
        open_checkpoint(note, [_log_key(8).public_key])
    tampered = note.replace("\n3\n", "\n4\n")
    with pytest.raises(NoteSignatureInvalid):
        open_checkpoint(tampered, [key.public_key])
