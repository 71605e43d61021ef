"""``ProcessBackend``: the seed's Stage 1 MVP. Dev only; runs are ``local_sealed_mvp``.

It runs a COMMAND, not an image. The "image" is ``process:<command line>`` (split with ``shlex``),
run in the backend's ``cwd``; for example, from the repository root::

    process:python3 -u -m app.baselines.forward_server seasonal-naive

Sealing, best effort:

* a new network namespace (``unshare --net``; with a user namespace when not root): no interface
  but a down loopback, so no connection leaves the process;
* when the cgroup v1 hierarchy is writable (root on this host): its own ``memory`` (limit = swap
  limit), ``pids``, ``cpu`` (CFS quota = class CPUs) and ``cpuset`` (the leased CPUs) cgroups,
  joined before the command starts; memory telemetry and OOM detection come from them;
* otherwise rlimits through ``prlimit`` (``RLIMIT_DATA`` for memory, ``RLIMIT_NPROC``) and
  ``taskset`` for the CPUs, with ``/proc/<pid>/status`` for memory (main process only). An
  allocation over ``RLIMIT_DATA`` fails inside the model (Python: ``MemoryError``), so the task
  usually ends ``container_crashed`` rather than ``oom``;
* always ``RLIMIT_NOFILE`` 1024 and no core dumps; a scrubbed environment (``PATH`` plus the spec's
  variables; the artifact directory is passed as ``FUTURE_TS_ARTIFACT_DIR``).

What it does NOT give: a read-only root, a private filesystem view, an unprivileged user or
seccomp. The process sees the host's files. Never use it for blind or live tiers.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.settings import Settings, process_environment
from app.warnings import DevOnlyWarning
from workers.runner.cgroup import CgroupV1Memory, MemoryProbe, ProcStatusMemory
from workers.runner.child import OwnerLock, PopenSealedProcess, owned_by_live_process, spawn
from workers.runner.errors import BackendUnavailable, ContainerStartFailed, ImagePullFailed
from workers.runner.port import (
    CONTAINER_PREFIX,
    ImageRecord,
    OperationalLevel,
    SealedSpec,
    config_digest,
)

log = logging.getLogger(__name__)

IMAGE_SCHEME = "process:"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "future-ts"
CONTROLLERS = ("memory", "pids", "cpu", "cpuset")
JOIN_FAILED = 121
_JOIN_MARKER = "future-ts: cannot join the sandbox cgroup"
# Moves itself into each cgroup.procs file given, then execs the rest of its arguments.
_JOIN_SCRIPT = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do '
    f'echo $$ > "$1" || {{ echo "{_JOIN_MARKER} $1" >&2; exit {JOIN_FAILED}; }}; '
    'shift; n=$((n-1)); done; exec "$@"'
)
NOFILE = 1024
CFS_PERIOD_US = 100_000


def parse_process_image(image: str) -> list[str]:
    """``process:python3 -u -m x`` → ``["python3", "-u", "-m", "x"]``."""
    if not image.startswith(IMAGE_SCHEME):
        raise ImagePullFailed(f"the process backend runs 'process:<command>', not {image!r}")
    command, _, digest = image[len(IMAGE_SCHEME):].rpartition("@")
    if not (digest.startswith("sha256:") and len(digest) == 71):
        command = image[len(IMAGE_SCHEME):]  # no intake pin: the whole text is the command
    argv = shlex.split(command)
    if not argv:
        raise ImagePullFailed("empty process command")
    return argv


class SandboxCgroups:
    """This sandbox's own v1 cgroups (one per controller), created with their limits."""

    def __init__(self, root: Path, name: str) -> None:
        self.dirs = {c: root / c / CGROUP_PARENT / name for c in CONTROLLERS}
        self.root = root

    @staticmethod
    def writable(root: Path) -> bool:
        return all(os.access(root / c, os.W_OK) for c in CONTROLLERS)

    def _parent(self, controller: str) -> Path:
        parent = self.root / controller / CGROUP_PARENT
        if not parent.exists():
            parent.mkdir()
            if controller == "cpuset":  # a v1 cpuset is empty until told otherwise
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (parent / key).write_text((self.root / "cpuset" / key).read_text())
        return parent

    def create(self, spec: SealedSpec) -> None:
        for controller, path in self.dirs.items():
            self._parent(controller)
            path.mkdir()
        mem = self.dirs["memory"]
        (mem / "memory.limit_in_bytes").write_text(str(spec.memory_limit_bytes))
        if (mem / "memory.memsw.limit_in_bytes").exists():
            (mem / "memory.memsw.limit_in_bytes").write_text(str(spec.memory_limit_bytes))
        (self.dirs["pids"] / "pids.max").write_text(str(spec.hardware.pids))
        cpu = self.dirs["cpu"]
        (cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (cpu / "cpu.cfs_quota_us").write_text(str(spec.hardware.cpus * CFS_PERIOD_US))
        cpuset = self.dirs["cpuset"]
        (cpuset / "cpuset.cpus").write_text(spec.cpuset)
        (cpuset / "cpuset.mems").write_text((cpuset.parent / "cpuset.mems").read_text())

    def procs_files(self) -> list[str]:
        return [str(p / "cgroup.procs") for p in self.dirs.values()]

    def pids(self) -> list[int]:
        try:
            text = (self.dirs["pids"] / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def kill_all(self, rounds: int = 100) -> None:
        """SIGKILL every process in the sandbox until none is left (a fork bomb included)."""
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for path in self.dirs.values():
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last exiting task leaves
                    time.sleep(0.02)


class ProcessSealedProcess(PopenSealedProcess):
    """A sandboxed command; its cgroups (if any) are killed and removed on close."""

    def __init__(
        self, cgroups: SandboxCgroups | None, sandbox_dir: Path, *args: Any, **kwargs: Any
    ) -> None:
        self._cgroups = cgroups
        self._sandbox_dir = sandbox_dir
        super().__init__(*args, **kwargs)

    def _kill_model(self) -> None:
        super()._kill_model()
        if self._cgroups is not None:
            self._cgroups.kill_all()

    def runtime_error(self) -> str | None:
        if self.exit_code != JOIN_FAILED or self.stderr_path is None:
            return None
        if self._pump is not None:
            self._pump.join(1.0)
        with contextlib.suppress(OSError):
            text = self.stderr_path.read_text(errors="replace")
            if _JOIN_MARKER in text:
                return text.strip()[-500:]
        return None

    def _release(self) -> None:
        if self._cgroups is not None:
            self._cgroups.remove()
        shutil.rmtree(self._sandbox_dir, ignore_errors=True)


class ProcessBackend:
    """Dev-only backend (``local_sealed_mvp``): a command in a network namespace and a cgroup."""

    name = "process"
    operational_level: OperationalLevel = "local_sealed_mvp"

    def __init__(
        self,
        *,
        state_dir: Path,
        cwd: Path | None = None,
        stderr_cap_bytes: int = 1024 * 1024,
        base_env: Mapping[str, str] | None = None,
        cgroup_root: Path = CGROUP_ROOT,
        use_cgroups: bool = True,
    ) -> None:
        warnings.warn(
            DevOnlyWarning(
                "the process runner backend is dev-only: runs are local_sealed_mvp (network "
                "namespace and cgroup limits, no image, no filesystem isolation), not hosted_sealed"
            ),
            stacklevel=2,
        )
        self.state_dir = state_dir
        self.cwd = cwd
        self.stderr_cap_bytes = stderr_cap_bytes
        env = process_environment() if base_env is None else dict(base_env)
        self._env = {"PATH": env.get("PATH", os.defpath), "LANG": "C.UTF-8"}
        self.cgroup_root = cgroup_root
        self.use_cgroups = use_cgroups and SandboxCgroups.writable(cgroup_root)
        self._netns_argv = ["unshare", "--net"] if os.geteuid() == 0 else [
            "unshare", "--user", "--map-root-user", "--net"]
        self._check_netns()

    @classmethod
    def from_settings(cls, settings: Settings, cwd: Path | None = None) -> ProcessBackend:
        return cls(
            state_dir=(settings.data_dir / "runner" / "process").resolve(),
            cwd=cwd,
            stderr_cap_bytes=settings.stderr_cap_bytes,
        )

    def _check_netns(self) -> None:
        if shutil.which("unshare") is None:
            raise BackendUnavailable("process backend: 'unshare' is missing (util-linux)")
        done = subprocess.run([*self._netns_argv, "true"], capture_output=True, timeout=10,
                              check=False)
        if done.returncode != 0:
            raise BackendUnavailable(
                f"process backend: cannot create a network namespace: {done.stderr!r}")

    def ensure_image(self, image: str) -> ImageRecord:
        """Check the command exists; the 'digest' is the sha256 of the command line."""
        argv = parse_process_image(image)
        if shutil.which(argv[0], path=self._env["PATH"]) is None and not Path(argv[0]).exists():
            raise ImagePullFailed(f"command {argv[0]!r} not found")
        digest = "sha256:" + hashlib.sha256(image.encode()).hexdigest()
        return ImageRecord(ref=image, manifest_digest=digest, config_digest=None, image_id=None,
                           size_bytes=None, backend=self.name)

    def _limit_argv(self, spec: SealedSpec) -> list[str]:
        argv = ["prlimit", f"--nofile={NOFILE}", "--core=0"]
        if not self.use_cgroups:
            argv += [f"--data={spec.memory_limit_bytes}", f"--nproc={spec.hardware.pids}"]
        argv.append("--")
        if not self.use_cgroups:
            argv += ["taskset", "--cpu-list", spec.cpuset]
        return argv

    def sealed_config(self, spec: SealedSpec) -> dict[str, Any]:
        hw = spec.hardware
        return {
            "schema": "future-ts/sealed-config/1",
            "backend": self.name,
            "operational_level": self.operational_level,
            "command": parse_process_image(spec.image),
            "hardware_class": {"id": hw.id, "cpus": hw.cpus, "memory_mb": hw.memory_mb,
                               "pids": hw.pids, "tmpfs_mb": hw.tmpfs_mb, "gpu": hw.gpu},
            "limits": {
                "memory_bytes": spec.memory_limit_bytes,
                "memory_swap_bytes": spec.memory_limit_bytes,
                "cpus": hw.cpus,
                "cpuset": spec.cpuset,
                "pids": hw.pids,
                "nofile": NOFILE,
                "enforced_by": "cgroup-v1" if self.use_cgroups else "rlimit",
            },
            "isolation": {"network": "netns", "filesystem": "host", "user": "worker"},
            "env": dict(sorted(self._spec_env(spec).items())),
            "wrapper": [*self._netns_argv, *self._limit_argv(spec)],
        }

    def sealed_config_digest(self, spec: SealedSpec) -> str:
        return config_digest(self.sealed_config(spec))

    def _spec_env(self, spec: SealedSpec) -> dict[str, str]:
        env = dict(spec.env)
        if spec.artifact_dir is not None:
            env["FUTURE_TS_ARTIFACT_DIR"] = str(spec.artifact_dir)
        if spec.retrieval_dir is not None:
            env["FUTURE_TS_RETRIEVAL_DIR"] = str(spec.retrieval_dir)
        return env

    def _sandbox_dir(self, name: str) -> Path:
        return self.state_dir / "sandboxes" / name

    def start(self, spec: SealedSpec) -> ProcessSealedProcess:
        command = parse_process_image(spec.image)
        sandbox_dir = self._sandbox_dir(spec.name)
        if owned_by_live_process(sandbox_dir / "owner.lock"):
            raise ContainerStartFailed(f"sandbox {spec.name} belongs to a live run")
        self.remove(spec.name)
        lock = OwnerLock(sandbox_dir / "owner.lock")
        cgroups = SandboxCgroups(self.cgroup_root, spec.name) if self.use_cgroups else None
        try:
            procs = cgroups.procs_files() if cgroups is not None else []
            if cgroups is not None:
                cgroups.create(spec)
            argv = ["/bin/sh", "-c", _JOIN_SCRIPT, "sh", str(len(procs)), *procs,
                    *self._netns_argv, *self._limit_argv(spec), *command]
            popen, started_ns = spawn(argv, env={**self._env, **self._spec_env(spec)},
                                      cwd=self.cwd)
        except BaseException:
            if cgroups is not None:
                cgroups.remove()
            lock.release()
            raise
        stderr_path = self.state_dir / "stderr" / f"{spec.name}.log"
        stderr_path.parent.mkdir(parents=True, exist_ok=True)
        return ProcessSealedProcess(
            cgroups, sandbox_dir, spec.name, popen, started_ns=started_ns, stderr_path=stderr_path,
            stderr_cap=self.stderr_cap_bytes, owner_lock=lock,
            memory_source=self._memory_source(cgroups, popen.pid),
        )

    @staticmethod
    def _memory_source(cgroups: SandboxCgroups | None, pid: int) -> Any:
        def attach() -> MemoryProbe:
            if cgroups is not None:
                return CgroupV1Memory(cgroups.dirs["memory"])
            return ProcStatusMemory(pid)

        return attach

    def remove(self, name: str) -> None:
        """Kill whatever is left in the sandbox's cgroups and delete them. Idempotent."""
        if self.use_cgroups:
            SandboxCgroups(self.cgroup_root, name).remove()
        shutil.rmtree(self._sandbox_dir(name), ignore_errors=True)

    def cleanup_orphans(self, prefix: str = CONTAINER_PREFIX) -> list[str]:
        """Sandboxes started from this state directory whose owner died. (Cgroups alone do not
        say who owns them, so another state directory's sandboxes are never touched.)"""
        sandboxes = self.state_dir / "sandboxes"
        names = {p.name for p in sandboxes.iterdir()} if sandboxes.is_dir() else set()
        removed = []
        for name in sorted(n for n in names if n.startswith(prefix)):
            if not owned_by_live_process(self._sandbox_dir(name) / "owner.lock"):
                self.remove(name)
                removed.append(name)
        return removed
