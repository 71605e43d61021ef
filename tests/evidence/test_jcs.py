"""RFC 8785 canonical bytes through the ``rfc8785`` package, and the values it must refuse."""

from __future__ import annotations

import math

import pytest

from app.evidence.errors import NotCanonicalJSON
from app.evidence.jcs import canonical_bytes, canonical_sha256


def test_keys_sorted_no_whitespace_and_utf8() -> None:
    value = {"b": [1, 2.5, None, True], "a": "é\n", "\u20ac": {"z": 0, "y": -0.0}}
    assert canonical_bytes(value) == '{"a":"é\\n","b":[1,2.5,null,true],"€":{"y":0,"z":0}}'.encode()


def test_rfc8785_number_serialization() -> None:
    # RFC 8785 section 3.2.2.3 / appendix B: ECMAScript number formatting.
    assert canonical_bytes([1e21, 1e-7, 0.000001, 333333333.3333333, 1.0]) == (
        b"[1e+21,1e-7,0.000001,333333333.3333333,1]"
    )


def test_rfc8785_utf16_key_order() -> None:
    # RFC 8785 section 3.2.3: keys sort by UTF-16 code units, so U+10000 < U+FB33.
    assert canonical_bytes({"\ufb33": 1, "\U00010000": 2}) == '{"\U00010000":2,"\ufb33":1}'.encode()


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, {"x": [math.nan]}, 2**53, {1: "int key"}, b"bytes",
              object(), "\ud800"],
)
def test_refuses_values_json_cannot_represent_exactly(value: object) -> None:
    with pytest.raises(NotCanonicalJSON):
        canonical_bytes(value)


def test_not_canonical_json_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        canonical_bytes(math.nan)


def test_sha256_of_canonical_bytes() -> None:
    assert canonical_sha256({}) == (
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
