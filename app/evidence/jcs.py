"""RFC 8785 (JSON Canonicalization Scheme) bytes: the one serialization of every hashed JSON value.

Prediction records and report payloads are serialized exactly once, with this function, and the
bytes are stored verbatim; verifiers hash stored bytes and never re-serialize.

The PyPI ``rfc8785`` package (Trail of Bits, pure Python, no dependencies, typed) is used rather
than a local encoder: it is a maintained, spec-complete implementation of RFC 8785 (ECMAScript
number formatting, UTF-16 key ordering, the exact string escaping) tested against the RFC's own
vectors, which is where hand-written canonicalizers usually go wrong. It already refuses NaN,
Infinity and integers outside the IEEE 754 safe range; this module turns those refusals into
``NotCanonicalJSON`` so callers catch one error type.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, cast

import rfc8785

from app.evidence.errors import NotCanonicalJSON

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | Sequence["JSONValue"] | Mapping[str, "JSONValue"]


def canonical_bytes(value: object) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of ``value``.

    ``value`` is built from ``dict`` (string keys), ``list``/``tuple``, ``str``, ``int``, ``float``,
    ``bool`` and ``None``. NaN, +/-Infinity, integers beyond 2**53-1, non-string keys, lone
    surrogates and any other type raise ``NotCanonicalJSON``: a record that cannot be represented
    exactly is refused rather than silently altered.
    """
    try:
        # Any object is accepted on purpose: rfc8785 checks types at runtime and we want one error.
        encoded = rfc8785.dumps(cast(Any, value))
    except rfc8785.CanonicalizationError as exc:
        raise NotCanonicalJSON(str(exc)) from exc
    assert isinstance(encoded, bytes)
    return encoded


def canonical_sha256(value: object) -> str:
    """Lowercase hex SHA-256 of ``canonical_bytes(value)``."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()
