"""``PodmanBackend``: one sealed OCI container per task attempt, with podman and runc.

The sealing (``sealing_flags``) is what ``sealed_config`` records and digests:

* ``--network=none`` (loopback only), ``--read-only`` root with ``--read-only-tmpfs=false`` and one
  size-capped tmpfs on ``/tmp``; ``--ipc=none`` (no ``/dev/shm``); ``--no-hosts``;
  ``--image-volume=ignore`` (an image ``VOLUME`` would otherwise be a writable bind);
  ``--http-proxy=false`` (podman copies the host's proxy variables by default).
* ``--cap-drop=ALL``, ``no-new-privileges``, user ``65534:65534``, podman's default seccomp
  profile, a private cgroup namespace, ``--oom-score-adj=1000`` (host memory pressure hits the
  model first).
* ``--memory`` = ``--memory-swap`` (no swap), ``--cpus`` plus an exclusive ``--cpuset-cpus``,
  ``--pids-limit``, and explicit ulimits: this host's root lacks CAP_SYS_RESOURCE, and podman's
  default nofile/nproc exceed the hard limits (machine-notes 1a).
* ``--log-driver=passthrough``: conmon hands our pipes to the container as its stdin/stdout/stderr,
  so protocol lines travel straight between the model and the driver (no copy through conmon and
  the podman client: median harness overhead 0.05 ms instead of 0.15 ms) and nothing is logged to
  disk. ``log_driver="none"`` keeps the copying path. ``--timeout`` is a backstop that conmon
  enforces even when the worker is gone.

The runtime is passed explicitly (``--runtime runc`` by default: crun refuses this host's hybrid
cgroup layout). Images run only by digest, after ``ensure_image`` pulled them (``--pull=never``).
Killing the ``podman run`` client leaves the container running (it belongs to conmon), so every
container is named, owned through a lock file, and removed with ``podman rm -f -t 0`` on close;
``cleanup_orphans`` removes those whose owner died.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.settings import Settings, process_environment
from workers.runner.cgroup import MemoryProbe, locate_memory_cgroup, open_memory_probe
from workers.runner.child import OwnerLock, PopenSealedProcess, owned_by_live_process, spawn
from workers.runner.errors import (
    BackendUnavailable,
    ContainerStartFailed,
    ImagePullFailed,
    RunnerError,
)
from workers.runner.port import (
    CONTAINER_PREFIX,
    SANDBOX_USER,
    ImageRecord,
    OperationalLevel,
    SealedSpec,
    config_digest,
    image_digest,
    require_pinned,
)

log = logging.getLogger(__name__)

CONFIG_SCHEMA = "future-ts/sealed-config/1"
RUNNER_LABEL = "future-ts.runner"
LOCK_LABEL = "future-ts.owner-lock"  # the owner lock's path: any reaper on the host can check it
NOFILE = 1024
NPROC = 4096  # per-UID on the host, shared by every sandbox running as 65534: keep it roomy
_TAIL = 2000


def registry_host(image: str) -> str | None:
    """The registry part of a reference (``127.0.0.1:5000`` in ``127.0.0.1:5000/a/b@...``)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


class PodmanSealedProcess(PopenSealedProcess):
    """A ``podman run -i`` client; with the passthrough log driver its pipes ARE the
    container's stdin/stdout/stderr."""

    def __init__(
        self, backend: PodmanBackend, container_dir: Path, *args: Any, **kwargs: Any
    ) -> None:
        self._backend = backend
        self._dir = container_dir
        self._cid: str | None = None
        self._container_pid: int | None = None
        super().__init__(*args, memory_source=self._attach_memory, **kwargs)

    def _read_ids(self) -> int | None:
        if self._container_pid is None:
            with contextlib.suppress(OSError, ValueError):
                self._cid = (self._dir / "cid").read_text().strip() or None
                self._container_pid = int((self._dir / "pid").read_text().strip())
        return self._container_pid

    def container_pid(self) -> int | None:
        """The container's init process on the host, once the runtime has started it."""
        return self._read_ids()

    def _attach_memory(self) -> MemoryProbe | None:
        pid = self._read_ids()
        if pid is None:
            return None
        location = locate_memory_cgroup(pid)
        if location is None:
            return None
        return open_memory_probe(location)

    def _container_alive(self, pid: int) -> bool:
        """``pid`` is still this container's process (not a recycled pid)."""
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return False
        return self._cid is None or self._cid in text

    def _kill_model(self) -> None:
        pid = self._read_ids()
        if pid is not None and self._container_alive(pid):
            # Killing the container's pid 1 ends its whole pid namespace; no subprocess needed.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                return
        with contextlib.suppress(RunnerError):  # close() still removes it with podman rm -f
            self._backend.kill(self.name)

    def runtime_error(self) -> str | None:
        # podman exits 125 for its own failures; a container that started wrote its pid file.
        if self.exit_code != 125 or self._read_ids() is not None:
            return None
        if self._pump is not None:
            self._pump.join(1.0)
        return _tail(self.stderr_path) or "podman exited 125 before the container started"

    def _release(self) -> None:
        try:
            self._backend.remove(self.name)
        except RunnerError as exc:  # the reaper retries; never mask the run's own outcome
            log.error("could not remove container %s: %s", self.name, exc)
            return
        shutil.rmtree(self._dir, ignore_errors=True)  # our lock fd stays valid until released


