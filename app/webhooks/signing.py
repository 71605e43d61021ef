"""Webhook signatures: ``X-FutureTS-Signature: t=<unix seconds>,v1=<hex>``.

``v1`` = HMAC-SHA256(secret, ``"<t>.<body>"``). Receivers recompute it over the raw body they
received, compare in constant time, and refuse a ``t`` too far from their clock (replays).
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-FutureTS-Signature"
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(secret: str, header: str, body: bytes, now: int,
           tolerance_s: int = DEFAULT_TOLERANCE_S) -> bool:
    """True if ``header`` signs ``body`` with ``secret`` and its time is within tolerance."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        timestamp = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, timestamp, body)
    return any(hmac.compare_digest(expected, candidate) for candidate in fields.get("v1", []))
