"""The platform clock port. Every platform timestamp comes from here, never from a client."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time, timezone-aware UTC."""
        ...

    def monotonic_ns(self) -> int:
        """A monotonic counter for durations; unrelated to wall time."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic_ns(self) -> int:
        return time.perf_counter_ns()


def isoformat(ts: datetime) -> str:
    """ISO 8601 with microseconds and a Z suffix: the one format the platform writes."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