def _tail(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL))
            return fh.read().decode(errors="replace").strip()
    except OSError:
        return ""


class PodmanBackend:
    """Production backend on one host: podman + runc, sealed per the task's hardware class."""

    name = "podman"
    operational_level: OperationalLevel = "hosted_sealed"

    def __init__(
        self,
        *,
        state_dir: Path,
        podman_path: str = "podman",
        runtime: str | None = "runc",
        containers_conf: Path | None = None,
        insecure_hosts: Sequence[str] = (),
        stderr_cap_bytes: int = 1024 * 1024,
        base_env: Mapping[str, str] | None = None,
        command_timeout_s: float = 60.0,
        pull_timeout_s: float = 900.0,
        log_driver: str = "passthrough",
    ) -> None:
        self.state_dir = state_dir
        self.log_driver = log_driver
        self.podman_path = podman_path
        self.runtime = runtime
        self.insecure_hosts = frozenset(insecure_hosts)
        self.stderr_cap_bytes = stderr_cap_bytes
        self.command_timeout_s = command_timeout_s
        self.pull_timeout_s = pull_timeout_s
        env = dict(process_environment() if base_env is None else base_env)
        if containers_conf is not None:
            env["CONTAINERS_CONF"] = str(containers_conf)
        self._env = env

    @classmethod
    def from_settings(cls, settings: Settings) -> PodmanBackend:
        return cls(
            state_dir=(settings.data_dir / "runner" / "podman").resolve(),
            podman_path=settings.podman_path,
            containers_conf=settings.containers_conf,
            insecure_hosts=settings.registry_insecure_hosts,
            stderr_cap_bytes=settings.stderr_cap_bytes,
        )

    # -- podman invocations ---------------------------------------------------------------------

    def _global_args(self) -> list[str]:
        args = [self.podman_path]
        if self.runtime:
            args += ["--runtime", self.runtime]
        return args

    def _podman(
        self, args: Sequence[str], timeout_s: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self._global_args(), *args],
                capture_output=True,
                text=True,
                env=self._env,
                timeout=timeout_s or self.command_timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise BackendUnavailable(f"podman not found at {self.podman_path!r}") from exc
        except subprocess.TimeoutExpired as exc:
            raise RunnerError(f"podman {' '.join(args[:2])} timed out") from exc

    def available(self) -> bool:
        """podman is installed and answers (used by the ``auto`` backend choice)."""
        if shutil.which(self.podman_path) is None:
            return False
        try:
            return self._podman(["version", "--format", "{{.Client.Version}}"], 15).returncode == 0
        except RunnerError:
            return False

    # -- images ---------------------------------------------------------------------------------

    def _tls_args(self, image: str) -> list[str]:
        host = registry_host(image)
        return ["--tls-verify=false"] if host is not None and host in self.insecure_hosts else []

    def ensure_image(self, image: str) -> ImageRecord:
        ref = require_pinned(image)
        digest = image_digest(ref)
        if self._podman(["image", "exists", ref]).returncode != 0:
            pulled = self._podman(["pull", "--quiet", *self._tls_args(ref), ref],
                                  self.pull_timeout_s)
            if pulled.returncode != 0:
                raise ImagePullFailed(f"pull of {ref} failed: {pulled.stderr.strip()[-_TAIL:]}")
        inspected = self._podman(["image", "inspect", ref])
        if inspected.returncode != 0:
            raise ImagePullFailed(f"inspect of {ref} failed: {inspected.stderr.strip()[-_TAIL:]}")
        info = json.loads(inspected.stdout)[0]
        repo_digests = [str(d) for d in info.get("RepoDigests") or []]
        if info.get("Digest") != digest and not any(d.endswith("@" + digest) for d in repo_digests):
            raise ImagePullFailed(f"local image for {ref} does not carry digest {digest}")
        image_id = str(info["Id"])
        return ImageRecord(
            ref=ref,
            manifest_digest=digest,
            config_digest=f"sha256:{image_id}",  # podman's image id is the config blob's digest
            image_id=image_id,
            size_bytes=int(info["Size"]) if info.get("Size") is not None else None,
            backend=self.name,
        )

    # -- sealing --------------------------------------------------------------------------------

    def sealing_flags(self, spec: SealedSpec) -> list[str]:
        """The isolation and limit flags, without names, host paths or labels."""
        if spec.hardware.gpu:
            raise BackendUnavailable(f"{spec.hardware.id}: GPU classes are not served here")
        memory = f"{spec.memory_limit_mb}m"
        flags = [
            "--network=none",
            "--no-hosts",
            "--http-proxy=false",
            "--ipc=none",
            "--cgroupns=private",
            "--hostname=sealed",
            "--read-only",
            "--read-only-tmpfs=false",
            f"--tmpfs=/tmp:rw,size={spec.hardware.tmpfs_mb}m,mode=1777,nosuid,nodev",
            "--image-volume=ignore",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            f"--user={SANDBOX_USER}",
            f"--memory={memory}",
            f"--memory-swap={memory}",
            "--oom-score-adj=1000",
            f"--cpus={spec.hardware.cpus}",
            f"--cpuset-cpus={spec.cpuset}",
            f"--pids-limit={spec.hardware.pids}",
            f"--ulimit=nofile={NOFILE}:{NOFILE}",
            f"--ulimit=nproc={NPROC}:{NPROC}",
            "--ulimit=core=0:0",
            f"--log-driver={self.log_driver}",
        ]
        if spec.max_lifetime_s is not None:
            flags.append(f"--timeout={max(1, math.ceil(spec.max_lifetime_s))}")
        return flags

    def _mounts(self, spec: SealedSpec) -> list[tuple[Path, str]]:
        mounts = []
        if spec.artifact_dir is not None:
            mounts.append((spec.artifact_dir, "/artifact"))
        if spec.retrieval_dir is not None:
            mounts.append((spec.retrieval_dir, "/retrieval"))
        return mounts

    def sealed_config(self, spec: SealedSpec) -> dict[str, Any]:
        hw = spec.hardware
        return {
            "schema": CONFIG_SCHEMA,
            "backend": self.name,
            "operational_level": self.operational_level,
            "runtime": self.runtime or "containers.conf default",
            "image": require_pinned(spec.image),
            "hardware_class": {
                "id": hw.id, "cpus": hw.cpus, "memory_mb": hw.memory_mb, "pids": hw.pids,
                "tmpfs_mb": hw.tmpfs_mb, "gpu": hw.gpu,
            },
            "limits": {
                "memory_bytes": spec.memory_limit_bytes,
                "memory_swap_bytes": spec.memory_limit_bytes,
                "cpus": hw.cpus,
                "cpuset": spec.cpuset,
                "pids": hw.pids,
                "tmpfs_mb": hw.tmpfs_mb,
                "nofile": NOFILE,
                "nproc": NPROC,
                "max_lifetime_s": spec.max_lifetime_s,
            },
            "mounts": [{"target": t, "read_only": True} for _, t in self._mounts(spec)],
            "env": dict(sorted(spec.env.items())),
            "flags": self.sealing_flags(spec),
        }

    def sealed_config_digest(self, spec: SealedSpec) -> str:
        return config_digest(self.sealed_config(spec))

    def run_argv(self, spec: SealedSpec, container_dir: Path) -> list[str]:
        """The full ``podman run`` command line for ``spec``."""
        argv = [
            *self._global_args(), "run", "-i", "--rm=false", "--pull=never",
            f"--name={spec.name}",
            f"--cidfile={container_dir / 'cid'}",
            f"--pidfile={container_dir / 'pid'}",
            *self.sealing_flags(spec),
            f"--label={RUNNER_LABEL}=1",
            f"--label={LOCK_LABEL}={container_dir / 'owner.lock'}",
        ]
        argv += [f"--label={k}={v}" for k, v in sorted(spec.labels.items())]
        argv += [f"--volume={host.resolve()}:{target}:ro" for host, target in self._mounts(spec)]
        argv += [f"--env={k}={v}" for k, v in sorted(spec.env.items())]
        argv.append(require_pinned(spec.image))
        return argv

    # -- life cycle -----------------------------------------------------------------------------

    def _container_dir(self, name: str) -> Path:
        return self.state_dir / "containers" / name

    def _stderr_path(self, spec: SealedSpec) -> Path:
        path = self.state_dir / "stderr" / f"{spec.name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _check_mounts(self, spec: SealedSpec) -> None:
        for host, target in self._mounts(spec):
            if not host.is_dir() or host.stat().st_mode & 0o005 != 0o005:
                raise ContainerStartFailed(
                    f"{host} (for {target}) must be a directory the sandbox user 65534 can "
                    "read (o+rx)"
                )

    def start(self, spec: SealedSpec) -> PodmanSealedProcess:
        self._check_mounts(spec)
        container_dir = self._container_dir(spec.name)
        if owned_by_live_process(container_dir / "owner.lock"):
            raise ContainerStartFailed(f"container {spec.name} belongs to a live run")
        if container_dir.exists():  # left by a dead worker: its container may still run
            self.remove(spec.name)
            shutil.rmtree(container_dir, ignore_errors=True)
        lock = OwnerLock(container_dir / "owner.lock")
        try:
            argv = self.run_argv(spec, container_dir)
            popen, started_ns = spawn(argv, env=self._env)
        except BaseException:
            lock.release()
            shutil.rmtree(container_dir, ignore_errors=True)
            raise
        return PodmanSealedProcess(
            self, container_dir, spec.name, popen, started_ns=started_ns,
            stderr_path=self._stderr_path(spec), stderr_cap=self.stderr_cap_bytes,
            owner_lock=lock,
        )

    def kill(self, name: str) -> None:
        """SIGKILL a running container by name (slow path: a podman call)."""
        self._podman(["kill", "--signal", "KILL", name], 30)

    def remove(self, name: str) -> None:
        done = self._podman(["rm", "--force", "--ignore", "--time", "0", name], 60)
        if done.returncode != 0:
            raise RunnerError(f"podman rm {name} failed: {done.stderr.strip()[-_TAIL:]}")

    def list_containers(self, prefix: str = CONTAINER_PREFIX) -> dict[str, Path]:
        """Every container (any state) named ``prefix*`` → the path of its owner lock."""
        done = self._podman(["ps", "--all", "--filter", f"name=^{prefix}", "--format",
                             f'{{{{.Names}}}}\t{{{{index .Labels "{LOCK_LABEL}"}}}}'])
        if done.returncode != 0:
            raise RunnerError(f"podman ps failed: {done.stderr.strip()[-_TAIL:]}")
        found = {}
        for line in done.stdout.splitlines():
            name, _, lock = line.partition("\t")
            if name.startswith(prefix):
                lock = lock.strip()
                usable = lock and lock != "<no value>"
                found[name] = Path(lock) if usable else self._container_dir(name) / "owner.lock"
        return found

    def cleanup_orphans(self, prefix: str = CONTAINER_PREFIX) -> list[str]:
        """Remove ``prefix*`` containers whose owner lock (named in their label, so any worker's
        state dir works) is not held by a live process."""
        removed = []
        for name, lock in self.list_containers(prefix).items():
            if owned_by_live_process(lock):
                continue
            self.remove(name)
            if lock.parent.name == name:  # the dead owner's per-container state
                shutil.rmtree(lock.parent, ignore_errors=True)
            removed.append(name)
        containers = self.state_dir / "containers"
        if containers.is_dir():
            for leftover in containers.iterdir():
                if leftover.name.startswith(prefix) and not owned_by_live_process(
                    leftover / "owner.lock"
                ):
                    shutil.rmtree(leftover, ignore_errors=True)
        if removed:
            log.warning("removed orphaned containers: %s", ", ".join(removed))
        return removed
