"""Ed25519 keys: RFC 8037 / RFC 7638 vectors, key files, the key ring, its JWKS and settings."""

from __future__ import annotations

import stat
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from pydantic import SecretStr

from app.evidence.errors import KeyConfigError, MalformedJWKS, NoActiveKey, SameKeyForBothPurposes
from app.evidence.keys import (
    JWK_NOT_AFTER,
    JWK_NOT_BEFORE,
    JWK_PURPOSE,
    KeyRing,
    SigningKey,
    VerificationKey,
    b64url_decode,
    b64url_encode,
    generate_keypair,
    jwk_thumbprint,
    load_keyring,
    load_private_key_file,
    load_private_key_pem,
    public_key_pem,
    verification_keys_from_jwks,
)
from app.settings import Settings
from app.warnings import DevOnlyWarning

# RFC 8037 appendix A.1 (key), A.3 (RFC 7638 thumbprint), A.4 (JWS signature).
RFC8037_D = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"
RFC8037_X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
RFC8037_KID = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
RFC8037_SIGNING_INPUT = b"eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc"
RFC8037_SIG = ("hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0"
               "KAg")
JAN, JUN = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)


def _key(seed: int) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)


def _pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def test_rfc8037_thumbprint_and_signature() -> None:
    key = SigningKey("report", Ed25519PrivateKey.from_private_bytes(b64url_decode(RFC8037_D)))
    assert b64url_encode(key.verification.raw) == RFC8037_X
    assert jwk_thumbprint(key.public_key) == RFC8037_KID == key.kid
    assert jwk_thumbprint(b64url_decode(RFC8037_X)) == RFC8037_KID
    assert b64url_encode(key.sign(RFC8037_SIGNING_INPUT)) == RFC8037_SIG


def test_b64url_is_strict() -> None:
    for bad in ("a+b", "ab==", "a", "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURp"):
        with pytest.raises(ValueError):
            b64url_decode(bad)


def test_generate_keypair_writes_pkcs8_mode_0600_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "report-2026-01-01.pem"
    key = generate_keypair(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    loaded = load_private_key_file(path)
    assert jwk_thumbprint(loaded.public_key()) == jwk_thumbprint(key.public_key())
    with pytest.raises(KeyConfigError, match="overwrite"):
        generate_keypair(path)


def test_load_pem_from_string_and_refuse_other_key_types() -> None:
    key = _key(3)
    assert jwk_thumbprint(load_private_key_pem(_pem(key).decode()).public_key()) == (
        jwk_thumbprint(key.public_key()))
    x25519 = X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    with pytest.raises(KeyConfigError, match="Ed25519"):
        load_private_key_pem(x25519)
    with pytest.raises(KeyConfigError):
        load_private_key_pem("not a pem")


def _write(directory: Path, name: str, key: Ed25519PrivateKey, public: bool = False) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    data = public_key_pem(key.public_key()) if public else _pem(key)
    (directory / name).write_bytes(data)


def test_key_directory_windows_rotation_and_jwks(tmp_path: Path) -> None:
    _write(tmp_path, "report-2025-06-01.pub.pem", _key(1), public=True)  # retired, public only
    _write(tmp_path, "report-2026-01-01.pem", _key(2))
    _write(tmp_path, "report-20260601.pem", _key(3))  # compact date form
    _write(tmp_path, "log-2026-01-01.pem", _key(4))
    _write(tmp_path, "report-dev.pem", _key(9))  # not dated: not part of the chain
    ring = KeyRing.from_directory(tmp_path)
    assert ring.signer("report", JAN + timedelta(days=1)).kid == (
        jwk_thumbprint(_key(2).public_key()))
    assert ring.signer("report", JUN).kid == jwk_thumbprint(_key(3).public_key())
    assert ring.signer("log", JUN).kid == jwk_thumbprint(_key(4).public_key())
    with pytest.raises(NoActiveKey):
        ring.signer("report", datetime(2025, 12, 1, tzinfo=UTC))  # only the retired key then
    jwks = ring.jwks()
    assert [k[JWK_PURPOSE] for k in jwks["keys"]] == ["log", "report", "report", "report"]
    old, current, newest = jwks["keys"][1:]
    assert (old[JWK_NOT_BEFORE], old[JWK_NOT_AFTER]) == ("2025-06-01T00:00:00Z",
                                                         "2026-01-01T00:00:00Z")
    assert (current[JWK_NOT_AFTER], newest[JWK_NOT_AFTER]) == ("2026-06-01T00:00:00Z", None)
    assert newest == {
        "kty": "OKP", "crv": "Ed25519",
        "x": b64url_encode(SigningKey("report", _key(3)).verification.raw),
        "kid": jwk_thumbprint(_key(3).public_key()), "use": "sig", "alg": "EdDSA",
        "key_ops": ["verify"], JWK_PURPOSE: "report", JWK_NOT_BEFORE: "2026-06-01T00:00:00Z",
        JWK_NOT_AFTER: None,
    }
    parsed = verification_keys_from_jwks(jwks)
    assert [k.kid for k in parsed] == [k["kid"] for k in jwks["keys"]]
    assert parsed[2].covers(JAN) and not parsed[2].covers(JUN)


def test_same_key_for_both_purposes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SameKeyForBothPurposes):
        KeyRing([SigningKey("report", _key(5)), SigningKey("log", _key(5))])
    _write(tmp_path, "report-2026-01-01.pem", _key(5))
    _write(tmp_path, "log-2026-01-01.pem", _key(5))
    with pytest.raises(SameKeyForBothPurposes):
        KeyRing.from_directory(tmp_path)


