"""The per-run tamper-evident prediction log: ``predictions.jsonl`` as an RFC 6962 Merkle tree.

Each record is serialized once with RFC 8785 (``jcs.canonical_bytes``) and stored verbatim as one
line; the leaf is the line's bytes *without* its trailing newline. JCS escapes every control
character, so a record can never contain a raw newline and one record is exactly one line.
The writer appends durably (``write`` + ``fsync`` before ``append`` returns), so the runner may
send the next request only once the previous answer is on disk, and it keeps the compact range so
the root is known at every size without re-reading the file.

Record fields (DESIGN section 4; see ``PredictionRecord``). The log does not validate the model's
answer, it records it; it only checks that ``seq``, when present, is the record's position.

Verifiers use ``root_of_file`` / ``root_of_bytes``: they hash the stored bytes line by line in a
tight loop and never parse or re-serialize JSON.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NotRequired, TypedDict

from app.evidence.errors import LogCorrupted, LogLocked
from app.evidence.jcs import JSONValue, canonical_bytes
from app.evidence.merkle import CompactRange, fold_root, inclusion_proof, leaf_hash

RECORD_FORMAT = "https://future-ts.dev/prediction-record/v1"
RecordStatus = Literal["ok", "invalid", "timeout", "error"]
_CHUNK = 8 * 1024 * 1024


class PredictionRecord(TypedDict):
    """One line of ``predictions.jsonl`` (``RECORD_FORMAT``). Times are RFC 3339 UTC strings.

    - ``run_id``, ``task_id``, ``window_id``, ``request_id``: identify the forward call.
    - ``seq``: 0-based position in this run's log (the Merkle leaf index).
    - ``platform_issued_at``: platform clock, stamped just before the request line was written.
    - ``runtime_ms``: platform monotonic time from that write to the end of the answer line.
    - ``memory_mb``: container memory sampled from its cgroup for this call (``None`` if unknown).
    - ``status``: ``ok`` | ``invalid`` (malformed/wrong answer) | ``timeout`` | ``error``
      (the model answered ``{"type":"error"}``).
    - ``request_sha256``: hex SHA-256 of the exact request line bytes sent to the container.
    - ``answer``: the model's answer object as received (``None`` when there was none). It must be
      JCS-representable; an answer that is not (NaN, Infinity, huge integers, invalid JSON) is
      recorded with ``status="invalid"``, ``answer=None`` and the raw line in ``answer_raw``.
    - ``detail``: optional reason for a non-``ok`` status.
    """

    run_id: str
    seq: int
    task_id: str
    window_id: str
    request_id: str
    platform_issued_at: str
    runtime_ms: float
    memory_mb: float | None
    status: RecordStatus
    request_sha256: str
    answer: JSONValue
    answer_raw: NotRequired[str]
    detail: NotRequired[str]


@dataclass(frozen=True)
class LogEntry:
    seq: int
    leaf_hash: bytes
    line_bytes: bytes  # the stored line without its trailing newline (the Merkle leaf)


@dataclass(frozen=True)
class TreeHead:
    size: int
    root: bytes

    @property
    def prediction_hash(self) -> str:
        """``"sha256:<hex of the Merkle root>"`` (DESIGN section 4)."""
        return "sha256:" + self.root.hex()

    @property
    def root_b64(self) -> str:
        return base64.b64encode(self.root).decode()


class PredictionLog:
    """An append-only, single-writer ``predictions.jsonl``. Not thread-safe; one per run.

    An exclusive ``flock`` is held while open so that a redelivered task cannot append to a log
    another worker still writes (``LogLocked``).
    """

    def __init__(self, path: Path, fd: int, compact: CompactRange, *, durable: bool) -> None:
        self._path = path
        self._fd: int | None = fd
        self._compact = compact
        self._durable = durable
        self._broken = False

    @classmethod
    def create(cls, path: Path, *, durable: bool = True) -> PredictionLog:
        """Create a new, empty log; refuses an existing file (``FileExistsError``)."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _lock(fd, path)
        except BaseException:
            os.close(fd)
            raise
        if durable:  # make the new directory entry itself durable
            _fsync_dir(path.parent)
        return cls(path, fd, CompactRange(), durable=durable)

    @classmethod
    def open(cls, path: Path, *, durable: bool = True) -> PredictionLog:
        """Open a log to append, creating it if missing; an existing log is rehashed.

        A torn last line (bytes after the last newline, left by a crash mid-write) was never
        acknowledged by ``append``; it is truncated away before appending resumes.
        """
        if not path.exists():
            return cls.create(path, durable=durable)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        try:
            _lock(fd, path)
            compact, good_length = _rehash(fd)
            if good_length != os.fstat(fd).st_size:
                os.ftruncate(fd, good_length)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, compact, durable=durable)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def size(self) -> int:
        return self._compact.size

    def root(self) -> bytes:
        return self._compact.root()

    @property
    def prediction_hash(self) -> str:
        return "sha256:" + self.root().hex()

    def tree_head(self) -> TreeHead:
        return TreeHead(self.size, self.root())

    def compact_state(self) -> tuple[int, tuple[bytes, ...]]:
        """``(size, hashes)``: persist these to resume the root without the file."""
        return self._compact.size, self._compact.hashes

    def append(self, record: Mapping[str, Any]) -> LogEntry:
        """Serialize ``record`` once (JCS), write it as one line and, if durable, fsync.

        Returns only after the line is on disk: the caller may then send the next request.
        Raises ``NotCanonicalJSON`` (nothing written) if the record is not JCS-representable.
        """
        fd = self._writable_fd()
        if "seq" in record and record["seq"] != self.size:
            raise ValueError(f"record seq {record['seq']!r} is not the next position {self.size}")
        line = canonical_bytes(dict(record))
        try:
            _write_all(fd, line + b"\n")
            if self._durable:
                os.fsync(fd)
        except OSError:
            # Part of the line may be on disk: stop appending; ``open`` truncates the torn line.
            self._broken = True
            raise
        leaf = leaf_hash(line)
        self._compact.append(leaf)
        return LogEntry(self.size - 1, leaf, line)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> PredictionLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _writable_fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"the log {self._path} is closed")
        if self._broken:
            raise LogCorrupted(f"a write to {self._path} failed; reopen the log to recover")
        return self._fd


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        raise LogLocked(f"another process is appending to {path}") from exc


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _rehash(fd: int) -> tuple[CompactRange, int]:
    """Rehash every complete line; return the range and the byte length of the complete lines."""
    size, stack, torn = _hash_lines(_chunks_of_fd(fd))
    return CompactRange.from_state(size, stack), os.fstat(fd).st_size - len(torn)


