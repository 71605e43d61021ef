"""Memory telemetry of a sealed process, read straight from its cgroup.

The hot path reads the counters with ``os.pread`` on descriptors opened once, so a sample costs a
syscall, never a subprocess. Three sources, best first:

* cgroup v1 memory controller: ``memory.usage_in_bytes`` / ``memory.max_usage_in_bytes``; the peak
  is reset by writing ``0`` to ``memory.max_usage_in_bytes``, so the peak of one call is measurable.
  OOM kills are observed with the v1 ``cgroup.event_control`` eventfd on ``memory.oom_control``.
* cgroup v2: ``memory.current`` / ``memory.peak``; writing to ``memory.peak`` resets it for the
  writing descriptor on Linux >= 6.12 (older kernels refuse, and the peak is then the peak since
  start). ``memory.events`` ``oom_kill`` counts OOM kills.
* ``/proc/<pid>/status`` ``VmRSS`` / ``VmHWM`` of the main process only (no cgroup available);
  ``VmHWM`` is reset by writing ``5`` to ``/proc/<pid>/clear_refs``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_CHUNK = 4096


class MemoryProbe(Protocol):
    """Reads one process tree's memory; every method is cheap enough for the per-call path."""

    def current(self) -> int | None:
        """Bytes charged now, or ``None`` when the source is gone."""
        ...

    def peak(self) -> int | None:
        """Highest bytes charged since start or since the last successful ``reset_peak``."""
        ...

    def reset_peak(self) -> bool:
        """Start a new peak window; ``False`` when the source cannot reset it."""
        ...

    def oom_observed(self) -> bool | None:
        """``True`` when the kernel OOM-killed inside this cgroup, ``None`` when unknowable."""
        ...

    def close(self) -> None:
        """Release descriptors and helper threads. Idempotent."""
        ...


@dataclass(frozen=True)
class CgroupLocation:
    """Where a process's memory controller lives: ``version`` 1 or 2 and its directory."""

    version: int
    path: Path


def _mount_points() -> tuple[dict[str, tuple[str, str]], tuple[str, str] | None]:
    """v1 memory mount (root within hierarchy, mount point) and the cgroup2 mount, if any."""
    v1: dict[str, tuple[str, str]] = {}
    v2: tuple[str, str] | None = None
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            root, mount_point, fstype = fields[3], fields[4], tail[0]
            if fstype == "cgroup" and "memory" in tail[2].split(","):
                v1["memory"] = (root, mount_point)
            elif fstype == "cgroup2" and v2 is None:
                v2 = (root, mount_point)
    return v1, v2


def _join(mount: tuple[str, str], cgroup_path: str) -> Path:
    root, mount_point = mount
    rel = cgroup_path
    if root != "/" and rel.startswith(root):
        rel = rel[len(root):]
    return Path(mount_point) / rel.lstrip("/")


