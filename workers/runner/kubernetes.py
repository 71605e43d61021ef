"""``KubernetesBackend``: a Job per task attempt (the seed's Stage 2). Needs a cluster.

What is real here: the manifests. ``job_manifest`` renders a Job whose pod is sealed the way the
cluster can enforce it — ``automountServiceAccountToken: false``, ``enableServiceLinks: false``,
non-root user 65534, read-only root, every capability dropped, ``RuntimeDefault`` seccomp, no
privilege escalation, requests == limits with whole CPUs (Guaranteed QoS, so the kubelet's static
CPU manager pins exclusive cores), a memory-backed ``emptyDir`` for ``/tmp``, the image by digest,
``backoffLimit: 0`` and ``activeDeadlineSeconds`` as the wall-clock backstop, an optional
``runtimeClassName`` (gVisor, Kata). ``network_policy_manifest`` is the namespace's deny-all
policy (no ingress, no egress; only effective with a CNI that enforces NetworkPolicy).

What is honest about the rest: no cluster is configured in this deployment, so ``start`` raises
``BackendUnavailable`` unless ``kubectl`` and a current context exist. With them, the model's
stdin/stdout are reached with ``kubectl attach -i`` (the container is created with
``stdin``/``stdinOnce``); per-call memory is not measurable from outside (``memory_mb`` is
``None``). This path is not exercised by the test suite.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.settings import process_environment
from workers.runner.child import PopenSealedProcess, spawn
from workers.runner.errors import BackendUnavailable, ContainerStartFailed, RunnerError
from workers.runner.port import (
    CONTAINER_PREFIX,
    ImageRecord,
    OperationalLevel,
    SealedSpec,
    config_digest,
    image_digest,
    require_pinned,
)

RUNNER_LABEL = "future-ts.runner"
NO_CLUSTER = "kubernetes backend: no cluster configured in this deployment"
_POD_WAIT_S = 300.0


def _k8s_name(name: str) -> str:
    """Kubernetes object names are DNS-1123 labels: lowercase alphanumerics and '-'."""
    safe = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    return safe[:63].rstrip("-")


class KubernetesBackend:
    """Renders sealed Jobs; runs them only where a cluster is configured."""

    name = "kubernetes"
    operational_level: OperationalLevel = "hosted_sealed"

    def __init__(
        self,
        *,
        namespace: str = "future-ts-sealed",
        runtime_class: str | None = None,
        kubectl: str = "kubectl",
        node_selector: Mapping[str, str] | None = None,
        stderr_dir: Path | None = None,
        stderr_cap_bytes: int = 1024 * 1024,
    ) -> None:
        self.namespace = namespace
        self.runtime_class = runtime_class
        self.kubectl = kubectl
        self.node_selector = dict(node_selector or {})
        self.stderr_dir = stderr_dir
        self.stderr_cap_bytes = stderr_cap_bytes
        self._env = process_environment()

    # -- manifests ------------------------------------------------------------------------------

    def _container(self, spec: SealedSpec) -> dict[str, Any]:
        hw = spec.hardware
        resources = {"cpu": str(hw.cpus), "memory": f"{spec.memory_limit_mb}Mi",
                     "ephemeral-storage": f"{hw.tmpfs_mb}Mi"}
        mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]  # noqa: S108 - the sandbox's own tmpfs
        if spec.artifact_dir is not None:
            mounts.append({"name": "artifact", "mountPath": "/artifact", "readOnly": True})
        if spec.retrieval_dir is not None:
            mounts.append({"name": "retrieval", "mountPath": "/retrieval", "readOnly": True})
        return {
            "name": "model",
            "image": require_pinned(spec.image),
            "imagePullPolicy": "IfNotPresent",
            "stdin": True,
            "stdinOnce": True,
            "tty": False,
            "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False,
                "privileged": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumeMounts": mounts,
        }

    def _volumes(self, spec: SealedSpec) -> list[dict[str, Any]]:
        volumes: list[dict[str, Any]] = [
            {"name": "tmp", "emptyDir": {"medium": "Memory",
                                         "sizeLimit": f"{spec.hardware.tmpfs_mb}Mi"}}
        ]
        # The artifact and retrieval snapshot reach the node as read-only volumes; which kind
        # (CSI, PVC, hostPath on dedicated nodes) is deployment configuration.
        if spec.artifact_dir is not None:
            volumes.append({"name": "artifact", "hostPath": {"path": str(spec.artifact_dir),
                                                             "type": "Directory"}})
        if spec.retrieval_dir is not None:
            volumes.append({"name": "retrieval", "hostPath": {"path": str(spec.retrieval_dir),
                                                              "type": "Directory"}})
        return volumes

    def job_manifest(self, spec: SealedSpec) -> dict[str, Any]:
        """The Job (batch/v1) that runs one sealed task attempt."""
        labels = {RUNNER_LABEL: "1", "future-ts.name": _k8s_name(spec.name)}
        labels.update({k: _k8s_name(v) for k, v in spec.labels.items()})
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "fsGroup": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [self._container(spec)],
            "volumes": self._volumes(spec),
        }
        if self.runtime_class:
            pod_spec["runtimeClassName"] = self.runtime_class
        if self.node_selector:
            pod_spec["nodeSelector"] = dict(self.node_selector)
        job_spec: dict[str, Any] = {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        }
        if spec.max_lifetime_s is not None:
            job_spec["activeDeadlineSeconds"] = max(1, int(spec.max_lifetime_s + 0.999))
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": _k8s_name(spec.name), "namespace": self.namespace,
                         "labels": labels},
            "spec": job_spec,
        }

    def network_policy_manifest(self) -> dict[str, Any]:
        """Deny all ingress and egress for sealed pods in the namespace."""
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "future-ts-sealed-deny-all", "namespace": self.namespace},
            "spec": {"podSelector": {"matchLabels": {RUNNER_LABEL: "1"}},
                     "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []},
        }

    def sealed_config(self, spec: SealedSpec) -> dict[str, Any]:
        job = self.job_manifest(spec)
        pod = job["spec"]["template"]["spec"]
        return {
            "schema": "future-ts/sealed-config/1",
            "backend": self.name,
            "operational_level": self.operational_level,
            "image": require_pinned(spec.image),
            "cpuset": "static CPU manager (Guaranteed QoS, integer CPUs)",
            "pod": {k: v for k, v in pod.items() if k != "volumes"},
            "network_policy": self.network_policy_manifest()["spec"],
            "active_deadline_s": job["spec"].get("activeDeadlineSeconds"),
        }

    def sealed_config_digest(self, spec: SealedSpec) -> str:
        return config_digest(self.sealed_config(spec))

    # -- cluster operations ---------------------------------------------------------------------

    def _kubectl(self, args: list[str], stdin: str | None = None,
                 timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.kubectl, *args], input=stdin, capture_output=True, text=True,
                              env=self._env, timeout=timeout_s, check=False)

    def available(self) -> bool:
        """``kubectl`` exists and has a current context."""
        if shutil.which(self.kubectl) is None:
            return False
        try:
            return self._kubectl(["config", "current-context"], timeout_s=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _require_cluster(self) -> None:
        if not self.available():
            raise BackendUnavailable(NO_CLUSTER)

    def ensure_image(self, image: str) -> ImageRecord:
        """Nodes pull the image themselves; only the pinned digest is known here."""
        ref = require_pinned(image)
        return ImageRecord(ref=ref, manifest_digest=image_digest(ref), config_digest=None,
                           image_id=None, size_bytes=None, backend=self.name)

    def start(self, spec: SealedSpec) -> PopenSealedProcess:
        self._require_cluster()
        job = self.job_manifest(spec)
        name = job["metadata"]["name"]
        applied = self._kubectl(["apply", "-f", "-"], stdin=json.dumps(job))
        if applied.returncode != 0:
            raise ContainerStartFailed(f"kubectl apply {name}: {applied.stderr.strip()}")
        pod = self._wait_for_pod(name)
        argv = [self.kubectl, "attach", "-i", "-n", self.namespace, "-c", "model", f"pod/{pod}"]
        popen, started_ns = spawn(argv, env=self._env)
        stderr = (self.stderr_dir / f"{spec.name}.log") if self.stderr_dir is not None else None
        return _KubernetesProcess(self, name, spec.name, popen, started_ns=started_ns,
                                  stderr_path=stderr, stderr_cap=self.stderr_cap_bytes)

    def _wait_for_pod(self, job: str) -> str:
        deadline = time.monotonic() + _POD_WAIT_S
        while time.monotonic() < deadline:
            got = self._kubectl(["get", "pods", "-n", self.namespace, "-l", f"job-name={job}",
                                 "-o", "jsonpath={.items[0].metadata.name} "
                                       "{.items[0].status.phase}"])
            name, _, phase = got.stdout.strip().partition(" ")
            if name and phase == "Running":
                return name
            if phase in ("Failed", "Succeeded"):
                raise ContainerStartFailed(f"job {job} pod ended ({phase}) before attach")
            time.sleep(0.5)
        raise ContainerStartFailed(f"job {job} has no running pod after {_POD_WAIT_S} s")

    def remove(self, name: str) -> None:
        self._require_cluster()
        done = self._kubectl(["delete", "job", _k8s_name(name), "-n", self.namespace,
                              "--ignore-not-found", "--wait=false",
                              "--grace-period=0", "--cascade=background"])
        if done.returncode != 0:
            raise RunnerError(f"kubectl delete job {name}: {done.stderr.strip()}")

    def cleanup_orphans(self, prefix: str = CONTAINER_PREFIX) -> list[str]:
        """Finished or abandoned Jobs of ours; live ones are left (their deadline ends them)."""
        self._require_cluster()
        got = self._kubectl(["get", "jobs", "-n", self.namespace, "-l", f"{RUNNER_LABEL}=1",
                             "-o", "json"])
        if got.returncode != 0:
            raise RunnerError(f"kubectl get jobs: {got.stderr.strip()}")
        removed = []
        for item in json.loads(got.stdout).get("items", []):
            name = item["metadata"]["name"]
            done = item.get("status", {}).get("completionTime") or item.get("status", {}).get(
                "failed")
            if name.startswith(_k8s_name(prefix)) and done:
                self.remove(name)
                removed.append(name)
        return removed


class _KubernetesProcess(PopenSealedProcess):
    """``kubectl attach`` to the Job's pod; kill and close delete the Job."""

    def __init__(self, backend: KubernetesBackend, job: str, *args: Any, **kwargs: Any) -> None:
        self._backend = backend
        self._job = job
        super().__init__(*args, **kwargs)

    def _kill_model(self) -> None:
        with contextlib.suppress(RunnerError, BackendUnavailable):
            self._backend.remove(self._job)
        super()._kill_model()

    def _release(self) -> None:
        with contextlib.suppress(RunnerError, BackendUnavailable):
            self._backend.remove(self._job)
