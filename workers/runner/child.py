"""A sealed model reached through a child process's pipes (podman client or sandboxed command).

``PopenSealedProcess`` implements the ``SealedProcess`` port around ``subprocess.Popen``. Backends
subclass it to say how to kill the whole model and how to tidy up (remove the container, delete
the cgroup). stderr is drained by one thread into a file capped at ``stderr_cap`` bytes; the rest
is counted and discarded, so a chatty model never blocks on a full pipe.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from workers.runner.cgroup import MemoryProbe

log = logging.getLogger(__name__)

MemorySource = Callable[[], MemoryProbe | None]
_MAX_ATTACH_TRIES = 200


def exit_code_of(returncode: int | None) -> int | None:
    """``Popen.returncode`` in container convention: ``-9`` becomes ``137``."""
    if returncode is None or returncode >= 0:
        return returncode
    return 128 - returncode


class StderrPump:
    """Copies a pipe into a file up to ``cap`` bytes, then counts and discards the rest."""

    def __init__(self, pipe: IO[bytes], path: Path, cap: int) -> None:
        self.path = path
        self.cap = cap
        self.total_bytes = 0
        self._pipe = pipe
        self._thread = threading.Thread(target=self._run, name=f"stderr:{path.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd = self._pipe.fileno()
        with open(self.path, "wb") as out:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                room = self.cap - self.total_bytes
                if room > 0:
                    out.write(chunk[:room])
                    out.flush()
                self.total_bytes += len(chunk)
            if self.total_bytes > self.cap:
                out.write(f"\n[future-ts: stderr truncated: {self.total_bytes} bytes, "
                          f"{self.cap} kept]\n".encode())

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class OwnerLock:
    """An ``flock`` held for a sandbox's whole life: proof that a live process owns it.

    ``cleanup_orphans`` removes a container only when it can take this lock, which the kernel
    releases by itself when the owning worker dies, however it dies.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def owned_by_live_process(lock_path: Path) -> bool:
    """``True`` if some live process holds the owner lock at ``lock_path``."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` with three unbuffered pipes in its own session; returns (popen, started_ns).

    A new session keeps a terminal's Ctrl-C (sent to our process group) away from the model.
    """
    started_ns = time.perf_counter_ns()
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        close_fds=True,
        start_new_session=True,
        env=dict(env),
        cwd=cwd,
    )
    return popen, started_ns


class PopenSealedProcess:
    """``SealedProcess`` over a ``Popen`` whose pipes reach the model."""

    def __init__(
        self,
        name: str,
        popen: subprocess.Popen[bytes],
        *,
        started_ns: int,
        stderr_path: Path | None,
        stderr_cap: int,
        memory_source: MemorySource | None = None,
        owner_lock: OwnerLock | None = None,
    ) -> None:
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        self._name = name
        self._popen = popen
        self._started_ns = started_ns
        self._stderr_path = stderr_path
        self._pump: StderrPump | None = None
        if stderr_path is not None:
            self._pump = StderrPump(popen.stderr, stderr_path, stderr_cap)
        self._memory_source = memory_source
        self._memory: MemoryProbe | None = None
        self._attach_tries = 0
        self._owner_lock = owner_lock
        self._killed = False
        self._closed = False
        self._close_lock = threading.Lock()

    # -- identity and pipes -------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def stdin(self) -> IO[bytes]:
        assert self._popen.stdin is not None
        return self._popen.stdin

    @property
    def stdout(self) -> IO[bytes]:
        assert self._popen.stdout is not None
        return self._popen.stdout

    @property
    def stderr_path(self) -> Path | None:
        return self._stderr_path

    @property
    def stderr_bytes(self) -> int:
        return self._pump.total_bytes if self._pump is not None else 0

    @property
    def started_ns(self) -> int:
        return self._started_ns

    @property
    def pid(self) -> int:
        return self._popen.pid

    # -- memory -------------------------------------------------------------------------------

    def _probe(self) -> MemoryProbe | None:
        # Attached lazily: a container's cgroup exists only once the runtime has created it,
        # and the first call comes after "ready", outside any timed region.
        if (
            self._memory is None
            and self._memory_source is not None
            and not self._closed
            and self._attach_tries < _MAX_ATTACH_TRIES
        ):
            self._attach_tries += 1
            try:
                self._memory = self._memory_source()
            except OSError as exc:
                log.debug("memory probe for %s not attached yet: %s", self._name, exc)
        return self._memory

    def memory_bytes(self) -> int | None:
        probe = self._probe()
        return probe.current() if probe is not None else None

    def memory_peak_bytes(self) -> int | None:
        probe = self._probe()
        return probe.peak() if probe is not None else None

    def reset_peak(self) -> bool:
        probe = self._probe()
        return probe.reset_peak() if probe is not None else False

    def oom_observed(self) -> bool | None:
        return self._memory.oom_observed() if self._memory is not None else None

    # -- life cycle ---------------------------------------------------------------------------

    @property
    def killed_by_platform(self) -> bool:
        return self._killed

    @property
    def exit_code(self) -> int | None:
        return exit_code_of(self._popen.returncode)

    def runtime_error(self) -> str | None:
        return None

    def poll(self) -> int | None:
        return exit_code_of(self._popen.poll())

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return exit_code_of(self._popen.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self._popen.poll() is not None:
            return
        self._killed = True
        self._kill_model()

    def _kill_model(self) -> None:
        """SIGKILL everything the model runs. Default: the child's process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signal.SIGKILL)

    def _release(self) -> None:
        """Backend-specific tidy-up after the model is dead (remove container, cgroup)."""

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._popen.poll() is None:
                self.kill()
            # Closing our ends first: a client still copying a flood to us gets EPIPE and exits.
            for pipe in (self._popen.stdin, self._popen.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            if self.wait(5.0) is None:
                self._popen.kill()  # the client itself; the container goes in _release
                self.wait(5.0)
            if self._pump is not None:
                self._pump.join(2.0)
            if self._popen.stderr is not None:
                with contextlib.suppress(OSError):
                    self._popen.stderr.close()
        finally:
            try:
                self._release()
            finally:
                if self._memory is not None:
                    self._memory.close()
                if self._owner_lock is not None:
                    self._owner_lock.release()

    def __enter__(self) -> PopenSealedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
