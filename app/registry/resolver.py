"""Resolve an image tag to a manifest digest with the OCI distribution API.

The registry is asked with ``HEAD /v2/<name>/manifests/<ref>`` and an ``Accept`` list covering
OCI index/manifest and Docker v2 list/manifest: without it, distribution 2.x answers 404 for an
OCI manifest (it cannot down-convert to schema 1). When the registry gives no
``Docker-Content-Digest`` we GET the manifest and hash the exact bytes ourselves.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Protocol

import httpx

from app.errors import ServiceUnavailable, Unprocessable
from app.registry.reference import ImageReference

MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
PROCESS_SCHEME = "process:"  # dev only: a command for the process backend, not an image
PROCESS_MEDIA_TYPE = "application/vnd.future-ts.process-command"


class ImageUnresolvable(Unprocessable):
    error_name = "image_unresolvable"


class RegistryUnavailable(ServiceUnavailable):
    pass


@dataclass(frozen=True)
class ResolvedImage:
    reference: ImageReference
    digest: str  # sha256:<hex> of the manifest (or index) bytes
    media_type: str
    pinned_override: str | None = None  # dev process images pin their command line instead

    @property
    def pinned(self) -> str:
        """``registry/repository@sha256:...``: the only form a run ever uses."""
        return self.pinned_override or self.reference.with_digest(self.digest)


class ImageResolver(Protocol):
    def resolve(self, ref: ImageReference) -> ResolvedImage:
        """Resolve ``ref`` to a manifest digest.

        Raises ``ImageUnresolvable`` when the registry says the image does not exist (or refuses
        us), ``RegistryUnavailable`` when it cannot be reached or fails.
        """
        ...


class HttpRegistryResolver:
    def __init__(self, insecure_hosts: list[str], timeout_s: float = 5.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.insecure_hosts = set(insecure_hosts)
        # One client per process, shared by the request threads: connections to a registry are
        # kept alive and reused. Keep as many as requests may resolve at once (httpx keeps 20
        # by default and closes the rest, so a burst of submissions reconnected every time).
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=64)
        self.client = httpx.Client(timeout=timeout_s, transport=transport, limits=limits,
                                   follow_redirects=True, trust_env=False)

    def resolve(self, ref: ImageReference) -> ResolvedImage:
        scheme = "http" if ref.registry in self.insecure_hosts else "https"
        url = f"{scheme}://{ref.registry}/v2/{ref.repository}/manifests/{ref.reference}"
        headers = {"Accept": MANIFEST_ACCEPT}
        try:
            response = self.client.head(url, headers=headers)
            if response.status_code == 401:
                headers["Authorization"] = self._anonymous_token(response, ref)
                response = self.client.head(url, headers=headers)
            digest = response.headers.get("Docker-Content-Digest", "")
            if response.status_code == 200 and not _DIGEST.match(digest):
                response = self.client.get(url, headers=headers)
                digest = "sha256:" + hashlib.sha256(response.content).hexdigest()
        except httpx.HTTPError as exc:
            raise RegistryUnavailable(
                f"registry {ref.registry} unreachable: {type(exc).__name__}",
                headers={"Retry-After": "30"},
            ) from exc
        return self._result(ref, response, digest)

    def _result(self, ref: ImageReference, response: httpx.Response, digest: str) -> ResolvedImage:
        if response.status_code in (401, 403, 404):
            raise ImageUnresolvable(f"{ref} not found in registry (HTTP {response.status_code})")
        if response.status_code >= 500 or response.status_code == 429:
            raise RegistryUnavailable(
                f"registry {ref.registry} answered HTTP {response.status_code}",
                headers={"Retry-After": "30"},
            )
        if response.status_code != 200:
            raise ImageUnresolvable(f"registry answered HTTP {response.status_code} for {ref}")
        if ref.digest and digest != ref.digest:
            raise ImageUnresolvable(f"registry serves {digest} for {ref}, not the pinned digest")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return ResolvedImage(ref, digest, media_type)

    def _anonymous_token(self, challenge: httpx.Response, ref: ImageReference) -> str:
        """Bearer token for anonymous pull (the token-auth flow public registries use)."""
        header = challenge.headers.get("WWW-Authenticate", "")
        params = dict(re.findall(r'(\w+)="([^"]*)"', header))
        if not header.lower().startswith("bearer") or "realm" not in params:
            raise ImageUnresolvable(f"registry {ref.registry} requires credentials")
        query = {"service": params.get("service", ""),
                 "scope": params.get("scope", f"repository:{ref.repository}:pull")}
        token = self.client.get(params["realm"], params=query).json().get("token", "")
        return f"Bearer {token}"
