"""Tag-to-digest resolution against the real OCI registry on 127.0.0.1:5000, and what intake
answers when the image is missing or the registry is down."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import subprocess
import threading
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from app.deps import get_resolver
from app.registry.reference import ImageReference, parse_image_reference
from app.registry.resolver import (
    MANIFEST_ACCEPT,
    HttpRegistryResolver,
    ImageUnresolvable,
    RegistryUnavailable,
)
from tests.api.conftest import auth, body
from tests.conftest import need_service

REGISTRY = "127.0.0.1:5000"
REPO = "future-ts/seasonal-naive"


@pytest.fixture()
def registry() -> HttpRegistryResolver:
    need_service("OCI registry", "127.0.0.1", 5000)
    return HttpRegistryResolver([REGISTRY])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tag_resolves_to_the_manifest_bytes_digest(registry: HttpRegistryResolver) -> None:
    resolved = registry.resolve(parse_image_reference(f"{REGISTRY}/{REPO}:latest"))
    manifest = httpx.get(f"http://{REGISTRY}/v2/{REPO}/manifests/latest",
                         headers={"Accept": MANIFEST_ACCEPT}).content
    assert resolved.digest == "sha256:" + hashlib.sha256(manifest).hexdigest()
    assert resolved.media_type == "application/vnd.oci.image.manifest.v1+json"
    assert resolved.pinned == f"{REGISTRY}/{REPO}@{resolved.digest}"
    skopeo = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format",
                             "{{.Digest}}", f"docker://{REGISTRY}/{REPO}:latest"],
                            capture_output=True, text=True, check=False)
    if skopeo.returncode == 0:
        assert skopeo.stdout.strip() == resolved.digest
    # A pinned reference is checked, not trusted.
    again = registry.resolve(parse_image_reference(resolved.pinned))
    assert again.digest == resolved.digest
    wrong = ImageReference(REGISTRY, REPO, None, "sha256:" + "0" * 64)
    with pytest.raises(ImageUnresolvable):
        registry.resolve(wrong)


def test_missing_tag_and_missing_repository(registry: HttpRegistryResolver) -> None:
    for ref in (f"{REGISTRY}/{REPO}:no-such-tag", f"{REGISTRY}/future-ts/nothing:latest"):
        with pytest.raises(ImageUnresolvable):
            registry.resolve(parse_image_reference(ref))


def test_registry_down_is_unavailable_not_unresolvable() -> None:
    port = _closed_port()
    resolver = HttpRegistryResolver([f"127.0.0.1:{port}"], timeout_s=1)
    with pytest.raises(RegistryUnavailable) as info:
        resolver.resolve(parse_image_reference(f"127.0.0.1:{port}/x/y:1"))
    assert info.value.headers["Retry-After"]


def test_intake_answers_422_and_503(client: TestClient, tokens: dict[str, str],
                                    registry: HttpRegistryResolver) -> None:
    app = client.app
    app.dependency_overrides[get_resolver] = lambda: registry  # type: ignore[attr-defined]
    ok = client.post("/v1/submissions", headers=auth(tokens["alice"]),
                     json=body(image=f"{REGISTRY}/{REPO}:latest"))
    assert ok.status_code == 202, ok.text
    assert ok.json()["image_digest"].startswith("sha256:")
    missing = client.post("/v1/submissions", headers=auth(tokens["alice"]),
                          json=body(image=f"{REGISTRY}/{REPO}:no-such-tag"))
    assert missing.status_code == 422 and missing.json()["error"] == "image_unresolvable"
    port = _closed_port()
    down = HttpRegistryResolver([f"127.0.0.1:{port}"], timeout_s=1)
    app.dependency_overrides[get_resolver] = lambda: down  # type: ignore[attr-defined]
    r = client.post("/v1/submissions", headers=auth(tokens["alice"]),
                    json=body(image=f"127.0.0.1:{port}/x/y:1"))
    assert r.status_code == 503 and r.json()["error"] == "RegistryUnavailable"
    assert int(r.headers["Retry-After"]) > 0


# ------------------------------------------------ what the local registry never does, on a stub
# The distribution server above has no token auth, redirects, digest-less answers or failures;
# a stub HTTP server on loopback plays them, to test the resolver's own handling of each.

MANIFEST = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'
MANIFEST_DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


class StubRegistry(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as registries do
    seen: list[tuple[str, str, dict[str, str]]] = []
    mode = "plain"

    def log_message(self, *_: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, *, body: bool) -> None:
        self.seen.append((self.command, self.path, dict(self.headers)))
        mode, port = self.mode, self.server.server_address[1]
        if self.path.startswith("/token"):
            return self._send(200, {"Content-Type": "application/json"},
                              json.dumps({"token": "t0k"}).encode(), body)
        if mode == "token" and self.headers.get("Authorization") != "Bearer t0k":
            challenge = (f'Bearer realm="http://127.0.0.1:{port}/token",service="stub",'
                         'scope="repository:x/y:pull"')
            return self._send(401, {"WWW-Authenticate": challenge}, b"", body)
        if mode == "redirect" and not self.path.startswith("/moved"):
            return self._send(307, {"Location": "/moved" + self.path}, b"", body)
        if mode.isdigit():
            return self._send(int(mode), {}, b"", body)
        headers = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
        if mode != "no-digest":
            headers["Docker-Content-Digest"] = MANIFEST_DIGEST
        self._send(200, headers, MANIFEST, body)

    def _send(self, status: int, headers: dict[str, str], content: bytes, body: bool) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if body:
            self.wfile.write(content)


@pytest.fixture()
def stub() -> Iterator[tuple[str, type[StubRegistry]]]:
    handler = type("Stub", (StubRegistry,), {"seen": [], "mode": "plain"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _resolve(host: str, image: str = "x/y:1") -> str:
    return HttpRegistryResolver([host], timeout_s=2).resolve(
        parse_image_reference(f"{host}/{image}")).digest


def test_stub_head_with_accept_and_digest(stub: tuple[str, type[StubRegistry]]) -> None:
    host, handler = stub
    assert _resolve(host) == MANIFEST_DIGEST
    [(method, path, headers)] = handler.seen
    assert (method, path) == ("HEAD", "/v2/x/y/manifests/1")
    assert headers["Accept"] == MANIFEST_ACCEPT


def test_no_digest_header_gets_and_hashes_the_bytes(stub: tuple[str, type[StubRegistry]]
                                                     ) -> None:
    host, handler = stub
    handler.mode = "no-digest"
    assert _resolve(host) == MANIFEST_DIGEST
    assert [m for m, _, _ in handler.seen] == ["HEAD", "GET"]


def test_anonymous_token_flow(stub: tuple[str, type[StubRegistry]]) -> None:
    host, handler = stub
    handler.mode = "token"
    assert _resolve(host) == MANIFEST_DIGEST
    token_path = handler.seen[1][1]
    assert token_path.startswith("/token?") and "service=stub" in token_path
    assert "scope=repository%3Ax%2Fy%3Apull" in token_path
    assert handler.seen[2][2]["Authorization"] == "Bearer t0k"


def test_redirects_are_followed(stub: tuple[str, type[StubRegistry]]) -> None:
    host, handler = stub
    handler.mode = "redirect"
    assert _resolve(host) == MANIFEST_DIGEST
    assert handler.seen[-1][1] == "/moved/v2/x/y/manifests/1"


@pytest.mark.parametrize(("status", "error"), [
    ("403", ImageUnresolvable), ("404", ImageUnresolvable), ("429", RegistryUnavailable),
    ("500", RegistryUnavailable), ("503", RegistryUnavailable)])
def test_status_answers(stub: tuple[str, type[StubRegistry]], status: str,
                        error: type[Exception]) -> None:
    host, handler = stub
    handler.mode = status
    with pytest.raises(error) as info:
        _resolve(host)
    if error is RegistryUnavailable:
        assert info.value.headers["Retry-After"]  # type: ignore[attr-defined]


def test_a_connection_the_registry_closed_is_replaced(stub: tuple[str, type[StubRegistry]]
                                                      ) -> None:
    """The kept connection is reused; when the registry has closed it meanwhile, the resolver
    asks again on a new one instead of failing the submission."""
    host, handler = stub
    resolver = HttpRegistryResolver([host], timeout_s=2)
    ref = parse_image_reference(f"{host}/x/y:1")
    assert resolver.resolve(ref).digest == MANIFEST_DIGEST
    [conn] = resolver._kept.by_origin.values()
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)  # as a server's idle timeout would leave it
    assert resolver.resolve(ref).digest == MANIFEST_DIGEST
    assert len(handler.seen) == 2
