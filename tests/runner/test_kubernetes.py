"""Kubernetes backend: the Job and NetworkPolicy manifests, checked statically."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.hardware import HardwareClass
from workers.runner.errors import BackendUnavailable, ImageNotPinned
from workers.runner.kubernetes import NO_CLUSTER, KubernetesBackend
from workers.runner.port import SealedSpec

IMAGE = "registry.example/future-ts/model@sha256:" + "c" * 64
HW = HardwareClass("cpu-2c-4g", cpus=2, memory_mb=4096, pids=256, tmpfs_mb=64)


def spec(**kw: object) -> SealedSpec:
    base: dict[str, object] = dict(name="fts-Run_1-task.a-0", image=IMAGE, hardware=HW,
                                   cpuset="0-1", artifact_dir=Path("/srv/artifacts/run1"),
                                   env={"FUTURE_TS_SEED": "42"}, memory_mb=2048,
                                   max_lifetime_s=600.5)
    base.update(kw)
    return SealedSpec(**base)  # type: ignore[arg-type]


def test_job_is_sealed() -> None:
    backend = KubernetesBackend(runtime_class="gvisor", node_selector={"cpu-class": "c2"})
    job = backend.job_manifest(spec())
    assert job["kind"] == "Job" and job["metadata"]["name"] == "fts-run-1-task-a-0"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 601
    pod = job["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "gvisor" and pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["hostNetwork"] is False and pod["nodeSelector"] == {"cpu-class": "c2"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["image"] == IMAGE and container["stdin"] and container["stdinOnce"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS
    assert resources["limits"]["cpu"] == "2" and resources["limits"]["memory"] == "2048Mi"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/artifact"]["readOnly"] is True and "readOnly" not in mounts["/tmp"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert container["env"] == [{"name": "FUTURE_TS_SEED", "value": "42"}]


def test_network_policy_denies_everything() -> None:
    policy = KubernetesBackend(namespace="sealed").network_policy_manifest()
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["namespace"] == "sealed"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [] and policy["spec"]["egress"] == []


def test_config_digest_is_stable_and_sensitive() -> None:
    backend = KubernetesBackend()
    assert backend.sealed_config_digest(spec()) == backend.sealed_config_digest(spec())
    assert backend.sealed_config_digest(spec()) != backend.sealed_config_digest(spec(memory_mb=1))


def test_unpinned_image_is_refused() -> None:
    with pytest.raises(ImageNotPinned):
        KubernetesBackend().job_manifest(spec(image="registry.example/model:latest"))
    with pytest.raises(ImageNotPinned):
        KubernetesBackend().ensure_image("registry.example/model:latest")


def test_start_without_a_cluster_says_so(tmp_path: Path) -> None:
    backend = KubernetesBackend(kubectl=str(tmp_path / "no-kubectl"))
    with pytest.raises(BackendUnavailable, match=NO_CLUSTER):
        backend.start(spec())
