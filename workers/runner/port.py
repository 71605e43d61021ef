"""The runner backend port: how the pipeline starts, talks to and removes a sealed model.

Implementations: ``PodmanBackend`` (production on one host, ``hosted_sealed``),
``KubernetesBackend`` (a Job per task; needs a cluster) and the dev-only ``ProcessBackend``
(``local_sealed_mvp``: a command in a network namespace and a cgroup, no image).

Life of one task attempt::

    record = backend.ensure_image(pinned_ref)          # pull by digest, once per run
    spec = SealedSpec(name=container_name(run_id, task_id, attempt), image=pinned_ref, ...)
    config, digest = backend.sealed_config(spec), backend.sealed_config_digest(spec)
    proc = backend.start(spec)                          # then forward.drive_task(proc, ...)
    ...                                                 # drive_task always closes proc

A worker calls ``backend.cleanup_orphans()`` when it starts (and a reaper calls it periodically):
it removes every container of ours that no live process owns, e.g. after a worker was SIGKILLed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import rfc8785

from app.hardware import HardwareClass
from workers.runner.errors import ImageNotPinned

OperationalLevel = Literal["hosted_sealed", "local_sealed_mvp"]
CONTAINER_PREFIX = "fts-"
SANDBOX_USER = "65534:65534"
_PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")
_NAME_MAX = 120


def require_pinned(image: str) -> str:
    """Return ``image`` when it names a manifest digest; raise ``ImageNotPinned`` otherwise."""
    if not _PINNED.match(image):
        raise ImageNotPinned(f"image {image!r} is not pinned: use <name>@sha256:<64 hex>")
    return image


def image_digest(image: str) -> str:
    """``sha256:<hex>`` of a pinned reference."""
    return require_pinned(image).rsplit("@", 1)[1]


def container_name(run_id: str, task_id: str, attempt: int, prefix: str = CONTAINER_PREFIX) -> str:
    """``fts-<run_id>-<task_id>-<attempt>``, made safe for podman and Kubernetes-ish names.

    Characters outside ``[a-zA-Z0-9_.-]`` become ``_``; a name that had to be shortened or changed
    gets a short hash of the original so two tasks never collide.
    """
    raw = f"{run_id}-{task_id}-{attempt}"
    safe = _NAME_UNSAFE.sub("_", raw)
    if safe != raw or len(prefix) + len(safe) > _NAME_MAX:
        tag = hashlib.sha256(raw.encode()).hexdigest()[:10]
        safe = f"{safe[: _NAME_MAX - len(prefix) - 11]}-{tag}"
    return f"{prefix}{safe}"


def config_digest(config: dict[str, Any]) -> str:
    """``sha256:<hex>`` over the RFC 8785 (JCS) canonical JSON of a sealed configuration."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(config)).hexdigest()


@dataclass(frozen=True)
class ImageRecord:
    """What was actually pulled: the container digest record archived with a run."""

    ref: str  # name@sha256:<manifest digest>, exactly as run
    manifest_digest: str
    config_digest: str | None
    image_id: str | None
    size_bytes: int | None
    backend: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "manifest_digest": self.manifest_digest,
            "config_digest": self.config_digest,
            "image_id": self.image_id,
            "size_bytes": self.size_bytes,
            "backend": self.backend,
        }


@dataclass(frozen=True)
class SealedSpec:
    """Everything needed to start one sealed model for one task attempt.

    ``memory_mb`` is the task's memory budget; the limit applied is the smaller of it and the
    hardware class's memory (swap is always equal to memory, i.e. none). ``max_lifetime_s`` is a
    backstop enforced by the runtime itself, so a container dies even if its worker is killed.
    ``artifact_dir`` and ``retrieval_dir`` are mounted read-only and must be readable by the
    sandbox user 65534 (directories ``o+rx``, files ``o+r``).
    """

    name: str
    image: str
    hardware: HardwareClass
    cpuset: str
    artifact_dir: Path | None = None
    retrieval_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    memory_mb: int | None = None
    max_lifetime_s: float | None = None

    @property
    def memory_limit_mb(self) -> int:
        if self.memory_mb is None:
            return self.hardware.memory_mb
        return min(self.memory_mb, self.hardware.memory_mb)

    @property
    def memory_limit_bytes(self) -> int:
        return self.memory_limit_mb * 1024 * 1024


