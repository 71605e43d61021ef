"""Line framing over real pipes: partial lines, caps, deadlines, unsolicited output."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import pytest

from workers.runner.framing import LineReader, LineWriter

NS = 1_000_000_000


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def reader(fd: int, total: int = 1 << 20) -> LineReader:
    return LineReader(fd, max_total_bytes=total, now_ns=time.perf_counter_ns)


def soon(seconds: float = 1.0) -> int:
    return time.perf_counter_ns() + int(seconds * NS)


def test_partial_lines_are_joined(pipe: tuple[int, int]) -> None:
    r, w = pipe
    lr = reader(r)

    def feed() -> None:
        for part in (b'{"a"', b":1}", b"\n\n   \n", b'{"b":2}\n{"c"'):
            os.write(w, part)
            time.sleep(0.02)

    threading.Thread(target=feed).start()
    first = lr.read_line(soon(), 1000)
    assert first.kind == "line" and first.line == b'{"a":1}'
    second = lr.read_line(soon(), 1000)
    assert second.kind == "line" and second.line == b'{"b":2}'
    assert lr.has_unsolicited()  # the start of '{"c"' is waiting
    lr.close()


def test_too_long_is_detected_without_reading_everything(pipe: tuple[int, int]) -> None:
    r, w = pipe
    lr = reader(r)

    def write_a_lot() -> None:
        with contextlib.suppress(OSError):  # the reader end is closed at teardown
            os.write(w, b"x" * 200_000)

    threading.Thread(target=write_a_lot, daemon=True).start()
    result = lr.read_line(soon(), 1000)
    assert result.kind == "too_long" and result.pending_bytes > 1000
    assert lr.total_bytes <= 2 * 65536  # stopped after the first chunk or two
    lr.close()


def test_a_complete_line_over_the_cap_is_too_long(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"y" * 3000 + b"\n")
    result = reader(r).read_line(soon(), 1000)
    assert result.kind == "too_long" and result.pending_bytes == 3000


def test_flood_cap(pipe: tuple[int, int]) -> None:
    r, w = pipe
    lr = reader(r, total=10_000)
    os.write(w, b"\n" * 20_000)
    assert lr.read_line(soon(), 1000).kind == "flood"


def test_timeout_and_eof(pipe: tuple[int, int]) -> None:
    r, w = pipe
    lr = reader(r)
    started = time.perf_counter()
    assert lr.read_line(soon(0.1), 1000).kind == "timeout"
    assert time.perf_counter() - started >= 0.1
    os.write(w, b"partial")
    os.close(w)
    result = lr.read_line(soon(), 1000)
    assert result.kind == "eof" and result.pending_bytes == 7


def test_cancel(pipe: tuple[int, int]) -> None:
    r, _ = pipe
    flag = threading.Event()
    threading.Timer(0.1, flag.set).start()
    result = reader(r).read_line(soon(5), 1000, flag.is_set, poll_interval_s=0.02)
    assert result.kind == "cancelled"


def test_writer_deadline_and_broken_pipe(pipe: tuple[int, int]) -> None:
    r, w = pipe
    writer = LineWriter(w, now_ns=time.perf_counter_ns)
    assert writer.write(b"z" * 10_000_000, soon(0.1)) == "timeout"
    os.close(r)
    assert writer.write(b"z\n", soon(0.1)) == "broken"
    writer.close()
