"""``future-ts verify``: check a signed report offline and say exactly what does not match.

``REPORT`` is a ``report.dsse.json`` file. ``--archive`` is a directory holding the run's archived
objects (default: the report's own directory) or ``s3://<bucket>/runs/<run_id>/`` read with the
configured S3 credentials. ``--jwks`` is a JWKS file or URL (default: ``<public_base_url>/v1/keys``;
pin a file for a verification that trusts nothing online). Exit codes: 0 verified, 1 a check
failed, 2 the inputs could not be read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse

from app.evidence.errors import ArchiveUnavailable
from app.evidence.report import peek_statement
from app.evidence.verify import (
    ArchiveReader,
    DirectoryArchive,
    MetricsHook,
    StoreArchive,
    VerifyResult,
    verify_report,
)
from app.settings import get_settings


class _InputError(Exception):
    pass


def run_verify(
    report: str,
    *,
    archive: str | None = None,
    jwks: str | None = None,
    recompute: bool = False,
    metrics_hook: MetricsHook | None = None,
    out: TextIO | None = None,
) -> int:
    """Verify ``report``; print one line per check; return the process exit code."""
    out = out or sys.stdout  # looked up per call, not bound at import
    try:
        envelope = Path(report).read_bytes()
        reader = _archive(archive, Path(report), envelope)
        keys = _jwks(jwks)
        if recompute and metrics_hook is None:
            raise _InputError("--recompute needs the scorer's metrics hook, which is not wired")
    except (OSError, ValueError, _InputError) as exc:
        print(f"error: {exc}", file=out)
        return 2
    try:
        result = verify_report(envelope, reader, keys, recompute_metrics=metrics_hook)
    except ArchiveUnavailable as exc:
        print(f"error: {exc}", file=out)
        return 2
    _print(result, out)
    return 0 if result.ok else 1


def _print(result: VerifyResult, out: TextIO) -> None:
    for check in result.passed:
        print(f"ok    {check}", file=out)
    if result.failure is not None:
        print(f"FAIL  {result.failure}", file=out)
        return
    tree = result.tree
    size = tree.size if tree else "?"
    digest = tree.prediction_hash if tree else "?"
    print(f"verified: {size} predictions, {digest}, report key {result.report_kid}", file=out)


def _archive(archive: str | None, report: Path, envelope: bytes) -> ArchiveReader:
    if archive is None:
        return DirectoryArchive(report.resolve().parent)
    if not archive.startswith("s3://"):
        return DirectoryArchive(Path(archive))
    url = urlparse(archive)
    parts = [p for p in url.path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "runs":
        run_id = parts[1]
    else:  # s3://bucket/ : take the run from the (not yet verified) report; verify checks it
        run_id = str(peek_statement(envelope).get("predicate", {}).get("run_id", ""))
    from app.storage.s3 import S3ArtifactStore

    settings = get_settings()
    store = S3ArtifactStore(
        bucket=url.netloc,
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        access_key=settings.s3_access_key.get_secret_value() or None,
        secret_key=settings.s3_secret_key.get_secret_value() or None,
    )
    return StoreArchive(store, run_id)


def _jwks(jwks: str | None) -> dict[str, Any]:
    source = jwks or get_settings().public_base_url.rstrip("/") + "/v1/keys"
    if source.startswith(("http://", "https://")):
        import httpx

        try:
            response = httpx.get(source, timeout=10.0)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise _InputError(f"cannot fetch the JWKS from {source}: {exc}") from exc
        document = response.json()
    else:
        document = json.loads(Path(source).read_text())
    if not isinstance(document, dict):
        raise _InputError(f"{source} is not a JWKS object")
    return document
