"""Real podman + runc + registry: baselines complete, hostile images end in the right state, the
sandbox holds, nothing is left behind. Images come from ``images/build.sh``."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from app.baselines.seasonal_naive import seasonal_naive
from app.catalog.cards import TaskCard
from app.hardware import HardwareClass
from tests.runner.conftest import PREFIX, REPO, Images
from tests.runner.helpers import Recorder, make_card, make_requests
from workers.runner.determinism import probe_determinism
from workers.runner.errors import ImageNotPinned
from workers.runner.forward import DriverLimits, TaskOutcome, derive_seed, drive_task
from workers.runner.podman import PodmanBackend, PodmanSealedProcess
from workers.runner.port import SealedSpec
from workers.runner.slots import CpuSlots

pytestmark = [pytest.mark.podman, pytest.mark.usefixtures("no_leftovers")]

SMALL = HardwareClass("test-1c-128m", cpus=1, memory_mb=128, pids=64, tmpfs_mb=16)
_names = itertools.count()


def new_spec(image: str, artifact_dir: Path | None = None, **kw: Any) -> SealedSpec:
    return SealedSpec(name=f"{PREFIX}{next(_names)}", image=image, hardware=SMALL, cpuset="0",
                      artifact_dir=artifact_dir, max_lifetime_s=60, **kw)


def run_image(
    backend: PodmanBackend, image: str, artifact_dir: Path, card: TaskCard | None = None,
    limits: DriverLimits | None = None,
) -> tuple[TaskOutcome, Recorder]:
    card = card or make_card(windows=5, startup_s=5, wall_clock_s=5)
    backend.ensure_image(image)
    recorder = Recorder()
    outcome = drive_task(backend.start(new_spec(image, artifact_dir)), card=card,
                         requests=make_requests(card), seed=derive_seed(card.source_snapshot_id),
                         run_id="run-podman", on_record=recorder, limits=limits)
    return outcome, recorder


def means(recorder: Recorder) -> set[float]:
    return {v for r in recorder.records for f in r["answer"]["forecasts"] for v in f["mean"]}


def test_seasonal_naive_completes_with_the_baselines_numbers(
    podman_backend: PodmanBackend, podman_images: Images, artifact_dir: Path
) -> None:
    card = make_card(windows=4, horizon=6)
    requests = make_requests(card)
    outcome, recorder = run_image(podman_backend, podman_images["seasonal-naive"], artifact_dir,
                                  card)
    assert outcome.status == "completed", outcome.detail
    assert outcome.exit_code == 0 and not outcome.killed_by_platform
    assert outcome.per_call_memory and outcome.memory_peak_mb is not None
    for record, request in zip(recorder.records, requests, strict=True):
        assert record["status"] == "ok" and record["memory_mb"] > 0
        assert 0 < record["runtime_ms"] < card.resource_budget.latency_ms
        for forecast, series in zip(record["answer"]["forecasts"], request.series, strict=True):
            mean, quantiles = seasonal_naive(series.target, card.horizon, card.seasonality,
                                             card.quantile_levels)
            assert forecast == {"item_id": series.item_id, "mean": mean, "quantiles": quantiles}


HOSTILE: list[tuple[str, str, dict[str, Any]]] = [
    ("oom", "oom", {}),
    ("forkbomb", "completed", {}),
    ("spin", "timeout", {"wall_clock_s": 2.5}),
    ("never-ready", "startup_timeout", {"startup_s": 1.5}),
    ("garbage", "protocol_error", {}),
    ("giant-line", "protocol_error", {}),
    ("flood", "protocol_error", {}),
    ("exit-midrun", "container_crashed", {}),
    ("wrong-shape", "invalid_predictions", {}),
    ("sleep20", "latency_budget_exceeded", {"latency_ms": 10}),
]


@pytest.mark.parametrize(("image", "status", "card_kw"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_image_ends_in_its_state(
    podman_backend: PodmanBackend, podman_images: Images, artifact_dir: Path,
    image: str, status: str, card_kw: dict[str, Any],
) -> None:
    card = make_card(**{"windows": 5, "startup_s": 5, "wall_clock_s": 5, **card_kw})
    started = time.monotonic()
    outcome, recorder = run_image(podman_backend, podman_images[image], artifact_dir, card)
    assert outcome.status == status, outcome.detail
    assert time.monotonic() - started < card.resource_budget.wall_clock_s + 5
    if image == "oom":
        assert outcome.exit_code == 137 and not outcome.killed_by_platform
        assert outcome.oom_observed is True
    if image == "forkbomb":
        stderr = Path(outcome.stderr_path or "").read_text()
        assert "fork refused" in stderr
        refused_after = int(stderr.split("fork refused after ")[1].split()[0])
        assert refused_after < SMALL.pids
    if image == "exit-midrun":
        assert recorder.statuses == ["ok", "ok", "invalid"] and outcome.exit_code == 3
    if image == "wrong-shape":
        assert recorder.statuses == ["invalid"] * 5
    if image == "giant-line":
        assert outcome.stdout_bytes < 4 * 1024 * 1024  # never buffered the 64 MiB line


@pytest.mark.parametrize("image", ["net-escape", "write-outside", "label-hunter"])
def test_the_sandbox_holds(
    podman_backend: PodmanBackend, podman_images: Images, artifact_dir: Path, image: str
) -> None:
    # Each image reports, as its forecast mean, how many escapes / writes / findings it managed.
    outcome, recorder = run_image(podman_backend, podman_images[image], artifact_dir)
    assert outcome.status == "completed", outcome.detail
    assert means(recorder) == {0.0}
    stderr = Path(outcome.stderr_path or "").read_text()
    if image == "net-escape":
        assert "ESCAPE" not in stderr and "127.0.0.1:5000 failed" in stderr
    if image == "write-outside":
        assert "write /artifact: refused" in stderr and "write /tmp: WRITTEN" in stderr


def test_the_next_submission_is_unaffected(
    podman_backend: PodmanBackend, podman_images: Images, artifact_dir: Path
) -> None:
    outcome, _ = run_image(podman_backend, podman_images["echo-fast"], artifact_dir)
    assert outcome.status == "completed"


def test_images_run_by_digest_only(podman_backend: PodmanBackend, podman_images: Images) -> None:
    pinned = podman_images["echo-fast"]
    record = podman_backend.ensure_image(pinned)
    assert record.ref == pinned and record.manifest_digest == pinned.split("@")[1]
    assert record.config_digest == f"sha256:{record.image_id}"
    assert record.size_bytes is not None and record.size_bytes > 0
    assert podman_backend.ensure_image(pinned) == record
    tagged = pinned.split("@")[0] + ":latest"
    with pytest.raises(ImageNotPinned):
        podman_backend.ensure_image(tagged)
    with pytest.raises(ImageNotPinned):
        podman_backend.start(new_spec(tagged))


def _handshake(proc: PodmanSealedProcess) -> None:
    proc.stdin.write(b'{"type":"hello","protocol":"future-ts-forward/1","seed":1,"task":{}}\n')
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline()) == {"type": "ready"}


def _inspect(name: str) -> dict[str, Any]:
    out = subprocess.run(["podman", "inspect", name], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout)[0])


def test_concurrent_runs_get_disjoint_cpusets_and_the_sealed_config(
    podman_backend: PodmanBackend, podman_images: Images, tmp_path: Path
) -> None:
    image = podman_images["echo-fast"]
    podman_backend.ensure_image(image)
    slots = CpuSlots([0, 1], tmp_path / "cpus")
    leases = [slots.acquire(SMALL, f"run-{i}") for i in range(2)]
    specs = [SealedSpec(name=f"{PREFIX}cpu-{i}", image=image, hardware=SMALL,
                        cpuset=lease.cpuset, memory_mb=96) for i, lease in enumerate(leases)]
    procs = [podman_backend.start(spec) for spec in specs]
    try:
        for proc in procs:
            _handshake(proc)
        allowed = []
        for proc in procs:
            pid = proc.container_pid()
            assert pid is not None
            status = Path(f"/proc/{pid}/status").read_text()
            allowed.append(status.split("Cpus_allowed_list:")[1].split()[0])
        assert sorted(allowed) == ["0", "1"]
        host = _inspect(specs[0].name)["HostConfig"]
        assert host["Memory"] == 96 * 1024 * 1024 and host["MemorySwap"] == host["Memory"]
        assert host["PidsLimit"] == SMALL.pids and host["CpusetCpus"] == specs[0].cpuset
        assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none"
        assert host["NanoCpus"] == SMALL.cpus * 10**9
        assert "no-new-privileges" in host["SecurityOpt"]
        assert _inspect(specs[0].name)["Config"]["User"] == "65534:65534"
    finally:
        for proc in procs:
            proc.close()
        for lease in leases:
            lease.release()
    config = podman_backend.sealed_config(specs[0])
    assert config["limits"]["memory_bytes"] == config["limits"]["memory_swap_bytes"]
    assert "--network=none" in config["flags"] and "--cap-drop=ALL" in config["flags"]
    digest = podman_backend.sealed_config_digest(specs[0])
    assert digest == podman_backend.sealed_config_digest(specs[0]) and digest.startswith("sha256:")
    assert digest != podman_backend.sealed_config_digest(specs[1])  # another cpuset


def test_a_dead_workers_container_is_reaped(
    podman_backend: PodmanBackend, podman_images: Images, tmp_path: Path
) -> None:
    image = podman_images["never-ready"]
    podman_backend.ensure_image(image)
    name = f"{PREFIX}orphan"
    worker = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from app.hardware import HardwareClass
        from workers.runner.podman import PodmanBackend
        from workers.runner.port import SealedSpec
        backend = PodmanBackend(state_dir=Path({str(tmp_path / "other-worker")!r}),
                                containers_conf=Path({str(REPO / ".ci" / "containers.conf")!r}))
        proc = backend.start(SealedSpec(name={name!r}, image={image!r}, cpuset="0",
            hardware=HardwareClass("c", cpus=1, memory_mb=64, pids=16)))
        proc.stdin.write(b'{{"type":"hello"}}\\n'); proc.stdin.flush()
        while proc.container_pid() is None: time.sleep(0.05)
        print("started", flush=True)
        time.sleep(120)
    """)
    dead = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    try:
        assert dead.stdout is not None and dead.stdout.readline().strip() == "started"
        # A live owner (even another worker with its own state dir) keeps its container.
        assert podman_backend.cleanup_orphans(PREFIX) == []
        dead.kill()
        dead.wait()
        assert name in podman_backend.list_containers(PREFIX)  # conmon keeps it running
        assert podman_backend.cleanup_orphans(PREFIX) == [name]
    finally:
        dead.kill()
        dead.wait()
        podman_backend.remove(name)


def test_determinism_probe(
    podman_backend: PodmanBackend, podman_images: Images, artifact_dir: Path
) -> None:
    card = make_card(windows=4)
    requests = make_requests(card)
    seed = derive_seed(card.source_snapshot_id)
    for image, expected in (("seasonal-naive", True), ("nondeterministic", False)):
        ref = podman_images[image]
        main, recorder = run_image(podman_backend, ref, artifact_dir, card)
        assert main.status == "completed"
        def fresh(ref: str = ref) -> SealedSpec:
            return new_spec(ref, artifact_dir)

        probe = probe_determinism(
            podman_backend, fresh, card, requests, seed,
            n_windows=2, reference_records=recorder.records, run_id="run-podman",
        )
        assert probe.deterministic is expected and probe.conclusive
        assert probe.compared_windows == ["w0", "w1"]
        assert bool(probe.mismatched_windows) is not expected
