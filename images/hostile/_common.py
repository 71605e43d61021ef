"""Shared forward-protocol plumbing for the hostile test images (standard library only).

Each hostile image runs one script from this folder; they all speak enough of
``future-ts-forward/1`` (DESIGN.md section 3) to reach their misbehaviour.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

Message = dict[str, Any]


def log(text: str) -> None:
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()


def send(message: Message) -> None:
    # allow_nan stays True on purpose: wrong-shape sends NaN tokens.
    sys.stdout.buffer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    sys.stdout.buffer.flush()


def messages() -> Iterator[Message]:
    """Incoming objects until end of input; unreadable lines are skipped."""
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            log(f"skipping unreadable line of {len(raw)} bytes")
            continue
        if isinstance(message, dict):
            yield message


def last_observed(series: Message) -> float:
    """The last finite value of a series' history (0.0 when there is none)."""
    for value in reversed(series.get("target") or []):
        if isinstance(value, int | float) and value == value:
            return float(value)
    return 0.0


def prediction(request: Message, value: Callable[[Message, int], float]) -> Message:
    """A well-formed prediction whose mean at step h is ``value(series, h)``; quantiles = mean."""
    horizon = int(request.get("horizon", 0))
    levels = request.get("quantile_levels") or []
    forecasts = []
    for series in request.get("series") or []:
        mean = [float(value(series, h)) for h in range(horizon)]
        quantiles = {repr(float(level)): list(mean) for level in levels}
        forecasts.append({"item_id": series.get("item_id"), "mean": mean, "quantiles": quantiles})
    return {"type": "prediction", "request_id": request.get("request_id"), "forecasts": forecasts}


def constant(request: Message, c: float) -> Message:
    return prediction(request, lambda _series, _h: c)


def last_value(request: Message, offset: float = 0.0) -> Message:
    return prediction(request, lambda series, _h: last_observed(series) + offset)


def serve(
    on_forecast: Callable[[Message], Message | None],
    on_hello: Callable[[Message], None] | None = None,
) -> int:
    """The normal loop: ready after hello, ``on_forecast`` for each request, exit 0 on bye/EOF."""
    for message in messages():
        kind = message.get("type")
        if kind == "hello":
            if on_hello is not None:
                on_hello(message)
            send({"type": "ready"})
        elif kind == "forecast":
            reply = on_forecast(message)
            if reply is not None:
                send(reply)
        elif kind == "bye":
            return 0
    return 0
