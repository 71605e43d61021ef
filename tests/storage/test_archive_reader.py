"""A run archived through each ``ArtifactStore`` verifies through ``StoreArchive``."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.evidence import cli
from app.evidence.verify import StoreArchive, verify_report
from app.settings import Settings
from app.storage import layout
from app.storage.port import ArtifactStore
from tests.evidence.runfactory import SIGNED_AT, VERIFY_NOW, build_run
from tests.storage.conftest import S3_ACCESS_KEY, S3_SECRET_KEY

NAMES = (layout.PREDICTIONS, layout.CHECKPOINT, layout.RUN_MANIFEST, layout.CONTAINER,
         layout.STDERR, layout.REPORT)


def _archive(store: ArtifactStore, tmp_path: Path, key_prefix: str,
             signed_at: datetime = SIGNED_AT) -> tuple[str, Any]:
    run_id = key_prefix.split("/", 1)[1]
    built = build_run(tmp_path / "run", run_id=run_id, signed_at=signed_at)
    for name in NAMES:
        store.put_once(layout.run_key(run_id, name), built.path(name).read_bytes(),
                       layout.CONTENT_TYPES[name])
    return run_id, built


def test_verify_from_the_store(store: ArtifactStore, tmp_path: Path, key_prefix: str) -> None:
    run_id, built = _archive(store, tmp_path, key_prefix)
    archive = StoreArchive(store, run_id)
    result = verify_report(archive.read(layout.REPORT), archive, built.jwks, VERIFY_NOW)
    assert result.ok, result.failure
    missing = verify_report(built.envelope, StoreArchive(store, "no-such-run"), built.jwks,
                            VERIFY_NOW)
    assert missing.failure is not None and missing.failure.check == "subject:predictions.jsonl"


@pytest.mark.s3
def test_cli_verifies_an_s3_archive(lock_bucket: str, s3_endpoint: str, tmp_path: Path,
                                    key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.storage.conftest import make_s3_store

    recently = datetime.now(UTC) - timedelta(minutes=1)  # the CLI verifies with the real clock
    run_id, built = _archive(make_s3_store(lock_bucket), tmp_path, key_prefix, recently)
    settings = Settings(data_dir=tmp_path, s3_endpoint_url=s3_endpoint,
                        s3_access_key=S3_ACCESS_KEY, s3_secret_key=S3_SECRET_KEY)
    monkeypatch.setattr(cli, "get_settings", lambda: settings)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(built.jwks))
    out = io.StringIO()
    code = cli.run_verify(str(built.path(layout.REPORT)), archive=f"s3://{lock_bucket}/runs/{run_id}/",
                          jwks=str(jwks), out=out)
    assert code == 0, out.getvalue()
    assert "verified: 25 predictions" in out.getvalue()
