"""Tag-to-digest resolution against the real OCI registry on 127.0.0.1:5000, and what intake
answers when the image is missing or the registry is down."""

from __future__ import annotations

import hashlib
import socket
import subprocess

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
