"""Answer judging: ok / invalid / error / protocol break, and what the log keeps."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785

from workers.runner.validate import judge_answer, quantile_keys_for

KEYS = quantile_keys_for([0.1, 0.5, 0.9])


def answer(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "prediction",
        "request_id": "w1-0",
        "forecasts": [
            {"item_id": "a", "mean": [1.0, 2.0], "quantiles": {k: [1.0, 2] for k in KEYS}},
            {"item_id": "b", "mean": [3.0, 4.0], "quantiles": {k: [0.0, 0.0] for k in KEYS}},
        ],
    }
    base.update(overrides)
    return base


def judge(obj: Any) -> Any:
    line = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return judge_answer(line, request_id="w1-0", item_ids=["a", "b"], horizon=2,
                        quantile_keys=KEYS)


def test_quantile_keys_are_repr_of_float() -> None:
    assert quantile_keys_for([0.1, 0.5, 1 / 3]) == {"0.1", "0.5", repr(1 / 3)}


def test_valid_prediction_is_ok_and_logged_as_parsed() -> None:
    verdict = judge(answer())
    assert verdict.status == "ok" and verdict.answer == answer()
    rfc8785.dumps(verdict.answer)


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (answer(request_id="w2-0"), "request_id"),
        (answer(forecasts=[]), "cover"),
        (answer(forecasts=[answer()["forecasts"][0]] * 2), "cover"),
        (answer(forecasts=[{**answer()["forecasts"][0], "mean": [1.0]},
                           answer()["forecasts"][1]]), "horizon"),
        (answer(forecasts=[{**answer()["forecasts"][0], "mean": [True, 1.0]},
                           answer()["forecasts"][1]]), "non-number"),
        (answer(forecasts=[{**answer()["forecasts"][0], "mean": [None, 1.0]},
                           answer()["forecasts"][1]]), "non-number"),
        (answer(forecasts=[{**answer()["forecasts"][0], "quantiles": {"0.10": [1, 2]}},
                           answer()["forecasts"][1]]), "quantile keys"),
        (answer(forecasts=[{"item_id": ["a"], "mean": [1, 2]}, answer()["forecasts"][1]]), "cover"),
    ],
)
def test_wrong_shapes_are_invalid_not_fatal(obj: Any, why: str) -> None:
    verdict = judge(obj)
    assert verdict.status == "invalid" and not verdict.protocol_break
    assert why in (verdict.detail or "")
    assert verdict.answer == obj


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"prediction","request_id":"w1-0","forecasts":[{"item_id":"a","mean":[NaN,1]}]}',
        b'{"type":"prediction","request_id":"w1-0","forecasts":[],"x":1e999}',
        b'{"type":"prediction","request_id":"w1-0","forecasts":[],"x":9007199254740993}',
        b'{"type":"prediction","request_id":"w1-0","forecasts":[],"x":"\\ud800"}',
    ],
)
def test_not_canonical_json_is_invalid_with_raw_summary(line: bytes) -> None:
    verdict = judge(line)
    assert verdict.status == "invalid" and not verdict.protocol_break
    assert set(verdict.answer) == {"raw_prefix", "raw_bytes", "raw_sha256"}
    assert verdict.answer["raw_bytes"] == len(line)
    rfc8785.dumps(verdict.answer)


@pytest.mark.parametrize(
    "line", [b"not json", b"\xff\xfe\x00", b"[1,2]", b'{"type":"log"}', b'"prediction"',
             b"[" * 100000 + b"]" * 100000],
)
def test_garbage_is_a_protocol_break(line: bytes) -> None:
    verdict = judge(line)
    assert verdict.protocol_break and verdict.status == "invalid"
    assert verdict.answer["raw_bytes"] == len(line)
    assert len(verdict.answer["raw_prefix"]) <= 256


def test_error_answer() -> None:
    verdict = judge({"type": "error", "request_id": "w1-0", "message": "no"})
    assert verdict.status == "error" and verdict.answer["message"] == "no"


def test_integers_count_as_numbers() -> None:
    obj = answer()
    obj["forecasts"][0]["mean"] = [1, 2]
    assert judge(obj).status == "ok"


def test_no_quantiles_needed_when_the_task_has_none() -> None:
    obj = {"type": "prediction", "request_id": "w1-0",
           "forecasts": [{"item_id": "a", "mean": [1.0, 2.0]}]}
    verdict = judge_answer(json.dumps(obj).encode(), request_id="w1-0", item_ids=["a"],
                           horizon=2, quantile_keys=frozenset())
    assert verdict.status == "ok"
