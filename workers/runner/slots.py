"""Exclusive CPU sets for concurrent sealed runs on one host.

The worker host's CPUs (``settings.worker_cpus`` or the process's affinity) are split, per
hardware class, into aligned groups of ``cpus`` CPUs: with CPUs 0-3, ``cpu-1c-1g`` can use
{0},{1},{2},{3} and ``cpu-2c-4g`` {0,1},{2,3}. A lease holds one ``flock`` per CPU in a state
directory shared by every worker process on the host, so two runs never share a CPU whatever
their classes, and a worker that dies (even SIGKILL) frees its CPUs: the kernel drops its locks.
A class that needs more CPUs than the host has cannot be served (``HardwareClassUnservable``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from app.hardware import HardwareClass
from app.settings import Settings
from workers.runner.errors import HardwareClassUnservable, NoCpuSlotFree


def parse_cpuset(text: str) -> list[int]:
    """``"0-3,6"`` → ``[0, 1, 2, 3, 6]`` (kernel cpuset list syntax)."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first < 0 or last < first:
            raise ValueError(f"bad cpuset range {part!r}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_cpuset(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 6]`` → ``"0-2,6"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


class CpuLease:
    """Exclusive use of some CPUs until ``release()`` (or the holder's death)."""

    def __init__(self, cpus: tuple[int, ...], hardware_class: str, fds: list[int]) -> None:
        self.cpus = cpus
        self.cpuset = format_cpuset(cpus)
        self.hardware_class = hardware_class
        self._fds = fds

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> CpuLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"CpuLease({self.hardware_class}, cpuset={self.cpuset!r}, held={self.held})"


class CpuSlots:
    """Allocator of exclusive cpusets per hardware class, shared across processes on a host."""

    def __init__(self, cpus: Sequence[int], state_dir: Path) -> None:
        if not cpus:
            raise ValueError("a worker needs at least one CPU")
        self.host_cpus: tuple[int, ...] = tuple(sorted(set(cpus)))
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_settings(cls, settings: Settings, state_dir: Path | None = None) -> CpuSlots:
        cpus = (
            parse_cpuset(settings.worker_cpus)
            if settings.worker_cpus
            else sorted(os.sched_getaffinity(0))
        )
        return cls(cpus, state_dir or (settings.data_dir / "runner" / "cpus").resolve())

    def can_serve(self, hardware: HardwareClass) -> bool:
        return 1 <= hardware.cpus <= len(self.host_cpus)

    def slot_count(self, hardware: HardwareClass) -> int:
        """How many runs of this class the host can hold at once (its worker concurrency)."""
        return len(self.host_cpus) // hardware.cpus if self.can_serve(hardware) else 0

    def groups(self, hardware: HardwareClass) -> list[tuple[int, ...]]:
        """The aligned CPU groups this class may use, in preference order."""
        n, cpus = hardware.cpus, self.host_cpus
        return [cpus[i : i + n] for i in range(0, len(cpus) - n + 1, n)]

    def _lock_cpu(self, cpu: int, owner: str) -> int | None:
        fd = os.open(self.state_dir / f"cpu-{cpu}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{owner} pid={os.getpid()}\n".encode(), 0)
        return fd

    def _try_group(self, group: tuple[int, ...], owner: str) -> list[int] | None:
        fds: list[int] = []
        for cpu in group:
            fd = self._lock_cpu(cpu, owner)
            if fd is None:
                for held in fds:
                    os.close(held)
                return None
            fds.append(fd)
        return fds

    def try_acquire(self, hardware: HardwareClass, owner: str) -> CpuLease | None:
        """A lease on a free group, or ``None`` when every group is (partly) held."""
        if not self.can_serve(hardware):
            raise HardwareClassUnservable(
                f"{hardware.id} needs {hardware.cpus} CPUs; this worker has "
                f"{len(self.host_cpus)} ({format_cpuset(self.host_cpus)})"
            )
        # One allocator at a time per host: a multi-CPU group is then taken atomically.
        guard = os.open(self.state_dir / "alloc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                        0o600)
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            for group in self.groups(hardware):
                fds = self._try_group(group, owner)
                if fds is not None:
                    return CpuLease(group, hardware.id, fds)
            return None
        finally:
            os.close(guard)

    def acquire(
        self, hardware: HardwareClass, owner: str, timeout_s: float = 0.0, poll_s: float = 0.05
    ) -> CpuLease:
        """Lease a group, waiting up to ``timeout_s``; raises ``NoCpuSlotFree`` after that."""
        deadline = time.monotonic() + timeout_s
        while True:
            lease = self.try_acquire(hardware, owner)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise NoCpuSlotFree(f"no free {hardware.cpus}-CPU group for {hardware.id}")
            time.sleep(poll_s)

    def holders(self) -> dict[int, str]:
        """CPU → owner text for every CPU currently leased (diagnostics)."""
        out: dict[int, str] = {}
        guard = os.open(self.state_dir / "alloc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                        0o600)
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)  # a probe must not make an allocation fail
            for cpu in self.host_cpus:
                self._read_holder(cpu, out)
        finally:
            os.close(guard)
        return out

    def _read_holder(self, cpu: int, out: dict[int, str]) -> None:
        path = self.state_dir / f"cpu-{cpu}.lock"
        if not path.exists():
            return
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            out[cpu] = os.pread(fd, 512, 0).decode(errors="replace").strip()
        finally:
            os.close(fd)