def _chunks_of_fd(fd: int) -> Iterator[bytes]:
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        offset += len(chunk)
        yield chunk


# --- verifier side ------------------------------------------------------------------------------


def _chunks_of(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(view), _CHUNK):
        yield bytes(view[start : start + _CHUNK])


def _chunks_of_file(path: Path) -> Iterator[bytes]:
    with path.open("rb", buffering=0) as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


def _hash_lines(chunks: Iterable[bytes]) -> tuple[int, list[bytes], bytes]:
    """Hash newline-terminated lines: ``(size, compact range hashes, bytes after the last \\n)``.

    The hot loop of verification and of resuming: leaf hashing and the compact-range merge are
    inlined with local names (about 2 us per record); no JSON is parsed.
    """
    sha256 = hashlib.sha256
    stack: list[bytes] = []
    size = 0
    carry = b""
    for chunk in chunks:
        lines = (carry + chunk).split(b"\n") if carry else chunk.split(b"\n")
        carry = lines.pop()
        for line in lines:
            node = sha256(b"\x00" + line).digest()
            n = size
            while n & 1:
                node = sha256(b"\x01" + stack.pop() + node).digest()
                n >>= 1
            stack.append(node)
            size += 1
    return size, stack, carry


def _tree_head(chunks: Iterable[bytes]) -> TreeHead:
    size, stack, torn = _hash_lines(chunks)
    if torn:
        raise LogCorrupted(f"the log's last line (record {size}) has no newline: a torn write")
    return TreeHead(size, fold_root(stack))


def root_of_bytes(data: bytes) -> TreeHead:
    """Tree size and root of a stored ``predictions.jsonl`` content."""
    return _tree_head(_chunks_of(data))


def root_of_file(path: Path) -> TreeHead:
    """Tree size and root of a ``predictions.jsonl`` file, streamed in 8 MiB chunks."""
    return _tree_head(_chunks_of_file(path))


def leaf_hashes_of(data: bytes) -> list[bytes]:
    if data and not data.endswith(b"\n"):
        raise LogCorrupted("the log's last line has no newline: a torn write")
    return [leaf_hash(line) for line in data.split(b"\n")[:-1]]


def inclusion_proof_of(data: bytes, seq: int) -> tuple[TreeHead, bytes, list[bytes]]:
    """``(tree head, leaf hash, RFC 6962 audit path)`` proving record ``seq`` is in the log."""
    hashes = leaf_hashes_of(data)
    compact = CompactRange()
    compact.extend(hashes)
    return TreeHead(compact.size, compact.root()), hashes[seq], inclusion_proof(hashes, seq)


def iter_records(data: bytes) -> Iterator[dict[str, Any]]:
    """Parse the stored lines (for the scorer; verification never needs this)."""
    for number, line in enumerate(data.split(b"\n")[:-1]):
        record = json.loads(line)
        if not isinstance(record, dict):
            raise LogCorrupted(f"record {number} is not a JSON object")
        yield record
