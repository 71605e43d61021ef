"""Judging one answer line of ``future-ts-forward/1``: ok, invalid, error, or a protocol break.

Rules (DESIGN.md section 3; counted and logged, never silently fixed):

* Not JSON, not an object, or an object whose ``type`` is neither ``prediction`` nor ``error``:
  a **protocol break** (the stream cannot be trusted any more; the task ends ``protocol_error``).
* ``NaN`` / ``Infinity`` literals, numbers that overflow to infinity, integers outside the
  I-JSON safe range and strings that are not valid Unicode cannot be logged as canonical JSON:
  the prediction is **invalid** and the log keeps the raw bytes' prefix, size and sha256.
* A wrong ``request_id``, a missing/extra/duplicate ``item_id``, ``mean`` or a quantile of the
  wrong length, a non-number (``bool`` is not a number; integers are), quantile keys that are not
  exactly the task's levels as ``repr(float(level))``: **invalid**, the parsed answer is logged.
* ``{"type":"error",...}`` with the right ``request_id``: the model declined; status **error**.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

AnswerStatus = Literal["ok", "invalid", "error"]
_SAFE_INT = 2**53
_MAX_DEPTH = 64
RAW_PREFIX_CHARS = 256


class _NonFiniteLiteral(ValueError):
    pass


def _reject_constant(name: str) -> float:
    raise _NonFiniteLiteral(name)


@dataclass(frozen=True, slots=True)
class Verdict:
    status: AnswerStatus
    answer: Any  # canonical-JSON-safe: the parsed answer, or a raw summary
    detail: str | None = None
    protocol_break: bool = False


def raw_summary(data: bytes, total_bytes: int | None = None) -> dict[str, Any]:
    """What the log keeps of bytes that cannot be logged as JSON: a prefix, the size, a hash."""
    return {
        "raw_prefix": data[: RAW_PREFIX_CHARS * 4].decode("utf-8", "replace")[:RAW_PREFIX_CHARS],
        "raw_bytes": len(data) if total_bytes is None else total_bytes,
        "raw_sha256": hashlib.sha256(data).hexdigest() if total_bytes is None else None,
    }


def _unsafe(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` cannot be serialized as RFC 8785 canonical JSON, or ``None``."""
    kind = type(value)
    if kind is float:
        return None if math.isfinite(value) else "a number overflows to infinity"
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds an unpaired surrogate"
        return None
    if kind is int:
        return None if -_SAFE_INT < value < _SAFE_INT else "an integer is outside +-2**53"
    if value is None or kind is bool:
        return None
    if depth > _MAX_DEPTH:
        return "nesting is too deep"
    if kind is list:
        for item in value:
            reason = _unsafe(item, depth + 1)
            if reason:
                return reason
        return None
    if kind is dict:
        for key, item in value.items():
            reason = _unsafe(key, depth + 1) or _unsafe(item, depth + 1)
            if reason:
                return reason
        return None
    return f"unexpected value of type {kind.__name__}"


def _numbers_problem(values: Any, horizon: int, what: str) -> str | None:
    if type(values) is not list:
        return f"{what} is not a list"
    if len(values) != horizon:
        return f"{what} has {len(values)} values, horizon is {horizon}"
    for v in values:
        kind = type(v)
        if kind is float:
            if not math.isfinite(v):
                return f"{what} holds a non-finite number"
        elif kind is not int:
            return f"{what} holds a non-number ({kind.__name__})"
    return None


def _forecast_problem(
    fc: Any, horizon: int, quantile_keys: frozenset[str]
) -> str | None:
    if type(fc) is not dict:
        return "a forecast is not an object"
    item = fc.get("item_id")
    problem = _numbers_problem(fc.get("mean"), horizon, f"mean of {item!r}")
    if problem:
        return problem
    quantiles = fc.get("quantiles", {} if not quantile_keys else None)
    if type(quantiles) is not dict:
        return f"quantiles of {item!r} are not an object"
    if set(quantiles) != quantile_keys:
        got, want = sorted(quantiles), sorted(quantile_keys)
        return f"quantile keys of {item!r} are {got}, expected {want}"
    for key, values in quantiles.items():
        problem = _numbers_problem(values, horizon, f"quantile {key} of {item!r}")
        if problem:
            return problem
    return None


def _item_id(fc: Any) -> str | None:
    item = fc.get("item_id") if type(fc) is dict else None
    return item if type(item) is str else None


def _prediction_problem(
    obj: dict[str, Any], item_ids: Sequence[str], horizon: int, quantile_keys: frozenset[str]
) -> str | None:
    forecasts = obj.get("forecasts")
    if type(forecasts) is not list:
        return "forecasts is not a list"
    seen = [_item_id(fc) for fc in forecasts]
    if len(seen) != len(item_ids) or set(seen) != set(item_ids):
        return f"forecasts cover {len(seen)} items, not exactly the {len(item_ids)} requested"
    for fc in forecasts:
        problem = _forecast_problem(fc, horizon, quantile_keys)
        if problem:
            return problem
    return None


def judge_answer(
    line: bytes,
    *,
    request_id: str,
    item_ids: Sequence[str],
    horizon: int,
    quantile_keys: frozenset[str],
) -> Verdict:
    """The verdict on one answer line to the request ``request_id``."""
    try:
        obj = json.loads(line, parse_constant=_reject_constant)
    except _NonFiniteLiteral as exc:
        return Verdict("invalid", raw_summary(line), f"non-finite literal {exc.args[0]}")
    except (ValueError, RecursionError):
        return Verdict("invalid", raw_summary(line), "not JSON", protocol_break=True)
    if type(obj) is not dict:
        return Verdict("invalid", raw_summary(line), "not a JSON object", protocol_break=True)
    kind = obj.get("type")
    if kind not in ("prediction", "error"):
        detail = f"unexpected message type {str(kind)[:64]!r}"
        return Verdict("invalid", raw_summary(line), detail, protocol_break=True)
    reason = _unsafe(obj)
    if reason:
        return Verdict("invalid", raw_summary(line), f"not canonical JSON: {reason}")
    if obj.get("request_id") != request_id:
        return Verdict("invalid", obj, f"request_id {str(obj.get('request_id'))[:80]!r} "
                                       f"does not match {request_id!r}")
    if kind == "error":
        return Verdict("error", obj, "the model answered with an error")
    problem = _prediction_problem(obj, item_ids, horizon, quantile_keys)
    if problem:
        return Verdict("invalid", obj, problem)
    return Verdict("ok", obj)


def quantile_keys_for(levels: Sequence[float]) -> frozenset[str]:
    """The quantile keys a prediction must carry: ``repr(float(level))`` per task level."""
    return frozenset(repr(float(level)) for level in levels)