def test_two_keys_on_one_date_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, "log-2026-01-01.pem", _key(1))
    _write(tmp_path, "log-20260101.pem", _key(2))
    with pytest.raises(KeyConfigError, match="same date"):
        KeyRing.from_directory(tmp_path)


def test_jwks_entries_are_checked() -> None:
    good = VerificationKey("log", _key(1).public_key()).to_jwk()
    for bad in ({**good, "kid": RFC8037_KID}, {**good, "crv": "X25519"},
                {**good, "x": good["x"][:-2]}, {**good, JWK_PURPOSE: "both"},
                {**good, JWK_NOT_BEFORE: "2026-01-01T00:00:00"}):
        with pytest.raises(MalformedJWKS):
            verification_keys_from_jwks({"keys": [bad]})
    with pytest.raises(MalformedJWKS):
        verification_keys_from_jwks({"keys": [good, {**good, JWK_PURPOSE: "report"}]})
    with pytest.raises(MalformedJWKS):
        verification_keys_from_jwks({"key": []})


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path, **values)  # type: ignore[arg-type]


def test_load_keyring_from_explicit_pems_lists_retired_public_keys(tmp_path: Path) -> None:
    _write(tmp_path / "keys", "report-2025-01-01.pub.pem", _key(1), public=True)
    settings = _settings(tmp_path, environment="test",
                         report_key_pem=SecretStr(_pem(_key(2)).decode()),
                         log_key_pem=SecretStr(_pem(_key(3)).decode()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DevOnlyWarning)  # nothing is generated
        ring = load_keyring(settings)
    assert ring.signer("report").kid == jwk_thumbprint(_key(2).public_key())
    assert ring.signer("log").kid == jwk_thumbprint(_key(3).public_key())
    assert len(ring.verification_keys("report")) == 2


def test_load_keyring_from_paths_refuses_one_key_for_both(tmp_path: Path) -> None:
    path = tmp_path / "shared.pem"
    path.write_bytes(_pem(_key(4)))
    with pytest.raises(SameKeyForBothPurposes):
        load_keyring(_settings(tmp_path, report_key_path=path, log_key_path=path))


def test_dev_generates_missing_keys_with_a_warning(tmp_path: Path) -> None:
    now = datetime(2026, 11, 30, 8, tzinfo=UTC)
    with pytest.warns(DevOnlyWarning):
        ring = load_keyring(_settings(tmp_path, environment="dev"), now=now)
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == [
        "log-2026-11-30.pem", "report-2026-11-30.pem"]
    assert ring.signer("report", now).kid != ring.signer("log", now).kid
    again = load_keyring(_settings(tmp_path, environment="dev"), now=now)  # reuses them
    assert again.jwks() == ring.jwks()


def test_production_never_generates_keys(tmp_path: Path) -> None:
    settings = Settings.model_construct(**{**_settings(tmp_path).model_dump(),
                                           "environment": "production"})
    with pytest.raises(KeyConfigError, match="keys generate"):
        load_keyring(settings)
    assert not (tmp_path / "keys").exists()
