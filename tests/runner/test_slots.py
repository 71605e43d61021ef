"""Exclusive cpusets: disjoint leases across threads and processes, freed when a holder dies."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.hardware import HardwareClass
from app.settings import Settings
from workers.runner.errors import HardwareClassUnservable, NoCpuSlotFree
from workers.runner.slots import CpuSlots, format_cpuset, parse_cpuset

ONE = HardwareClass("cpu-1c", cpus=1, memory_mb=512, pids=64)
TWO = HardwareClass("cpu-2c", cpus=2, memory_mb=512, pids=64)
FOUR = HardwareClass("cpu-4c", cpus=4, memory_mb=512, pids=64)


def test_cpuset_syntax_round_trip() -> None:
    assert parse_cpuset("0-3,6, 8-9") == [0, 1, 2, 3, 6, 8, 9]
    assert format_cpuset([9, 8, 6, 0, 1, 2, 3]) == "0-3,6,8-9"
    assert format_cpuset([1]) == "1"
    with pytest.raises(ValueError):
        parse_cpuset("3-1")


def test_groups_and_slot_counts(tmp_path: Path) -> None:
    slots = CpuSlots([0, 1, 2, 3], tmp_path)
    assert slots.groups(ONE) == [(0,), (1,), (2,), (3,)]
    assert slots.groups(TWO) == [(0, 1), (2, 3)]
    assert slots.slot_count(TWO) == 2 and slots.slot_count(FOUR) == 1
    small = CpuSlots([0, 1], tmp_path / "small")
    assert not small.can_serve(FOUR) and small.slot_count(FOUR) == 0
    with pytest.raises(HardwareClassUnservable):
        small.acquire(FOUR, "run-x")


def test_leases_never_share_a_cpu(tmp_path: Path) -> None:
    slots = CpuSlots([0, 1], tmp_path)
    a = slots.acquire(ONE, "run-a")
    b = slots.acquire(ONE, "run-b")
    assert {a.cpuset, b.cpuset} == {"0", "1"}
    with pytest.raises(NoCpuSlotFree):
        slots.acquire(ONE, "run-c")
    with pytest.raises(NoCpuSlotFree):
        slots.acquire(TWO, "run-d")
    assert set(slots.holders()) == {0, 1}
    a.release()
    with pytest.raises(NoCpuSlotFree):  # CPU 1 is still held: no whole 2-CPU group
        slots.acquire(TWO, "run-d")
    c = slots.acquire(ONE, "run-c")
    assert c.cpuset == a.cpuset
    b.release()
    c.release()
    with slots.acquire(TWO, "run-d") as d:
        assert d.cpuset == "0-1"
    assert not d.held


def test_another_process_holds_its_cpus_until_it_dies(tmp_path: Path) -> None:
    holder = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from app.hardware import HardwareClass
        from workers.runner.slots import CpuSlots
        lease = CpuSlots([0, 1], Path({str(tmp_path)!r})).acquire(
            HardwareClass("c", cpus=1, memory_mb=1, pids=1), "other-worker")
        print(lease.cpuset, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout is not None
        theirs = proc.stdout.readline().strip()
        slots = CpuSlots([0, 1], tmp_path)
        mine = slots.acquire(ONE, "this-worker")
        assert {theirs, mine.cpuset} == {"0", "1"}
        assert "other-worker" in slots.holders()[int(theirs)]
        with pytest.raises(NoCpuSlotFree):
            slots.acquire(ONE, "third", timeout_s=0.2)
        proc.kill()
        proc.wait()
        again = slots.acquire(ONE, "third", timeout_s=2)  # the kernel dropped the dead lock
        assert again.cpuset == theirs
        again.release()
        mine.release()
    finally:
        proc.kill()
        proc.wait()


def test_from_settings_uses_worker_cpus(tmp_path: Path) -> None:
    settings = Settings(worker_cpus="0-1", data_dir=tmp_path)
    slots = CpuSlots.from_settings(settings)
    assert slots.host_cpus == (0, 1)
    assert slots.state_dir == (tmp_path / "runner" / "cpus").resolve()
