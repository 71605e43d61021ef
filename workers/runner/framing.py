"""JSON-lines framing over non-blocking pipes, with deadlines and size caps.

The reader never holds more than one line cap (plus one pipe-sized chunk) in memory: a line that
grows past the cap is reported as ``too_long`` without reading the rest, and the total bytes read
from the model are capped too (``flood``). Both waits use ``selectors`` on the raw descriptors.
"""

from __future__ import annotations

import os
import selectors
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

ReadKind = Literal["line", "eof", "timeout", "too_long", "flood", "cancelled"]
WriteKind = Literal["ok", "timeout", "broken", "cancelled"]
NowNs = Callable[[], int]
_READ_CHUNK = 1 << 16
_NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ReadResult:
    kind: ReadKind
    line: bytes = b""
    end_ns: int = 0  # monotonic time the bytes completing the line were read
    pending_bytes: int = 0  # bytes of an unfinished line (too_long / eof / timeout)


class LineReader:
    """Reads newline-terminated lines from a pipe; blank lines are skipped."""

    def __init__(self, fd: int, *, max_total_bytes: int, now_ns: NowNs) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.max_total_bytes = max_total_bytes
        self.total_bytes = 0
        self._now_ns = now_ns
        self._buf = bytearray()
        self._scan_from = 0
        self._last_chunk_ns = 0
        self._eof = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(fd, selectors.EVENT_READ)

    def close(self) -> None:
        self._selector.close()

    def _pop_line(self) -> bytes | None:
        while True:
            idx = self._buf.find(b"\n", self._scan_from)
            if idx < 0:
                self._scan_from = len(self._buf)
                return None
            line = bytes(self._buf[:idx])
            del self._buf[: idx + 1]
            self._scan_from = 0
            if line.strip():
                return line

    def _fill(self) -> ReadKind | None:
        """Read one chunk that is ready; the kind that ends the wait, or ``None`` to go on."""
        try:
            chunk = os.read(self.fd, _READ_CHUNK)
        except BlockingIOError:
            return None
        except OSError:
            chunk = b""
        self._last_chunk_ns = self._now_ns()
        if not chunk:
            self._eof = True
            return "eof"
        self.total_bytes += len(chunk)
        self._buf += chunk
        if self.total_bytes > self.max_total_bytes:
            return "flood"
        return None

    def read_line(
        self,
        deadline_ns: int,
        max_line_bytes: int,
        cancelled: Callable[[], bool] | None = None,
        poll_interval_s: float = 0.1,
    ) -> ReadResult:
        """The next non-blank line, or why there is none before ``deadline_ns``."""
        while True:
            line = self._pop_line()
            if line is not None and len(line) > max_line_bytes:
                return ReadResult("too_long", line[:256], pending_bytes=len(line))
            if line is not None:
                return ReadResult("line", line, self._last_chunk_ns)
            if len(self._buf) > max_line_bytes:
                return ReadResult("too_long", bytes(self._buf[:256]), pending_bytes=len(self._buf))
            if self._eof:
                return ReadResult("eof", bytes(self._buf[:256]), pending_bytes=len(self._buf))
            remaining_ns = deadline_ns - self._now_ns()
            if remaining_ns <= 0:
                return ReadResult("timeout", bytes(self._buf[:256]), pending_bytes=len(self._buf))
            timeout_s = remaining_ns / _NS_PER_S
            if cancelled is not None:
                timeout_s = min(timeout_s, poll_interval_s)
            if not self._selector.select(timeout_s):
                if cancelled is not None and cancelled():
                    return ReadResult("cancelled", pending_bytes=len(self._buf))
                continue
            kind = self._fill()
            if kind == "flood":
                return ReadResult("flood", bytes(self._buf[:256]), pending_bytes=len(self._buf))

    def has_unsolicited(self) -> bool:
        """Whether the model has written anything (besides blank lines) nobody asked for."""
        if self._buf.strip():
            return True
        while not self._eof and self._selector.select(0):
            if self._fill() is not None:
                break
        return bool(self._buf.strip())


class LineWriter:
    """Writes whole messages to a non-blocking pipe before a deadline."""

    def __init__(self, fd: int, *, now_ns: NowNs) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self._now_ns = now_ns
        self._selector = selectors.DefaultSelector()
        self._selector.register(fd, selectors.EVENT_WRITE)

    def close(self) -> None:
        self._selector.close()

    def write(
        self,
        data: bytes,
        deadline_ns: int,
        cancelled: Callable[[], bool] | None = None,
        poll_interval_s: float = 0.1,
    ) -> WriteKind:
        """Write all of ``data``; a model that stops reading cannot block us past the deadline."""
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                written = 0
            except (BrokenPipeError, ConnectionResetError, ValueError, OSError):
                return "broken"
            view = view[written:]
            if not view:
                break
            remaining_ns = deadline_ns - self._now_ns()
            if remaining_ns <= 0:
                return "timeout"
            timeout_s = remaining_ns / _NS_PER_S
            if cancelled is not None:
                timeout_s = min(timeout_s, poll_interval_s)
            if not self._selector.select(timeout_s) and cancelled is not None and cancelled():
                return "cancelled"
        return "ok"
