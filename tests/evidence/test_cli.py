"""``future-ts verify`` (``app.evidence.cli.run_verify``): output and exit codes."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.evidence.cli import run_verify
from app.storage import layout
from tests.evidence.runfactory import build_run


def _recently() -> datetime:
    return datetime.now(UTC) - timedelta(minutes=1)  # the CLI verifies against the real clock


def _jwks_file(tmp_path: Path, document: object) -> str:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_verify_ok_from_the_report_directory(tmp_path: Path) -> None:
    built = build_run(tmp_path / "archive", signed_at=_recently())
    out = io.StringIO()
    code = run_verify(str(built.path(layout.REPORT)), jwks=_jwks_file(tmp_path, built.jwks),
                      out=out)
    assert code == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0] == "ok    envelope" and lines[-1].startswith("verified: 25 predictions")


def test_verify_names_the_failure_and_exits_1(tmp_path: Path) -> None:
    built = build_run(tmp_path / "archive", signed_at=_recently())
    built.path(layout.STDERR).write_bytes(b"edited\n")
    out = io.StringIO()
    code = run_verify(str(built.path(layout.REPORT)), archive=str(built.archive_dir),
                      jwks=_jwks_file(tmp_path, built.jwks), out=out)
    assert code == 1
    assert out.getvalue().splitlines()[-1].startswith("FAIL  archive:stderr.log: ")


def test_unreadable_inputs_exit_2(tmp_path: Path) -> None:
    built = build_run(tmp_path / "archive", signed_at=_recently())
    out = io.StringIO()
    assert run_verify(str(tmp_path / "missing.json"), jwks=_jwks_file(tmp_path, {}), out=out) == 2
    assert run_verify(str(built.path(layout.REPORT)), jwks=str(tmp_path / "nope.json"),
                      out=out) == 2
    assert run_verify(str(built.path(layout.REPORT)), jwks=_jwks_file(tmp_path, built.jwks),
                      recompute=True, out=out) == 2
    assert "metrics hook" in out.getvalue()