def locate_memory_cgroup(pid: int) -> CgroupLocation | None:
    """The memory cgroup directory of ``pid`` (v1 controller preferred), or ``None``."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    v1_mounts, v2_mount = _mount_points()
    unified: str | None = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and "memory" in v1_mounts:
            return CgroupLocation(1, _join(v1_mounts["memory"], path))
        if controllers == "":
            unified = path
    if unified is not None and v2_mount is not None:
        candidate = _join(v2_mount, unified)
        if (candidate / "memory.current").exists():
            return CgroupLocation(2, candidate)
    return None


def _read_int(fd: int) -> int | None:
    try:
        return int(os.pread(fd, _CHUNK, 0))
    except (OSError, ValueError):
        return None


def _read_field(fd: int, key: bytes) -> int | None:
    """``key N`` from a flat-keyed cgroup file such as ``memory.events``."""
    try:
        text = os.pread(fd, _CHUNK, 0)
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(b" ")
        if name == key:
            return int(value)
    return None


class CgroupV1Memory:
    """cgroup v1 memory controller of one container or sandbox."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._usage = os.open(path / "memory.usage_in_bytes", os.O_RDONLY)
        try:
            self._max = os.open(path / "memory.max_usage_in_bytes", os.O_RDWR)
            self._oom_control = os.open(path / "memory.oom_control", os.O_RDONLY)
        except OSError:
            os.close(self._usage)
            raise
        self._oom = False
        self._closing = False
        self._efd: int | None = None
        self._watcher: threading.Thread | None = None
        self._arm_oom_watch()

    def _arm_oom_watch(self) -> None:
        # The kernel signals the eventfd once per OOM and once more when the cgroup is removed.
        # An OOM wake finds memory.oom_control still readable; a removal wake finds ENODEV.
        try:
            efd = os.eventfd(0)
        except OSError:
            return
        try:
            ctl = os.open(self.path / "cgroup.event_control", os.O_WRONLY)
            try:
                os.write(ctl, f"{efd} {self._oom_control}".encode())
            finally:
                os.close(ctl)
        except OSError:
            os.close(efd)
            return
        self._efd = efd
        self._watcher = threading.Thread(
            target=self._watch_oom, name=f"oom-watch:{self.path.name}", daemon=True
        )
        self._watcher.start()

    def _watch_oom(self) -> None:
        assert self._efd is not None
        while True:
            try:
                count = os.eventfd_read(self._efd)
            except OSError:
                return
            if self._closing:
                return
            try:
                os.pread(self._oom_control, _CHUNK, 0)
            except OSError:
                if count >= 2:
                    self._oom = True
                return
            self._oom = True

    def current(self) -> int | None:
        return _read_int(self._usage)

    def peak(self) -> int | None:
        return _read_int(self._max)

    def reset_peak(self) -> bool:
        try:
            os.pwrite(self._max, b"0", 0)
        except OSError:
            return False
        return True

    def oom_observed(self) -> bool | None:
        if self._oom:
            return True
        kills = _read_field(self._oom_control, b"oom_kill")
        if kills:
            self._oom = True
        return self._oom if self._watcher is not None or kills is not None else None

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._efd is not None and self._watcher is not None:
            if self._watcher.is_alive():
                with contextlib.suppress(OSError):
                    os.eventfd_write(self._efd, 1)
                self._watcher.join(timeout=1.0)
            os.close(self._efd)
        for fd in (self._usage, self._max, self._oom_control):
            with contextlib.suppress(OSError):
                os.close(fd)


class CgroupV2Memory:
    """cgroup v2 memory controller of one container or sandbox."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._current = os.open(path / "memory.current", os.O_RDONLY)
        self._peak: int | None = None
        self._events: int | None = None
        with contextlib.suppress(OSError):
            self._peak = os.open(path / "memory.peak", os.O_RDWR)
        with contextlib.suppress(OSError):
            self._events = os.open(path / "memory.events", os.O_RDONLY)
        self._oom = False
        self._closed = False

    def current(self) -> int | None:
        return _read_int(self._current)

    def peak(self) -> int | None:
        if self._peak is None:
            return self.current()
        return _read_int(self._peak)

    def reset_peak(self) -> bool:
        if self._peak is None:
            return False
        try:
            os.pwrite(self._peak, b"0", 0)  # per-descriptor reset, Linux >= 6.12
        except OSError:
            return False
        return True

    def oom_observed(self) -> bool | None:
        if self._events is None:
            return None
        kills = _read_field(self._events, b"oom_kill")
        if kills:
            self._oom = True
        return self._oom if kills is not None or self._oom else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in (self._current, self._peak, self._events):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


class ProcStatusMemory:
    """Resident memory of one process from ``/proc``: the fallback without a cgroup."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._status = os.open(f"/proc/{pid}/status", os.O_RDONLY)
        self._clear_refs: int | None = None
        self._closed = False
        with contextlib.suppress(OSError):
            self._clear_refs = os.open(f"/proc/{pid}/clear_refs", os.O_WRONLY)

    def _field_kib(self, key: bytes) -> int | None:
        try:
            text = os.pread(self._status, 8192, 0)
        except OSError:
            return None
        start = text.find(key)
        if start < 0:
            return None
        end = text.find(b"\n", start)
        return int(text[start + len(key) : end].split()[0]) * 1024

    def current(self) -> int | None:
        return self._field_kib(b"VmRSS:")

    def peak(self) -> int | None:
        return self._field_kib(b"VmHWM:")

    def reset_peak(self) -> bool:
        if self._clear_refs is None:
            return False
        try:
            os.write(self._clear_refs, b"5")
        except OSError:
            return False
        return True

    def oom_observed(self) -> bool | None:
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in (self._status, self._clear_refs):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def open_memory_probe(location: CgroupLocation) -> MemoryProbe:
    """Open the probe for a located cgroup; raises ``OSError`` when its files are gone."""
    if location.version == 1:
        return CgroupV1Memory(location.path)
    return CgroupV2Memory(location.path)
