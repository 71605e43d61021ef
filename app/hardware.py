"""Hardware classes: the fixed machine shape a task is evaluated on (seed contract item 1)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareClass:
    id: str
    cpus: int  # whole CPUs, pinned with a cpuset and capped with a CFS quota
    memory_mb: int  # memory limit; swap equals memory, i.e. no swap
    pids: int
    tmpfs_mb: int = 64
    gpu: str | None = None
    description: str = ""

    @property
    def queue(self) -> str:
        return f"runs.{self.id}"


HARDWARE_CLASSES: dict[str, HardwareClass] = {
    hc.id: hc
    for hc in (
        HardwareClass("cpu-1c-1g", cpus=1, memory_mb=1024, pids=128,
                      description="1 pinned CPU, 1 GiB RAM, no swap, no GPU"),
        HardwareClass("cpu-2c-4g", cpus=2, memory_mb=4096, pids=256,
                      description="2 pinned CPUs, 4 GiB RAM, no swap, no GPU"),
    )
}


def get_hardware_class(class_id: str) -> HardwareClass:
    """Look up a class; raises ``KeyError`` for an unknown id."""
    return HARDWARE_CLASSES[class_id]
