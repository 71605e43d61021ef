"""The baseline forward-protocol server, run as a local process and as its sealed image.

The local tests run ``app/baselines`` twice: as ``app.baselines`` (how the scorer imports it)
and copied to a bare ``baselines`` package (how the image lays it out in ``/app``). The podman
tests pull the images ``images/build.sh`` pushed to the local registry, by digest, and run them
sealed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.baselines.forward_server import MODELS, clean_history
from app.baselines.seasonal_naive import seasonal_naive
from app.baselines.theta import theta
from tests.conftest import in_ci, need_service

REPO = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:5000"
LEVELS = [0.1, 0.5, 0.9]
SEASONAL = [10.0, 12.0, 15.0, 11.0] * 6 + [10.5, 12.5, 15.5, 11.5]
MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


def hello(season: int = 4, seed: int = 7) -> dict[str, Any]:
    task = {"task_id": "t", "seasonality": season, "horizon": 6, "quantile_levels": LEVELS}
    return {"type": "hello", "protocol": "future-ts-forward/1", "seed": seed, "task": task}


def forecast(
    request_id: str, series: dict[str, list[Any]], horizon: int = 6, levels: list[float] = LEVELS
) -> dict[str, Any]:
    return {
        "type": "forecast",
        "request_id": request_id,
        "window_id": "w0",
        "freq": "h",
        "horizon": horizon,
        "quantile_levels": levels,
        "series": [
            {"item_id": k, "start": "2024-01-01T00:00:00Z", "target": v} for k, v in series.items()
        ],
    }


class Session:
    """A running forward-protocol server: one request in flight at a time, as the runner does."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), f"no answer line; stderr: {self.stderr()}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def bye(self, timeout: float = 10.0) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b'{"type":"bye"}\n')
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        assert self.proc.stdout.read() == b"", "nothing may follow bye"
        return code

    def stderr(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture(params=["app.baselines", "baselines"])
def server_cmd(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[list[str], Path]:
    """How to start the server: as the scorer's package, or laid out as in the image."""
    if request.param == "app.baselines":
        return [sys.executable, "-u", "-m", "app.baselines.forward_server"], REPO
    package = tmp_path / "baselines"
    package.mkdir()
    for source in (REPO / "app" / "baselines").glob("*.py"):
        shutil.copy(source, package / source.name)
    return [sys.executable, "-u", "-m", "baselines.forward_server"], tmp_path


@pytest.fixture()
def seasonal_naive_server(server_cmd: tuple[list[str], Path]) -> Iterator[Session]:
    argv, cwd = server_cmd
    session = Session([*argv, "seasonal_naive"], cwd)
    yield session
    session.close()


@pytest.mark.timeout(30)
def test_round_trip_matches_direct_seasonal_naive(seasonal_naive_server: Session) -> None:
    s = seasonal_naive_server
    assert s.ask(hello(season=4)) == {"type": "ready"}
    series = {"a": SEASONAL, "b": [float(v) for v in range(1, 30)]}
    answer = s.ask(forecast("req-1", series))
    assert answer["type"] == "prediction"
    assert answer["request_id"] == "req-1"
    assert [f["item_id"] for f in answer["forecasts"]] == ["a", "b"]
    for entry in answer["forecasts"]:
        mean, quantiles = seasonal_naive(series[entry["item_id"]], 6, 4, LEVELS)
        assert entry["mean"] == mean
        assert entry["quantiles"] == quantiles
        assert list(entry["quantiles"]) == ["0.1", "0.5", "0.9"]
    assert s.bye() == 0


@pytest.mark.timeout(30)
def test_horizon_levels_per_request_and_season_from_hello(seasonal_naive_server: Session) -> None:
    s = seasonal_naive_server
    assert s.ask(hello(season=7)) == {"type": "ready"}
    levels = [0.05, 0.25, 0.975]
    answer = s.ask(forecast("r", {"x": SEASONAL}, horizon=11, levels=levels))
    entry = answer["forecasts"][0]
    assert len(entry["mean"]) == 11
    assert list(entry["quantiles"]) == [repr(v) for v in levels]
    assert (entry["mean"], entry["quantiles"]) == seasonal_naive(SEASONAL, 11, 7, levels)
    assert entry["mean"] != seasonal_naive(SEASONAL, 11, 4, levels)[0]
    assert s.bye() == 0


@pytest.mark.timeout(30)
def test_bad_requests_get_error_replies(server_cmd: tuple[list[str], Path]) -> None:
    argv, cwd = server_cmd
    s = Session([*argv, "theta"], cwd)
    try:
        early = s.ask(forecast("too-early", {"a": SEASONAL}))
        assert early == {
            "type": "error",
            "request_id": "too-early",
            "message": "forecast before hello",
        }
        assert s.ask(hello()) == {"type": "ready"}
        bad = s.ask({**forecast("neg", {"a": SEASONAL}), "horizon": -1})
        assert bad["type"] == "error" and bad["request_id"] == "neg"
        missing = s.ask(forecast("gaps", {"a": [None, 1.0, None, 3.0, float("nan"), 5.0]}))
        assert missing["type"] == "prediction"
        assert all(math.isfinite(v) for v in missing["forecasts"][0]["mean"])
        assert s.bye() == 0
    finally:
        s.close()


def test_unknown_model_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.baselines.forward_server", "prophet"],
        cwd=REPO,
        input=b"",
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert b"unknown baseline model" in done.stderr


def test_clean_history_carries_values_forward() -> None:
    assert clean_history([None, 2, float("nan"), 4.5, float("inf")]) == [2.0, 2.0, 4.5, 4.5]
    assert clean_history([None, None]) == [0.0]
    assert clean_history([1, 2, 3]) == [1.0, 2.0, 3.0]


def test_theta_on_a_seasonal_series_with_trend() -> None:
    def truth(t: int) -> float:
        return 10.0 + 0.02 * t + 3.0 * math.sin(2 * math.pi * t / 12)

    history = [truth(t) for t in range(96)]
    mean, quantiles = theta(history, 12, 12, [0.1, 0.5, 0.9])
    errors = [abs(m - truth(96 + h)) for h, m in enumerate(mean)]
    assert max(errors) < 0.7, errors  # the seasonal shape is followed, not just the level
    naive_level_error = max(abs(history[-1] - truth(96 + h)) for h in range(12))
    assert sum(errors) / 12 < naive_level_error / 4
    assert quantiles["0.5"] == pytest.approx(mean)
    for h in range(12):
        assert quantiles["0.1"][h] < mean[h] < quantiles["0.9"][h]
    widths = [quantiles["0.9"][h] - quantiles["0.1"][h] for h in range(12)]
    assert widths[-1] > widths[0]
    assert theta(history, 12, 12, [0.1, 0.5, 0.9]) == (mean, quantiles)  # deterministic


def test_theta_edge_cases() -> None:
    assert theta([5.0] * 20, 3, 1, [0.1, 0.9]) == ([5.0] * 3, {"0.1": [5.0] * 3, "0.9": [5.0] * 3})
    assert theta([3.0], 2, 4, []) == ([3.0, 3.0], {})
    linear = [float(t) for t in range(50)]
    mean, _ = theta(linear, 3, 1, [])
    assert mean == pytest.approx([49.5, 50.0, 50.5], abs=1e-3)  # SES level + half the trend


def test_manifest_matches_the_sources() -> None:
    manifest = json.loads((REPO / "images" / "images.json").read_text())
    assert {"seasonal-naive", "theta"} <= set(manifest["images"])
    for name, image in manifest["images"].items():
        command = image["command"]
        assert command[:2] == ["/usr/bin/python3", "-u"], name
        if image["kind"] == "baseline":
            assert command[2:4] == ["-m", "baselines.forward_server"], name
            assert command[4] in MODELS, name
        else:
            script = Path(command[2])
            assert script.parent == Path("/app/hostile"), name
            assert (REPO / "images" / "hostile" / script.name).is_file(), name
        assert image["purpose"] and image["expected"], name


# --- the sealed images --------------------------------------------------------------------------


def _need_podman() -> str:
    podman = shutil.which("podman")
    if podman is None:
        if in_ci():
            pytest.fail("podman is not installed (run .ci/setup.sh)")
        pytest.skip("podman is not installed (run .ci/setup.sh)")
    need_service("OCI registry", "127.0.0.1", 5000)
    return podman


def _digest(repository: str, tag: str = "latest") -> str:
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": MANIFEST_ACCEPT},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return str(response.headers["Docker-Content-Digest"])
    except OSError as exc:
        message = f"{repository}:{tag} is not in the local registry ({exc}); run images/build.sh"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def _podman_env() -> dict[str, str]:
    return {
        **os.environ,
        "CONTAINERS_CONF": str(REPO / ".ci" / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(REPO / ".ci" / "registries.conf"),
    }


@pytest.mark.podman
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("image", "model"), [("seasonal-naive", seasonal_naive), ("theta", theta)])
def test_sealed_baseline_image_round_trip(image: str, model: Any) -> None:
    podman = _need_podman()
    pinned = f"{REGISTRY}/future-ts/{image}@{_digest(f'future-ts/{image}')}"
    env = _podman_env()
    subprocess.run(
        [podman, "pull", "-q", pinned], env=env, check=True, capture_output=True, timeout=60
    )
    name = f"fts-test-{image}-{uuid.uuid4().hex[:12]}"
    argv = [
        podman,
        "run",
        "--rm",
        "-i",
        "--network=none",
        "--read-only",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        "--user",
        "65534:65534",
        "--pull=never",
        "--log-driver=none",
        "--no-hosts",
        "--name",
        name,
        pinned,
    ]
    s = Session(argv, REPO, env)
    try:
        assert s.ask(hello(season=4)) == {"type": "ready"}
        answer = s.ask(forecast("sealed-1", {"a": SEASONAL}))
        assert answer["request_id"] == "sealed-1"
        entry = answer["forecasts"][0]
        assert (entry["mean"], entry["quantiles"]) == model(SEASONAL, 6, 4, LEVELS)
        assert s.bye(timeout=30) == 0
    finally:
        s.close()
        subprocess.run(
            [podman, "rm", "-f", "-t", "0", name], env=env, capture_output=True, timeout=30
        )
