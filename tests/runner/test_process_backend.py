"""The dev-only process backend: network namespace, its own cgroup, memory and OOM, cleanup."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.hardware import HardwareClass
from app.warnings import DevOnlyWarning
from tests.runner.helpers import FAKE_MODEL, Recorder, make_card, make_requests
from workers.runner.forward import drive_task
from workers.runner.port import SealedSpec
from workers.runner.process import CGROUP_PARENT, CGROUP_ROOT, ProcessBackend

HW = HardwareClass("cpu-1c-test", cpus=1, memory_mb=96, pids=32)


@pytest.fixture
def backend(tmp_path: Path) -> ProcessBackend:
    with pytest.warns(DevOnlyWarning):
        return ProcessBackend(state_dir=tmp_path / "state")


def spec_for(mode: str, arg: str = "", name: str = "fts-ptest-0") -> SealedSpec:
    return SealedSpec(name=name, image=f"process:{sys.executable} -I -u {FAKE_MODEL} {mode} {arg}",
                      hardware=HW, cpuset="0")


def drive(backend: ProcessBackend, mode: str, arg: str = "") -> tuple[str, Recorder, object]:
    card = make_card(windows=4, startup_s=5)
    recorder = Recorder()
    outcome = drive_task(backend.start(spec_for(mode, arg)), card=card,
                         requests=make_requests(card), seed=3, run_id="r", on_record=recorder)
    return outcome.status, recorder, outcome


def test_it_is_the_mvp_level(backend: ProcessBackend) -> None:
    assert backend.operational_level == "local_sealed_mvp" and backend.name == "process"
    record = backend.ensure_image(spec_for("ok").image)
    assert record.manifest_digest.startswith("sha256:") and record.backend == "process"
    config = backend.sealed_config(spec_for("ok"))
    assert config["isolation"]["network"] == "netns"
    assert backend.sealed_config_digest(spec_for("ok")) == backend.sealed_config_digest(
        spec_for("ok"))


def test_completes_with_memory_per_call(backend: ProcessBackend) -> None:
    status, recorder, _outcome = drive(backend, "ok")
    assert status == "completed"
    assert all(r["memory_mb"] is not None and r["memory_mb"] > 0 for r in recorder.records)


def test_no_network(backend: ProcessBackend) -> None:
    # The fake tries 127.0.0.1:6379 (Redis on this host); mean is 1.0 if it connected.
    status, recorder, _ = drive(backend, "net")
    assert status == "completed"
    assert all(r["answer"]["forecasts"][0]["mean"][0] == 0.0 for r in recorder.records)


@pytest.mark.skipif(not os.access(CGROUP_ROOT / "memory", os.W_OK),
                    reason="needs a writable cgroup v1 memory hierarchy (root on this host)")
def test_memory_limit_is_an_oom(backend: ProcessBackend) -> None:
    status, recorder, outcome = drive(backend, "alloc", "40")  # 40, 80, then over 96 MiB
    assert status == "oom", getattr(outcome, "detail", "")
    assert getattr(outcome, "oom_observed", None) is True
    assert recorder.statuses[-1] == "invalid"
    assert not (CGROUP_ROOT / "memory" / CGROUP_PARENT / "fts-ptest-0").exists()


def test_a_live_run_is_not_an_orphan(backend: ProcessBackend) -> None:
    proc = backend.start(spec_for("hang", name="fts-ptest-live"))
    assert backend.cleanup_orphans("fts-ptest-") == []  # owned by this live process
    proc.close()
    assert backend.cleanup_orphans("fts-ptest-") == []


@pytest.mark.skipif(not os.access(CGROUP_ROOT / "pids", os.W_OK),
                    reason="needs a writable cgroup v1 hierarchy (root on this host)")
def test_a_dead_workers_sandbox_is_reaped(backend: ProcessBackend, tmp_path: Path) -> None:
    worker = textwrap.dedent(f"""
        import sys, time, warnings
        from pathlib import Path
        warnings.simplefilter("ignore")
        from app.hardware import HardwareClass
        from workers.runner.port import SealedSpec
        from workers.runner.process import ProcessBackend
        backend = ProcessBackend(state_dir=Path({str(tmp_path / "state")!r}))
        proc = backend.start(SealedSpec(name="fts-ptest-orphan", hardware=HardwareClass(
            "c", cpus=1, memory_mb=64, pids=16), cpuset="0",
            image="process:{sys.executable} -I -u {FAKE_MODEL} hang"))
        print(proc.pid, flush=True)
        time.sleep(60)
    """)
    dead = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert dead.stdout is not None
    model_pid = int(dead.stdout.readline())
    dead.kill()
    dead.wait()
    assert Path(f"/proc/{model_pid}").exists()  # the worker died; its model did not
    assert backend.cleanup_orphans("fts-ptest-") == ["fts-ptest-orphan"]
    for _ in range(100):
        if not Path(f"/proc/{model_pid}").exists() or "Z" in _state(model_pid):
            break
        time.sleep(0.01)
    assert not Path(f"/proc/{model_pid}").exists() or "Z" in _state(model_pid)
    assert not (CGROUP_ROOT / "pids" / CGROUP_PARENT / "fts-ptest-orphan").exists()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return "gone"
