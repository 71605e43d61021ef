"""Calendar arithmetic for the few pandas frequencies the catalog uses, in the standard library.

Every timestamp in the catalog marks the *start* of its period (pandas ``YS``, ``QS``, ``MS``) or
the anchor day of its week (``W-SAT``), in UTC. Timestamps travel as ``YYYY-MM-DDTHH:MM:SSZ``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# pandas alias -> (months, days) per period.
FREQ_STEPS: dict[str, tuple[int, int]] = {
    "YS": (12, 0),
    "QS": (3, 0),
    "MS": (1, 0),
    "W-SAT": (0, 7),
}


def shift(ts: datetime, freq: str, periods: int) -> datetime:
    """``ts`` moved by ``periods`` whole periods of ``freq`` (negative moves back)."""
    months, days = FREQ_STEPS[freq]
    if months:
        if ts.day != 1:
            raise ValueError(f"{freq} timestamps start a month; got {ts.isoformat()}")
        index = ts.year * 12 + (ts.month - 1) + months * periods
        return ts.replace(year=index // 12, month=index % 12 + 1)
    return ts + timedelta(days=days * periods)


def timestamps(start: datetime, freq: str, n: int) -> list[datetime]:
    """The ``n`` consecutive period timestamps that begin at ``start``."""
    return [shift(start, freq, i) for i in range(n)]


def iso(ts: datetime) -> str:
    """UTC ISO 8601 with a ``Z``; naive datetimes are refused rather than guessed."""
    if ts.tzinfo is None:
        raise ValueError("naive datetime")
    utc = ts.astimezone(UTC)
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}Z"


def parse_iso(text: str) -> datetime:
    """Parse an ISO 8601 time; it must carry a timezone."""
    ts = datetime.fromisoformat(text)
    if ts.tzinfo is None:
        raise ValueError(f"timestamp without a timezone: {text!r}")
    return ts
