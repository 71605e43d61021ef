"""Resolve an image tag to a manifest digest with the OCI distribution API.

The registry is asked with ``HEAD /v2/<name>/manifests/<ref>`` and an ``Accept`` list covering
OCI index/manifest and Docker v2 list/manifest: without it, distribution 2.x answers 404 for an
OCI manifest (it cannot down-convert to schema 1). When the registry gives no
``Docker-Content-Digest`` we GET the manifest and hash the exact bytes ourselves.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import ssl
import threading
from dataclasses import dataclass
from email.message import Message
from typing import Protocol
from urllib.parse import urlencode, urljoin, urlsplit

import certifi

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
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 5
_USER_AGENT = "future-ts-intake"


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


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: Message
    body: bytes

    def header(self, name: str) -> str:
        return str(self.headers.get(name, ""))


class _KeptConnections(threading.local):
    """One keep-alive connection per registry origin, per thread: a request thread owns its
    connections outright, so there is no pool to lock and no connection shared mid-request."""

    def __init__(self) -> None:
        self.by_origin: dict[tuple[str, str], http.client.HTTPConnection] = {}


class HttpRegistryResolver:
    """The OCI distribution API over ``http.client``: a HEAD on a kept-alive connection costs
    about 0.2 ms of CPU here against 0.5 ms through httpx (measured in a loop against the local
    registry; every submission makes one).
    Every resolution asks the registry: a tag's digest is never cached (the digest a run uses
    must be the one the registry served at intake)."""

    def __init__(self, insecure_hosts: list[str], timeout_s: float = 5.0) -> None:
        self.insecure_hosts = set(insecure_hosts)
        self.timeout_s = timeout_s
        # Built once: loading the CA bundle costs milliseconds. certifi's bundle, as httpx used.
        self.tls = ssl.create_default_context(cafile=certifi.where())
        self._kept = _KeptConnections()

    def resolve(self, ref: ImageReference) -> ResolvedImage:
        scheme = "http" if ref.registry in self.insecure_hosts else "https"
        url = f"{scheme}://{ref.registry}/v2/{ref.repository}/manifests/{ref.reference}"
        headers = {"Accept": MANIFEST_ACCEPT}
        try:
            answer = self._request("HEAD", url, headers)
            if answer.status == 401:
                headers["Authorization"] = self._anonymous_token(answer, ref)
                answer = self._request("HEAD", url, headers)
            digest = answer.header("Docker-Content-Digest")
            if answer.status == 200 and not _DIGEST.match(digest):
                answer = self._request("GET", url, headers)
                digest = "sha256:" + hashlib.sha256(answer.body).hexdigest()
        except (OSError, http.client.HTTPException, ValueError) as exc:
            # OSError: refused, reset, timed out, TLS; HTTPException: a broken answer;
            # ValueError: a token endpoint that does not answer JSON.
            raise RegistryUnavailable(
                f"registry {ref.registry} unreachable: {type(exc).__name__}",
                headers={"Retry-After": "30"},
            ) from exc
        return self._result(ref, answer, digest)

    def _result(self, ref: ImageReference, answer: _Answer, digest: str) -> ResolvedImage:
        if answer.status in (401, 403, 404):
            raise ImageUnresolvable(f"{ref} not found in registry (HTTP {answer.status})")
        if answer.status >= 500 or answer.status == 429:
            raise RegistryUnavailable(
                f"registry {ref.registry} answered HTTP {answer.status}",
                headers={"Retry-After": "30"},
            )
        if answer.status != 200:
            raise ImageUnresolvable(f"registry answered HTTP {answer.status} for {ref}")
        if ref.digest and digest != ref.digest:
            raise ImageUnresolvable(f"registry serves {digest} for {ref}, not the pinned digest")
        media_type = answer.header("Content-Type").split(";")[0].strip()
        return ResolvedImage(ref, digest, media_type)

    def _anonymous_token(self, challenge: _Answer, ref: ImageReference) -> str:
        """Bearer token for anonymous pull (the token-auth flow public registries use)."""
        header = challenge.header("WWW-Authenticate")
        params = dict(re.findall(r'(\w+)="([^"]*)"', header))
        if not header.lower().startswith("bearer") or "realm" not in params:
            raise ImageUnresolvable(f"registry {ref.registry} requires credentials")
        query = urlencode({"service": params.get("service", ""),
                           "scope": params.get("scope", f"repository:{ref.repository}:pull")})
        realm = params["realm"]
        answer = self._request("GET", f"{realm}{'&' if '?' in realm else '?'}{query}", {})
        granted = json.loads(answer.body or b"{}") if answer.status == 200 else {}
        # The distribution spec's token answer names it "token"; OAuth2 servers "access_token".
        return f"Bearer {granted.get('token') or granted.get('access_token', '')}"

    def _request(self, method: str, url: str, headers: dict[str, str]) -> _Answer:
        """``method`` on ``url``, following redirects as httpx did (the Authorization header is
        not sent to another origin)."""
        headers = {**headers, "User-Agent": _USER_AGENT}
        for _ in range(_MAX_REDIRECTS + 1):
            answer = self._send(method, url, headers)
            location = answer.header("Location")
            if answer.status not in _REDIRECTS or not location:
                return answer
            target = urljoin(url, location)
            if urlsplit(target)[:2] != urlsplit(url)[:2]:
                headers.pop("Authorization", None)
            url = target
        raise http.client.HTTPException(f"more than {_MAX_REDIRECTS} redirects")

    def _send(self, method: str, url: str, headers: dict[str, str]) -> _Answer:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise http.client.InvalidURL(f"not an http(s) URL: {url}")
        origin = (parts.scheme, parts.netloc)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        kept = self._kept.by_origin.pop(origin, None)
        if kept is not None:
            try:
                return self._exchange(kept, origin, method, target, headers)
            except (ConnectionError, http.client.BadStatusLine):
                # The registry closed the idle kept connection (its keep-alive timeout) as we
                # reused it; HEAD and GET are idempotent, so ask once more on a new connection.
                kept.close()
        return self._exchange(self._connect(origin), origin, method, target, headers)

    def _exchange(self, conn: http.client.HTTPConnection, origin: tuple[str, str], method: str,
                  target: str, headers: dict[str, str]) -> _Answer:
        try:
            conn.request(method, target, headers=headers)
            response = conn.getresponse()
            answer = _Answer(response.status, response.headers, response.read())
        except BaseException:
            conn.close()
            raise
        if response.will_close:
            conn.close()
        else:
            self._kept.by_origin[origin] = conn
        return answer

    def _connect(self, origin: tuple[str, str]) -> http.client.HTTPConnection:
        scheme, netloc = origin
        if scheme == "https":
            return http.client.HTTPSConnection(netloc, timeout=self.timeout_s, context=self.tls)
        return http.client.HTTPConnection(netloc, timeout=self.timeout_s)
