"""Fetching a submission's model artifact into a directory that is mounted read-only.

``s3://<bucket>/<key>`` is read through the archive store when the bucket is the store's own
(the local store in dev maps the same URIs to its directory). ``https://`` is fetched with the
address checked again at fetch time (DNS may answer differently than at intake), no redirects,
no proxies from the environment, and a size cap. The sha256 of the bytes is recorded in the run.
"""

from __future__ import annotations

import hashlib
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from app.settings import Settings
from app.storage.port import ArtifactStore
from app.submissions.artifact_uri import check_artifact_uri


class ArtifactUnavailable(Exception):
    """The artifact could not be fetched, or is not what the rules allow."""


@dataclass(frozen=True)
class FetchedArtifact:
    directory: Path
    sha256: str
    size: int
    uri: str


def fetch_artifact(uri: str, dest: Path, store: ArtifactStore, settings: Settings
                   ) -> FetchedArtifact:
    dest.mkdir(parents=True, exist_ok=True)
    parts = urlsplit(uri)
    name = Path(parts.path).name or "artifact"
    try:
        check_artifact_uri(uri, settings.artifact_allowed_hosts)
    except Exception as exc:
        raise ArtifactUnavailable(str(exc)) from exc
    if parts.scheme == "s3":
        data = _from_store(parts.netloc, parts.path.lstrip("/"), store, settings)
    else:
        data = _from_https(uri, settings.artifact_max_bytes)
    if len(data) > settings.artifact_max_bytes:
        raise ArtifactUnavailable(f"artifact exceeds {settings.artifact_max_bytes} bytes")
    target = dest / name
    target.write_bytes(data)
    target.chmod(0o444)
    dest.chmod(0o555)
    return FetchedArtifact(dest, "sha256:" + hashlib.sha256(data).hexdigest(), len(data), uri)


def _from_store(bucket: str, key: str, store: ArtifactStore, settings: Settings) -> bytes:
    if bucket != settings.s3_bucket:
        raise ArtifactUnavailable(f"bucket {bucket} is not readable by the platform "
                                  f"(upload to s3://{settings.s3_bucket}/...)")
    try:
        return store.get(key)
    except Exception as exc:
        raise ArtifactUnavailable(f"{type(exc).__name__}: {exc}") from exc


def _from_https(uri: str, cap: int) -> bytes:
    host = urlsplit(uri).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
        chunks: list[bytes] = []
        total = 0
        with httpx.Client(timeout=30, follow_redirects=False, trust_env=False) as client, \
                client.stream("GET", uri) as response:
            if response.status_code != 200:
                raise ArtifactUnavailable(f"{uri} answered HTTP {response.status_code}")
            for chunk in response.iter_bytes():
                total += len(chunk)
                if total > cap:
                    raise ArtifactUnavailable(f"artifact exceeds {cap} bytes")
                chunks.append(chunk)
        return b"".join(chunks)
    except (OSError, httpx.HTTPError) as exc:
        raise ArtifactUnavailable(f"{type(exc).__name__}: {exc}") from exc