class SealedProcess(Protocol):
    """A started sealed model: JSON-lines pipes plus the platform's view of its resources.

    Exit codes follow container conventions: ``128 + signal`` for a signalled death, so
    ``137`` is SIGKILL (an OOM kill, or ours: see ``killed_by_platform``).
    """

    @property
    def name(self) -> str:
        """The container (or sandbox) name; unique per task attempt."""
        ...

    @property
    def stdin(self) -> IO[bytes]:
        """Runner → model pipe. The driver writes to its descriptor non-blocking."""
        ...

    @property
    def stdout(self) -> IO[bytes]:
        """Model → runner pipe. The driver reads its descriptor non-blocking."""
        ...

    @property
    def stderr_path(self) -> Path | None:
        """File holding the model's stderr, capped; ``None`` when not captured."""
        ...

    @property
    def started_ns(self) -> int:
        """``time.perf_counter_ns()`` just before the runtime was asked to start the model."""
        ...

    @property
    def killed_by_platform(self) -> bool:
        """``True`` once ``kill()`` was called while the model was still running."""
        ...

    @property
    def exit_code(self) -> int | None:
        """The exit code once the model has exited, else ``None``."""
        ...

    def memory_bytes(self) -> int | None:
        """Memory charged to the model now (cgroup), or ``None`` if not measurable."""
        ...

    def memory_peak_bytes(self) -> int | None:
        """Peak memory since start or since the last successful ``reset_peak()``."""
        ...

    def reset_peak(self) -> bool:
        """Start a new peak window (so one call's peak is measurable); ``False`` if impossible."""
        ...

    def oom_observed(self) -> bool | None:
        """Whether the kernel OOM-killed inside the sandbox; ``None`` when unknowable."""
        ...

    def runtime_error(self) -> str | None:
        """Why the runtime (not the model) failed to run it, e.g. podman exit 125; else ``None``."""
        ...

    def poll(self) -> int | None:
        """The exit code if the model has exited, without waiting."""
        ...

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds for exit; the exit code, or ``None`` if still running."""
        ...

    def kill(self) -> None:
        """SIGKILL the model (all of it). Marks ``killed_by_platform`` if it was running."""
        ...

    def close(self) -> None:
        """Kill if running, then remove the container and release every resource. Idempotent."""
        ...


class RunnerBackend(Protocol):
    """Starts sealed models. One instance per worker process; methods are thread-safe."""

    name: str
    operational_level: OperationalLevel

    def ensure_image(self, image: str) -> ImageRecord:
        """Make ``image`` (``name@sha256:...``) runnable here, pulling it BY DIGEST only.

        Raises ``ImageNotPinned`` for a reference without a digest and ``ImagePullFailed`` when the
        registry cannot deliver exactly that digest.
        """
        ...

    def start(self, spec: SealedSpec) -> SealedProcess:
        """Start the model sealed per ``spec``; stdin/stdout are connected before it returns.

        Raises ``ContainerStartFailed`` when the runtime refuses, ``BackendUnavailable`` when the
        backend cannot run anything here.
        """
        ...

    def remove(self, name: str) -> None:
        """Kill and remove the container ``name``; a missing container is not an error."""
        ...

    def cleanup_orphans(self, prefix: str = CONTAINER_PREFIX) -> list[str]:
        """Remove every container named ``prefix*`` that no live run owns; return their names."""
        ...

    def sealed_config(self, spec: SealedSpec) -> dict[str, Any]:
        """The exact sealed configuration (all isolation flags and limits) ``start`` applies."""
        ...

    def sealed_config_digest(self, spec: SealedSpec) -> str:
        """``sha256:<hex>`` of ``sealed_config(spec)`` in JCS canonical JSON."""
        ...
