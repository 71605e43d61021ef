"""Fixtures for the real-podman runner tests: the backend, the pinned images, a clean slate.

Per docs/CONTRIBUTING-helpers.md: with ``CI=true`` a missing podman, registry or image FAILS the
test; elsewhere it is skipped with the reason. Images come from ``images/build.sh`` (its
``pushed.json``), or are resolved by tag from the registry.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import in_ci, need_service
from workers.runner.podman import PodmanBackend

REPO = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:5000"
STATE = Path(os.environ.get("FUTURE_TS_STATE_DIR", REPO / ".ci" / "state"))
ACCEPT = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
# One prefix per test session: the "no container left" checks and the orphan reaper in these
# tests only ever look at containers this session created.
PREFIX = f"fts-t{uuid.uuid4().hex[:6]}-"


def _missing(message: str) -> None:
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _resolve(name: str) -> str | None:
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/future-ts/{name}/manifests/latest", method="HEAD",
        headers={"Accept": ACCEPT},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            digest = response.headers.get("Docker-Content-Digest")
    except OSError:
        return None
    return f"{REGISTRY}/future-ts/{name}@{digest}" if digest else None


class Images:
    """name → ``127.0.0.1:5000/future-ts/<name>@sha256:...``."""

    def __init__(self) -> None:
        pushed = STATE / "images" / "pushed.json"
        self._known: dict[str, str] = {}
        if pushed.exists():
            self._known = {k: v["pinned"] for k, v in json.loads(pushed.read_text()).items()}

    def __getitem__(self, name: str) -> str:
        ref = _resolve(name) or self._known.get(name)
        if ref is None:
            _missing(f"image future-ts/{name} is not in the registry (run images/build.sh)")
            raise AssertionError  # unreachable: _missing raised
        return ref


@pytest.fixture(scope="session")
def podman_images() -> Images:
    if shutil.which("podman") is None:
        _missing("podman is not installed (run .ci/setup.sh)")
    need_service("OCI registry", "127.0.0.1", 5000)
    return Images()


@pytest.fixture(scope="session")
def podman_backend(
    tmp_path_factory: pytest.TempPathFactory, podman_images: Images
) -> PodmanBackend:
    conf = REPO / ".ci" / "containers.conf"
    return PodmanBackend(
        state_dir=tmp_path_factory.mktemp("podman-state"),
        containers_conf=conf if conf.exists() else None,
        insecure_hosts=[REGISTRY],
        stderr_cap_bytes=256 * 1024,
    )


@pytest.fixture
def artifact_dir(tmp_path: Path) -> Path:
    """A world-readable artifact directory, as the pipeline prepares it."""
    art = tmp_path / "artifact"
    art.mkdir()
    (art / "weights.bin").write_bytes(b"\x00" * 1024)
    art.chmod(0o755)
    (art / "weights.bin").chmod(0o644)
    return art


@pytest.fixture
def no_leftovers(podman_backend: PodmanBackend) -> Iterator[None]:
    """After the test: no container of this session is left, in any state."""
    yield
    assert podman_backend.list_containers(PREFIX) == {}
